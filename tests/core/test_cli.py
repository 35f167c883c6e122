"""The `kernel-lsp` command: help, and one-line errors with exit status 2 for bad invocations."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "kernel_lsp"]


def run(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, **(env or {})})


def test_help_lists_subcommands() -> None:
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("serve", "optimize", "eval", "bench", "answers"):
        assert cmd in r.stdout


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "kernel-lsp"
    assert exe.exists(), "the kernel-lsp console script is not installed next to python"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("kernel-lsp ")


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def test_unknown_subcommand() -> None:
    assert "invalid choice" in one_line_error(run("frobnicate"))


def test_no_subcommand_prints_help_and_exits_2() -> None:
    r = run()
    assert r.returncode == 2 and "optimize" in r.stderr


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in one_line_error(run("optimize", str(tmp_path / "nope.py")))


def test_not_python(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    assert "not a Python file" in one_line_error(run("optimize", str(f)))


def test_folder(tmp_path: Path) -> None:
    assert "is a folder" in one_line_error(run("eval", str(tmp_path), str(tmp_path)))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("x = 1")
    f.chmod(0)
    assert "cannot read" in one_line_error(run("optimize", str(f)))


def test_file_without_a_model(tmp_path: Path) -> None:
    f = tmp_path / "plain.py"
    f.write_text("def f():\n    return 1\n")
    assert "no nn.Module subclass" in one_line_error(run("optimize", str(f)))


def test_file_with_syntax_error(tmp_path: Path) -> None:
    f = tmp_path / "broken.py"
    f.write_text("class Model(nn.Module:\n    pass\n")
    assert "syntax error" in one_line_error(run("optimize", str(f)))


def test_module_without_inputs(tmp_path: Path) -> None:
    f = tmp_path / "noinputs.py"
    f.write_text("import torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n")
    msg = one_line_error(run("optimize", str(f)))
    assert "get_inputs()" in msg and "get_init_inputs()" in msg


def test_unknown_module_name(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n"
                 "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    assert "no module named 'Other'" in one_line_error(run("optimize", str(f), "--module", "Other"))


def test_bad_setting_flag(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n"
                 "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    assert "out of range" in one_line_error(run("optimize", str(f), "--samples", "0"))
    assert "unknown setting" in one_line_error(run("optimize", str(f), "--set", "colour=blue"))
    assert "KEY=VALUE" in one_line_error(run("optimize", str(f), "--set", "colour"))


def test_bad_setting_in_environment(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n"
                 "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    msg = one_line_error(run("optimize", str(f), env={"KERNEL_LSP_STRATEGY": "magic"}))
    assert "environment variable KERNEL_LSP_STRATEGY: strategy = 'magic'" in msg


def test_bad_tcp_address() -> None:
    r = run("serve", "--tcp", "nonsense")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
