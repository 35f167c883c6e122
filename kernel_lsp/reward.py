"""The oracle as a reward for a batch of completions: `score(rows)` and `kernel-lsp reward IN.jsonl --out OUT.jsonl`.

Each row is a (reference source, completion text) pair. The kernel is extracted from the completion as the engine
extracts it (reasoning sections stripped, the output contract checked), every kernel of the batch goes to the
oracle side by side (compiles in parallel, the device shared as the evaluator shares it), and each row gets the
verdict's status, speedups with their uncertainty, what was and was not checked, and the reward the history would
have given the step: `generation.rewards` for a first step (no earlier round, no descendants). A completion
without a usable kernel is a row with status `no_kernel` (the reward of a step without one); a row that is not a
(reference, completion) pair is a row with status `bad_input`. Neither stops the batch.

`ray="auto"` (or an address) evaluates on a Ray cluster, one evaluator per GPU, as `kernel-lsp bench --ray` does.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evaluator.settings import EvalSettings
from evaluator.verdict import INFRA_ERROR, Verdict

from .config import Settings
from .dataset import verdict_fields
from .generation import rewards
from .generation.context import NO_KERNEL
from .generation.errors import ExtractionError
from .generation.extract import extract
from .oracle import Oracle, eval_settings

BAD_INPUT = "bad_input"
FIELDS = ("index", "id", "status", "kernel_finding", "message", "kernel", "speedup_eager", "speedup_eager_ci_pct",
          "speedup_uncertain", "speedup_compiled", "ms", "eager_ms", "checked", "not_checked", "score", "reward")


def step_reward(score: float | None) -> float | None:
    """The reward the history gives a step with this score that starts a trajectory (the engine's own function)."""
    if score is None:
        return None
    return rewards.compute_rewards([rewards.StepScore(0, 1, score)])[0]


def _result(index: int, row: Any, status: str, message: str, kernel: str | None = None,
            verdict: Verdict | None = None) -> dict[str, Any]:
    sc = rewards.score(verdict) if status != BAD_INPUT else None
    fields = verdict_fields(verdict)
    fields.pop("verdict")
    out = {"index": index, "id": row.get("id") if isinstance(row, dict) else None, "status": status,
           "message": message, "kernel": kernel, **fields, "score": sc, "reward": step_reward(sc)}
    return {k: out[k] for k in FIELDS}


def check_row(row: Any) -> str:
    """Why a row is not a (reference, completion) pair; "" when it is one."""
    if not isinstance(row, dict):
        return f"expected a JSON object with \"reference\" and \"completion\", got {type(row).__name__}"
    missing = [k for k in ("reference", "completion") if not isinstance(row.get(k), str)]
    if missing:
        return " and ".join(f'"{k}"' for k in missing) + (" is" if len(missing) == 1 else " are") + \
            " missing or not text"
    if not row["reference"].strip():
        return '"reference" is empty'
    return ""


def open_oracle(settings: Settings | EvalSettings | None = None, *, device: str | None = None,
                ray: str | None = None) -> Oracle:
    if isinstance(settings, EvalSettings):
        es = dataclasses.replace(settings, device=device) if device else settings
    else:
        s = settings or Settings()
        es = eval_settings(dataclasses.replace(s, device=device) if device else s)
    from .bench.main import make_evaluator

    return make_evaluator(es, ray)


def score(rows: Iterable[Any], *, evaluator: Oracle | None = None, settings: Settings | EvalSettings | None = None,
          device: str | None = None, ray: str | None = None, time: bool = True,
          on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """One result per row, in order (fields: FIELDS). `evaluator` is used as given and left open; without one an
    evaluator is opened from `settings` (`device`: "cpu", "cuda", "cuda:1"; `ray`: a Ray address) and closed at
    the end, and only when some row holds a kernel. `on_result` is given each result as soon as it is known (rows
    without a kernel first, then verdicts as they finish; its `index` says which row), one call at a time."""
    rows = list(rows)
    results: list[dict[str, Any] | None] = [None] * len(rows)
    pending: list[tuple[int, str, str]] = []
    told = threading.Lock()

    def done(i: int, res: dict[str, Any]) -> None:
        results[i] = res
        if on_result is not None:
            with told:
                on_result(res)

    for i, row in enumerate(rows):
        problem = check_row(row)
        if problem:
            done(i, _result(i, row, BAD_INPUT, problem))
            continue
        try:
            kernel = extract(row["completion"], row["reference"]).source
        except ExtractionError as e:
            done(i, _result(i, row, NO_KERNEL, e.problem))
            continue
        pending.append((i, row["reference"], kernel))
    if pending:
        pending.sort(key=lambda item: item[1])  # a reference's rows together: its reference process is reused
        ev = evaluator or open_oracle(settings, device=device, ray=ray)

        def one(item: tuple[int, str, str]) -> None:
            i, ref, kernel = item
            try:
                v = ev.evaluate(ref, kernel, time=time)
            except Exception as e:  # noqa: BLE001 - the oracle's trouble is this row's, not the batch's
                v = Verdict(status=INFRA_ERROR, message=f"evaluator failed: {type(e).__name__}: {e}")
            done(i, _result(i, rows[i], v.status, v.message, kernel, v))

        workers = getattr(ev, "parallelism", None) or 32  # as Evaluator.evaluate_many: the evaluator gates the rest
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(len(pending), workers)),
                                    thread_name_prefix="kernel-reward") as pool:
                list(pool.map(one, pending))
        finally:
            if evaluator is None:
                ev.close()
    return [r for r in results if r is not None]
