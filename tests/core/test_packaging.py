"""A non-editable install carries the prompt templates (prompts/ → kernel_lsp.prompts) and the evaluator's data."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_ships_prompts_and_data(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("kernel_lsp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "kernel_lsp/prompts/__init__.py" in names
    shipped = {n for n in names if n.startswith("kernel_lsp/prompts/")}
    for f in (REPO / "prompts").rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            rel = "kernel_lsp/prompts/" + f.relative_to(REPO / "prompts").as_posix()
            assert rel in shipped, f"{rel} missing from the wheel"
    for f in (REPO / "evaluator").rglob("*"):
        if f.is_file() and f.suffix in (".toml", ".json", ".cu", ".cpp", ".h") and "__pycache__" not in f.parts:
            rel = f.relative_to(REPO).as_posix()
            assert rel in names, f"{rel} missing from the wheel"
    assert "kernel_lsp/cli/main.py" in names and "evaluator/verdict.py" in names
    # and the files are found at run time from an installed (non-editable) copy
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    code = ("import importlib.resources as r, kernel_lsp; "
            "print(kernel_lsp.__file__); print(sorted(p.name for p in r.files('kernel_lsp.prompts').iterdir()))")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert str(target) in out.stdout.splitlines()[0]
    assert "__init__.py" in out.stdout
