"""The wiring reads top-down, checked from the imports themselves: nothing imports the shell (`kernel_lsp/cli/`);
the server's features import the server class for typing only; below the server nothing imports LSP types or
the server; the product carries no test hooks."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "kernel_lsp"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, whether only under `if TYPE_CHECKING:`) for each import of a file, resolved to absolute."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            typing_only |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in typing_only) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
            out += [(n, id(node) in typing_only) for n in [base, *names]]
    return out


def _files(*under: str) -> list[Path]:
    return [p for u in under for p in (PKG / u).rglob("*.py")] if under else list(PKG.rglob("*.py"))


def test_nothing_imports_the_shell() -> None:
    for f in _files():
        if (f.name == "__main__.py" and f.parent == PKG) or f.parent == PKG / "cli":
            continue
        assert not [m for m, _ in _imports(f) if m == "kernel_lsp.cli" or m.startswith("kernel_lsp.cli.")], f


def test_features_import_the_server_class_for_typing_only() -> None:
    for f in _files("server/features"):
        runtime = [m for m, typing in _imports(f) if m.startswith("kernel_lsp.server.server") and not typing]
        assert not runtime, (f, runtime)


def test_the_server_imports_no_feature() -> None:
    """Features register themselves (handlers and event subscriptions); the server class knows none of them."""
    imported = [m for m, _ in _imports(PKG / "server" / "server.py")]
    assert not [m for m in imported if m.startswith("kernel_lsp.server.features")], imported


def test_below_the_server_nothing_knows_lsp() -> None:
    for f in [*_files("jobs", "generation", "history", "documents", "bench"), PKG / "services.py",
              PKG / "oracle.py", PKG / "verdicts.py", PKG / "tasks.py", PKG / "config.py"]:
        bad = [m for m, _ in _imports(f) if m.split(".")[0] in ("lsprotocol", "pygls")
               or m.startswith("kernel_lsp.server")]
        assert not bad, (f, bad)


def test_no_test_hooks_in_the_product() -> None:
    for f in _files():
        text = f.read_text()
        assert "KERNEL_LSP_TEST" not in text and "TEST ONLY" not in text, f
