"""The oracle's trust boundary, pinned from the imports and the wire: what runs beside candidate code
(evaluator/sandboxed/) is imported by nothing else; the evaluator's own modules (its top, stages/, processes/) never
import torch at module level, so the caller's process (the language server) stays torch-free; no stage imports a
worker side; every op a worker answers is in its role's table, with a typed request and reply; what a sandboxed
worker replies is a Claim."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evaluator import messages as M

ROOT = Path(__file__).resolve().parents[2] / "evaluator"


def _module_imports(path: Path, top_level_only: bool) -> list[str]:
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


def test_nothing_outside_sandboxed_imports_it() -> None:
    for f in ROOT.rglob("*.py"):
        if "sandboxed" in f.relative_to(ROOT).parts:
            continue
        bad = [m for m in _module_imports(f, top_level_only=False) if m.startswith("evaluator.sandboxed")]
        if f.name == "worker.py" and f.parent == ROOT:  # the process entry hands sandboxed roles to their module
            bad = [m for m in bad if m not in ("evaluator.sandboxed.harden", "evaluator.sandboxed.harden.harden",
                                               "evaluator.sandboxed.serve", "evaluator.sandboxed.serve.start")]
        assert not bad, (f, bad)


def test_trusted_workers_import_no_candidate_side_module() -> None:
    for f in (ROOT / "trusted").rglob("*.py"):
        assert not [m for m in _module_imports(f, False) if m.startswith("evaluator.sandboxed")], f


WORKER_SIDES = ("trusted", "sandboxed", "shared")
NOT_MODULES = ("examples",)  # example candidates: data for prompts and tests, never imported by the evaluator


def _parent_modules() -> list[str]:
    """The evaluator's own modules: its top, the stages and the process machinery (every folder but the workers')."""
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                  if p.relative_to(ROOT).parts[0] not in WORKER_SIDES + NOT_MODULES)


def test_the_parent_has_its_folders() -> None:
    mods = _parent_modules()
    for folder in ("stages/", "stages/device/", "processes/"):
        assert any(m.startswith(folder) for m in mods), folder


@pytest.mark.parametrize("f", _parent_modules())
def test_the_evaluators_own_modules_import_no_torch_at_top(f: str) -> None:
    mods = _module_imports(ROOT / f, top_level_only=True)
    assert not [m for m in mods if m.split(".")[0] in ("torch", "numpy")], (f, mods)
    assert not [m for m in mods if m.startswith(("evaluator.trusted", "evaluator.shared.arena",
                                                   "evaluator.shared.calls", "evaluator.shared.tree",
                                                   "evaluator.shared.devices"))], (f, mods)


def test_no_stage_imports_a_worker_side() -> None:
    """The stages ask workers over the wire; they never import what runs in a worker, at any depth."""
    for f in (ROOT / "stages").rglob("*.py"):
        bad = [m for m in _module_imports(f, top_level_only=False)
               if m.startswith(("evaluator.trusted", "evaluator.sandboxed"))]
        assert not bad, (f, bad)


def test_every_role_answers_only_its_table_and_sandboxed_replies_are_claims() -> None:
    for role, ops in M.OPS.items():
        for name, op in ops.items():
            assert op.name == name and issubclass(op.request, M.Message) and issubclass(op.reply, M.Message)
            if role not in M.TRUSTED_ROLES:
                assert issubclass(op.reply, M.Claim), (role, name, op.reply)
            else:
                assert not issubclass(op.reply, M.Claim), (role, name, op.reply)


def test_a_reply_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(M.WireError):
        M.RunClaim.from_wire({"scalars": [], "problems": "none"})
    with pytest.raises(M.WireError):
        M.CheckResult.from_wire({"max_abs_err": 0.0})  # `match` is required
    with pytest.raises(M.WireError):
        M.Loaded.from_wire({"seconds": True})  # a bool is not a number on this wire
    ok = M.Fill.from_wire(M.Fill(arena=1, items=[M.FillItem(slot=0, seed=1, variant="task")], poison=[0]).to_wire())
    assert ok.items[0].seed == 1 and ok.poison == [0]
