"""A workspace's services: a setting the evaluator reads starts a new evaluator on the next job (derived from the one
mapping, so none is forgotten: `time_compiled` included); any other setting keeps the running one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from evaluator.settings import EvalSettings
from kernel_lsp.config import ACCEPT_TARGETS, LOG_LEVELS, STRATEGIES, Settings
from kernel_lsp.oracle import eval_settings
from kernel_lsp.services import WorkspaceServices


class RecordingEvaluator:
    """Stands in for the evaluator: remembers its settings and whether it was closed."""

    def __init__(self, settings: EvalSettings) -> None:
        self.settings = settings
        self.closed = False

    def device_info(self) -> dict:
        return {"name": "cpu"}

    def close(self) -> None:
        self.closed = True


def _other_value(name: str, value: object) -> object:
    choices = {"strategy": STRATEGIES, "accept_target": ACCEPT_TARGETS, "log_level": LOG_LEVELS,
               "device": ("auto", "cpu", "cuda")}
    if name in choices:
        return next(c for c in choices[name] if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    return f"{value}-other" if name != "endpoint" else "http://127.0.0.1:9/v1"


def test_the_evaluator_restarts_exactly_when_its_settings_change(tmp_path: Path) -> None:
    started: list[RecordingEvaluator] = []

    def make(es: EvalSettings) -> RecordingEvaluator:
        started.append(RecordingEvaluator(es))
        return started[-1]

    base = Settings()
    services = WorkspaceServices(base, tmp_path, make_evaluator=make)
    restarting: set[str] = set()
    for f in dataclasses.fields(Settings):
        services.configure(base, tmp_path)
        before = services.evaluator()
        changed = base.replace(**{f.name: _other_value(f.name, getattr(base, f.name))})
        services.configure(changed, tmp_path)
        after = services.evaluator()
        assert after.settings == eval_settings(changed)
        if after is not before:
            restarting.add(f.name)
            services.close_retired()
            assert before.closed
        else:
            assert not before.closed
    assert {"time_compiled", "timing_calls", "trials", "atol", "rtol", "device", "gpu", "seed", "compile_timeout",
            "run_timeout", "compile_workers"} == restarting
    services.close()
    assert all(e.closed for e in started)


def test_settings_take_effect_for_the_next_evaluator_only_when_it_is_replaced(tmp_path: Path) -> None:
    services = WorkspaceServices(Settings(time_compiled=True), tmp_path, make_evaluator=RecordingEvaluator)
    assert services.evaluator_settings().time_compiled is True
    ev = services.evaluator()
    services.configure(Settings(time_compiled=False), tmp_path)
    assert services.evaluator_settings().time_compiled is False
    assert services.evaluator() is not ev and services.evaluator().settings.time_compiled is False


def test_the_editors_verdicts_do_not_wait_for_the_references_compile_and_the_clis_do(tmp_path: Path) -> None:
    editor = WorkspaceServices(Settings(), tmp_path, make_evaluator=RecordingEvaluator, interactive=True)
    assert editor.evaluator().settings.compiled_wait is False
    ev = editor.evaluator()
    editor.configure(Settings(), tmp_path)  # the same settings: the same evaluator
    assert editor.evaluator() is ev
    assert WorkspaceServices(Settings(), tmp_path, make_evaluator=RecordingEvaluator).evaluator().settings.compiled_wait


def test_state_and_prompts_folders_are_the_workspaces(tmp_path: Path) -> None:
    services = WorkspaceServices(Settings(prompts_dir="my-prompts", state_dir=".ks"), tmp_path)
    assert services.state_dir() == tmp_path / ".ks"
    assert services.prompts_dir() == tmp_path / "my-prompts"
    assert services.history_if_exists() is None and not (tmp_path / ".ks").exists()  # reading creates nothing
    assert services.history().path == tmp_path / ".ks" / "history.sqlite"
    services.close()
