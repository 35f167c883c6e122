"""Every strategy with a scripted model double and the REAL CPU evaluator (C++ load_inline candidates).

The candidates are the four files in kernels/ (compile error, wrong, slow, fast); the evaluator's build cache is
keyed by source, so each compiles once per machine and the rest of the suite reuses the builds.
"""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from evaluator.verdict import Profile, Timing, Verdict
from kernel_lsp import dataset, reward
from kernel_lsp.cli import main
from kernel_lsp.config import Settings
from kernel_lsp.generation import Engine, EngineEvent
from kernel_lsp.generation.engine import STAGES
from kernel_lsp.history import History
from kernel_lsp.tasks import task_from_file

from .conftest import KERNELS, ROOT
from .doubles import ScriptedBackend
from .test_dataset_reward import THOUGHTS, think

pytestmark = pytest.mark.slow

TASK = task_from_file(ROOT / "examples" / "relu_scale.py")


def answer(name: str, summary: str | None = None, prose: str = "Here is the kernel.") -> str:
    src = (KERNELS / f"{name}.py").read_text()
    tail = f"\nSummary: {summary}\n" if summary else "\n"
    return f"{prose}\n```python\n{src}```{tail}"


PROSE = "I would write a CUDA kernel here, but first let me explain how GPUs work in general terms."


@pytest.fixture(scope="module")
def evaluator():
    from evaluator import EvalSettings, Evaluator

    ev = Evaluator(EvalSettings(device="cpu", trials=2, timing_calls=20, timing_budget_s=3.0, time_compiled=False,
                                compile_workers=2))
    yield ev
    ev.close()


@pytest.fixture
def history(tmp_path):
    with History(tmp_path / ".kernel-lsp") as h:
        yield h


def run(evaluator, history, replies, *, settings: Settings | None = None, **kw):
    backend = ScriptedBackend(replies, count=kw.pop("count", None))
    events: list[EngineEvent] = []
    engine = Engine(settings or Settings(), evaluator, history, backend)
    result = engine.run(TASK, on_event=events.append, **kw)
    return result, backend, events


def user_prompts(backend: ScriptedBackend) -> list[str]:
    """The generation prompts (summaries/triage/analysis excluded), in order."""
    out = []
    for msgs in backend.calls:
        u = msgs[-1]["content"]
        if not u.startswith(("In one or two sentences", "## Triage")) and "## Analysis (no code yet)" not in u:
            out.append(u)
    return out


def test_refine_compile_error_then_wrong_then_correct_then_faster(evaluator, history):
    replies = [answer("compile_error", "fused pass"), answer("wrong", "forgot nothing"),
               answer("slow", "accumulate"), answer("fast")]  # the last one has no Summary line
    result, backend, events = run(evaluator, history, replies, strategy="refine", rounds=4)
    assert result.state == "done", result.message
    assert [c.status for c in result.candidates] == ["compile_error", "incorrect", "correct", "correct"]
    slow, fast = result.candidates[2], result.candidates[3]
    assert fast.ms < slow.ms
    assert result.best is not None and result.best.id == fast.id

    p = user_prompts(backend)
    assert len(p) == 4 and "Output contract" in p[0] and "Fix this candidate" not in p[0]
    assert "failed at compile" in p[1] and "error" in p[1] and "relu_scale_cpu_broken" in p[1]
    assert "results are wrong" in p[2] and "max abs error" in p[2] and "trials passed" in p[2]
    assert "Make this correct candidate faster" in p[3] and "speedup" in p[3]
    assert "compile_error" in p[3] and "Idea: fused pass" in p[3]  # compact history with the model's summary

    steps = history.steps(result.job_id)
    gen = [s for s in steps if s.role == "generate"]
    assert [s.round for s in gen] == [1, 2, 3, 4]
    assert [s.extra["template"] for s in gen] == ["zero_shot", "refine_compile", "refine_wrong", "refine_speed"]
    assert all(s.candidate_id and s.prompt_tokens and s.completion_tokens for s in gen)
    assert gen[0].summary == "fused pass"
    assert [s.role for s in steps].count("summarise") == 1 and gen[3].summary == "Summary: scripted kernel."[9:]
    # parents: each refine step refined the previous one here
    assert [s.extra["parent_step"] for s in gen] == [None, gen[0].id, gen[1].id, gen[2].id]
    # scores and rewards: ordered, and the winning chain is credited
    assert gen[0].score < gen[1].score < gen[2].score < gen[3].score
    assert all(s.reward is not None for s in gen) and gen[3].reward > 0
    job = history.job(result.job_id)
    assert job.state == "done" and job.strategy == "refine"
    # the job's line offers the fast kernel only when it is shown faster than eager (on a busy CPU it may not be)
    assert job.message.startswith("best: candidate" if result.offered else "no kernel "), job.message

    stages = [e.stage for e in events]
    assert set(stages) <= set(STAGES) and stages[-1] == "done" and events[-1].percentage == 100
    for s in ("sampling", "extracting", "compiling", "verifying", "timing", "round"):
        assert s in stages
    pct = [e.percentage for e in events]
    assert pct == sorted(pct)
    assert any(e.candidate is not None and e.candidate.status == "correct" for e in events)


def test_best_of_n_picks_the_best(evaluator, history):
    replies = [PROSE, answer("wrong", "w"), answer("slow", "s"), answer("fast", "f")]
    result, backend, _ = run(evaluator, history, replies, strategy="best-of-n", samples=4)
    assert result.state == "done" and len(result.prompt_tokens_per_round) == 1
    assert len(set(backend.seeds)) == 4  # one seed per sample
    assert [c.status for c in result.candidates] == ["incorrect", "correct", "correct"]
    assert result.best is not None and "relu_scale_cpu\"" in result.best.source  # the fast one
    steps = [s for s in history.steps(result.job_id) if s.role == "generate"]
    assert len(steps) == 4 and steps[0].candidate_id is None and "no code" in steps[0].extra["extraction_error"]
    assert steps[0].score == 0.0
    # the CLI's table and JSON for this run
    from rich.console import Console

    from kernel_lsp.cli.optimize import no_kernel_attempts, result_json, result_table

    failed = no_kernel_attempts(history, result.job_id)
    con = Console(width=150, record=True)
    con.print(result_table(TASK, result, failed))
    text = con.export_text()
    assert (f"{result.best.number} *" in text) == (result.offered is not None)  # * only on the offered result
    assert "no kernel" in text and "incorrect" in text
    data = result_json(TASK, result, "", failed)
    assert data["best"] == (result.offered.number if result.offered else None)
    assert data["fastest_correct"] == result.best.number and len(data["candidates"]) == 3
    assert len(data["no_kernel"]) == 1
    assert data["candidates"][0]["max_abs_err"] > 1


def test_profile_guided_default_samples_and_refines(evaluator, history):
    replies = [answer("wrong", "w"), PROSE, answer("fast", "f"), answer("slow", "s")]
    settings = Settings(samples=2, rounds=2)
    result, backend, events = run(evaluator, history, replies, settings=settings)  # default strategy
    assert result.state == "done", result.message
    assert history.job(result.job_id).strategy == "profile-guided"
    p = user_prompts(backend)
    assert "Profile of the reference" in p[0] and "| op |" in p[0]
    assert "results are wrong" in p[2]  # round 2 refines the best of round 1 (wrong > no kernel)
    assert history.profile(TASK.key, TASK.fingerprint) is not None
    assert "profiling" in [e.stage for e in events]
    assert result.best is not None and len(result.prompt_tokens_per_round) == 2


def test_zero_shot_and_one_shot(evaluator, history):
    result, backend, _ = run(evaluator, history, [PROSE], strategy="zero-shot")
    assert result.state == "done" and result.best is None and result.candidates == []
    assert "no correct candidate in 1 attempt(s): 1 no kernel" in result.message
    result, backend, _ = run(evaluator, history, [answer("fast", "f")], strategy="one-shot")
    assert result.best is not None and result.best.correct
    assert "## Example" in user_prompts(backend)[0]


def test_agent_analysis_retrieval_triage(evaluator, history):
    # a correct kernel of another task in the workspace history: the agent retrieves it
    other = history.add_candidate("other.py::Model", "fp", (KERNELS / "fast.py").read_text(),
                                  verdict=Verdict("correct", timing=Timing(speedup_eager=1.7)))
    assert other.correct
    replies = [answer("wrong", "w"), PROSE, answer("fast", "f"), PROSE]
    result, backend, _ = run(evaluator, history, replies, strategy="agent", samples=2, rounds=2)
    assert result.state == "done", result.message
    assert result.best is not None
    roles = [s.role for s in history.steps(result.job_id)]
    assert roles[0] == "analysis" and roles[1] == "retrieval" and "triage" in roles
    p = user_prompts(backend)
    assert "## Plan" in p[0] and "fuse relu and scale" in p[0]
    assert "Similar kernels that passed the oracle before" in p[0] and "kernel for other.py::Model" in p[0]
    assert p[0] == p[1] and "results are wrong" in p[2]  # triage answered "1": the wrong one is refined


def test_context_stays_bounded(evaluator, history, tokenizer_count):
    huge = "<think>" + "secret reasoning " * 1500 + "</think>\n" + "blah " * 500
    replies = [answer("wrong", "w"), huge, answer("slow", "s"), huge, answer("fast", "f"), huge,
               answer("wrong", "w2"), answer("fast", "f2")]
    settings = Settings(history_window=3)
    result, backend, _ = run(evaluator, history, replies, settings=settings, strategy="refine", rounds=8,
                             count=tokenizer_count)
    tokens = result.prompt_tokens_per_round
    assert len(tokens) == 8 and max(tokens) <= 8000
    later = tokens[1:]
    assert max(later) - min(later) <= 0.2 * max(later), tokens  # flat after round 2
    for prompt in user_prompts(backend):
        assert "secret reasoning" not in prompt and "<think>" not in prompt and "blah blah" not in prompt
    steps = [s for s in history.steps(result.job_id) if s.role == "generate"]
    assert [s.prompt_tokens for s in steps] == tokens
    print("prompt tokens per round:", tokens)


def test_cancel_stops_the_run_promptly(evaluator, history):
    cancel = threading.Event()

    def on_event(e: EngineEvent) -> None:
        if e.stage == "compiling":
            cancel.set()

    backend = ScriptedBackend([answer("fast", "f")] * 3)
    t0 = time.perf_counter()
    result = Engine(Settings(), evaluator, history, backend).run(TASK, strategy="refine", rounds=3, cancel=cancel,
                                                                 on_event=on_event)
    assert result.state == "cancelled" and history.job(result.job_id).state == "cancelled"
    assert len(backend.seeds) == 1
    assert time.perf_counter() - t0 < 60


def test_export_jsonl_has_the_trajectory(evaluator, history, tmp_path):
    result, _, _ = run(evaluator, history, [answer("wrong", "w"), answer("fast", "f")], strategy="refine", rounds=2)
    n = history.export_jsonl(tmp_path / "t.jsonl", [result.job_id])
    rows = [json.loads(l) for l in (tmp_path / "t.jsonl").read_text().splitlines()]
    gen = [r for r in rows if r["role"] == "generate"]
    assert n == len(rows) and len(gen) == 2
    assert gen[1]["verdict"]["status"] == "correct" and gen[1]["kernel"] and gen[1]["reward"] is not None
    assert json.loads(gen[0]["prompt"])[0]["role"] == "system"


def test_refine_starts_from_the_files_own_model_new(evaluator, history, tmp_path):
    from kernel_lsp.tasks import task_from_source

    file_src = (ROOT / "examples" / "relu_scale.py").read_text() + "\n\n" + (KERNELS / "wrong.py").read_text()
    task = task_from_source(file_src, path=str(tmp_path / "mine.py"))
    assert task.candidate_src
    backend = ScriptedBackend([answer("fast", "f")])
    result = Engine(Settings(), evaluator, history, backend).run(task, strategy="refine", rounds=1)
    assert result.state == "done" and result.best is not None
    steps = history.steps(result.job_id)
    assert steps[0].role == "seed" and steps[0].score == pytest.approx(0.2)  # the file's kernel: wrong results
    p = user_prompts(backend)
    assert "results are wrong" in p[0] and "The file's ModelNew:" in p[0]
    gen = [s for s in steps if s.role == "generate"]
    assert gen[0].extra["parent_step"] == steps[0].id and gen[0].reward > 0


def test_a_backend_failure_fails_the_job_and_stops_evaluations(evaluator, history):
    from kernel_lsp.generation.errors import GenerationError

    def boom(_messages):
        raise GenerationError("cannot reach http://127.0.0.1:9/v1/chat/completions: connection refused")

    backend = ScriptedBackend([answer("slow", "s"), boom])
    t0 = time.perf_counter()
    result = Engine(Settings(), evaluator, history, backend).run(TASK, strategy="best-of-n", samples=2)
    assert result.state == "failed" and "connection refused" in result.message
    job = history.job(result.job_id)
    assert job.state == "failed" and "connection refused" in job.message
    assert time.perf_counter() - t0 < 120


# --- the trajectories as a dataset, and the oracle as a batch reward (docs/DATASET.md) ---------------------------
def test_export_writes_one_row_per_step_and_no_prompt_holds_chain_of_thought(evaluator, tmp_path, capsys):
    replies = [think(0, answer("wrong", "skip the scale")), think(1, PROSE + "\nSummary: vectorise later."),
               think(2, PROSE)]  # one evaluation: the kernel and verdict fields are the reward test's too
    with History(tmp_path / ".kernel-lsp") as h:
        h.save_profile(TASK.key, TASK.fingerprint, Profile(device="cpu"))  # the reference checked: no profiling
        result = Engine(Settings(), evaluator, h, ScriptedBackend(replies)).run(TASK, strategy="refine", rounds=3)
        assert result.state == "done", result.message
    out = tmp_path / "steps.jsonl"
    assert main(["export", "--from", str(tmp_path), "--out", str(out)]) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(tuple(r) == dataset.COLUMNS for r in rows)
    assert [r["status"] for r in rows] == ["incorrect", "no_kernel", "no_kernel"]
    assert [r["round"] for r in rows] == [1, 2, 3] and {r["role"] for r in rows} == {"generate"}
    assert rows[0]["parent_step"] is None and rows[1]["parent_step"] == rows[2]["parent_step"] == rows[0]["step"]
    assert {r["task"] for r in rows} == {TASK.key} and {r["strategy"] for r in rows} == {"refine"}
    assert [r["template"] for r in rows] == ["zero_shot", "refine_wrong", "refine_wrong"]
    assert "ModelNew" in rows[0]["kernel"] and rows[0]["candidate"] is not None
    # the check that failed was made: verify is checked, and the timing it stopped is not
    assert {"compile", "verify"} <= set(rows[0]["checked"]) and "time" in rows[0]["not_checked"]
    assert rows[1]["kernel"] is None and rows[1]["message"] and rows[1]["candidate"] is None
    assert rows[0]["summary"] == "skip the scale" and rows[1]["summary"] == "vectorise later."
    assert [r["score"] for r in rows] == [0.2, 0.0, 0.0] and rows[0]["reward"] > 0 > rows[1]["reward"]
    for i, r in enumerate(rows):  # the completion as written, chain of thought included; the prompts without any
        assert THOUGHTS[i] in r["completion"]
        assert [m["role"] for m in r["prompt"]] == ["system", "user"] and "class Model" in r["prompt"][1]["content"]
        text = json.dumps(r["prompt"])
        assert "SECRET" not in text and "<think>" not in text and not r["reasoning_in_prompt"]
    assert "vectorise later" in rows[2]["prompt"][1]["content"]  # the summary is carried, the reasoning is not
    # filters
    only = tmp_path / "incorrect.jsonl"
    assert main(["export", "--from", str(tmp_path / ".kernel-lsp"), "--out", str(only), "--status", "incorrect"]) == 0
    assert [json.loads(line)["step"] for line in only.read_text().splitlines()] == [rows[0]["step"]]
    assert main(["export", "--from", str(tmp_path), "--out", str(only), "--strategy", "agent"]) == 0
    assert only.read_text() == ""


def test_reward_batch_correct_wrong_and_no_code(evaluator):
    rows = [{"id": "a", "reference": TASK.reference_src, "completion": think(2, answer("fast", "one pass"))},
            {"id": "b", "reference": TASK.reference_src, "completion": answer("wrong")},
            {"id": "c", "reference": TASK.reference_src, "completion": think(1, PROSE)},
            {"id": "d", "completion": PROSE}]
    res = reward.score(rows, evaluator=evaluator)
    assert [r["id"] for r in res] == ["a", "b", "c", "d"] and all(tuple(r) == reward.FIELDS for r in res)
    assert [r["status"] for r in res] == ["correct", "incorrect", "no_kernel", "bad_input"]
    good, wrong, none, bad = res
    assert "verify" in good["checked"] and good["speedup_eager"] > 0 and good["speedup_eager_ci_pct"] is not None
    assert "SECRET" not in good["kernel"]
    assert good["kernel_finding"] == "own_code" and wrong["kernel_finding"] is None  # speed is paid for own code
    assert good["score"] == pytest.approx(1 + math.log2(1 + good["speedup_eager"]))
    assert good["reward"] == pytest.approx(good["score"])  # a first step: all of its score is its own gain
    assert wrong["score"] == 0.2 and wrong["reward"] == pytest.approx(0.2) and "verify" in wrong["checked"]
    assert "time" in wrong["not_checked"]  # the wrong answer was found; its speed was never measured
    assert none["score"] == 0.0 and none["reward"] == pytest.approx(-0.05) and none["kernel"] is None
    assert bad["reward"] is None and "reference" in bad["message"]


# --- the build started while the model still writes -------------------------------------------------------------
class _Streaming(ScriptedBackend):
    """Streams each kernel answer through `on_text`; after its code block it waits for the oracle's early build to
    end (at most 240 s) before it writes the rest, as a model writes its summary after the code."""

    def __init__(self, replies, built: threading.Event):
        super().__init__(replies)
        self.built = built
        self.rest_at: list[float] = []

    def chat(self, messages, *, max_tokens, temperature, seed, stop=None, cancel=None, on_text=None):
        c = super().chat(messages, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop,
                         cancel=cancel)
        if on_text is not None and "```" in c.text:
            cut = c.text.index("\n", c.text.rindex("```")) + 1
            for i in range(0, cut, 37):  # pieces that split lines and fences, as tokens do
                on_text(c.text[i:min(i + 37, cut)])
            self.built.wait(240)
            self.rest_at.append(time.monotonic())
            on_text(c.text[cut:])
        return c


class _Watching:
    """The real evaluator, its early builds recorded."""

    def __init__(self, ev):
        self.ev = ev
        self.built = threading.Event()
        self.prebuilt: list[tuple[str, str, float]] = []

    def prebuild(self, reference_src, candidate_src, *, cancel=None):
        status = self.ev.prebuild(reference_src, candidate_src, cancel=cancel)
        self.prebuilt.append((candidate_src, status, time.monotonic()))
        self.built.set()
        return status

    def __getattr__(self, name):
        return getattr(self.ev, name)


def test_a_candidate_is_built_while_the_model_still_writes_its_summary(evaluator, history):
    nonce = f"early {time.time_ns()}"  # a source no earlier run built
    text = answer("fast", "one fused pass").replace("// One fused pass", f"// One fused pass ({nonce})")
    assert nonce in text
    oracle = _Watching(evaluator)
    backend = _Streaming([text], oracle.built)
    result = Engine(Settings(), oracle, history, backend).run(TASK, strategy="best-of-n", samples=1)
    assert result.state == "done", result.message
    (cand,) = result.candidates
    assert len(oracle.prebuilt) == 1, oracle.prebuilt
    src, status, done_at = oracle.prebuilt[0]
    assert status == "ok" and src == cand.source and nonce in src
    assert done_at <= backend.rest_at[0]  # built before the answer's last words were written
    assert cand.status == "correct", cand.verdict and cand.verdict.message
    comp = cand.verdict.stage("compile")
    assert comp is not None and "cached build" in comp.message, comp and comp.message


def test_no_early_build_from_code_in_the_reasoning_or_a_block_still_open():
    from kernel_lsp.generation.early import EarlyBuild

    src = (KERNELS / "fast.py").read_text()
    calls: list[str] = []
    built = threading.Event()

    def prebuild(ref, cand, *, cancel=None):
        calls.append(cand)
        built.set()
        return "ok"

    early = EarlyBuild(prebuild, TASK.reference_src)
    for piece in ["<think>\nmaybe:\n```python\n", src, "```\n", "no, better later.\n"]:
        early.feed(piece)
    assert not calls  # the block closed inside the reasoning
    early.feed("</think>\nHere it is.\n```python\n")
    for i in range(0, len(src), 11):
        early.feed(src[i:i + 11])
    assert not calls  # the block is still open
    early.feed("``")
    early.feed("`\nSumm")  # the closing fence, split across pieces
    assert built.wait(10) and calls == [src]
    early.feed("ary: one pass.\n```python\n" + src + "```\n")  # the same code again: not built twice
    for t in early.threads:
        t.join(10)
    assert calls == [src]


def test_the_oracle_failing_to_profile_is_not_the_modules_fault(history):
    """The evaluator losing a worker while it profiles the reference is the oracle's failure: the job says so and
    the model is asked nothing; "Model does not run" is kept for a module that really does not run."""
    from evaluator.errors import EvaluatorError
    from evaluator.errors import ReferenceFailed as EvaluatorReferenceFailed

    class Lost:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def profile(self, reference_src, cancel=None, on_stage=None):  # type: ignore[no-untyped-def]
            raise self.error

    backend = ScriptedBackend([answer("fast", "f")])
    lost = Engine(Settings(), Lost(EvaluatorError("profiling the reference: worker is gone")), history, backend)
    res = lost.run(TASK, strategy="zero-shot")
    assert res.state == "failed" and not res.reference_failed and res.oracle_failed, res
    assert "could not profile" in res.message and "worker is gone" in res.message, res.message
    assert "does not run" not in res.message
    broken = Engine(Settings(), Lost(EvaluatorReferenceFailed("NameError: name 'torhc' is not defined")), history,
                    backend)
    res = broken.run(TASK, strategy="zero-shot")
    assert res.state == "failed" and res.reference_failed and "does not run" in res.message, res
    assert backend.calls == []  # the model was asked nothing either time


def test_the_model_loads_while_the_reference_is_profiled(history):
    """A first click waits for the longer of the model's load and the reference's profile, not their sum; the
    model is still asked nothing before the reference ran (here it does not: the job fails as the module's)."""
    from evaluator.errors import EvaluatorError
    from evaluator.errors import ReferenceFailed as EvaluatorReferenceFailed

    profiling, loading = threading.Event(), threading.Event()

    class Profiles:
        def profile(self, reference_src, cancel=None, on_stage=None):  # type: ignore[no-untyped-def]
            profiling.set()
            if not loading.wait(10):
                raise EvaluatorError("the model's load never began while the reference was profiled")
            raise EvaluatorReferenceFailed("NameError: name 'torhc' is not defined")

    class Loads(ScriptedBackend):
        overlapped = False

        def prepare(self) -> None:
            loading.set()
            self.overlapped = profiling.wait(10)

    backend = Loads([answer("fast", "f")])
    events: list[EngineEvent] = []
    res = Engine(Settings(), Profiles(), history, backend).run(TASK, strategy="zero-shot", on_event=events.append)
    assert backend.overlapped, "the reference was not profiled while the model loaded"
    assert res.state == "failed" and res.reference_failed and "does not run" in res.message, res
    assert backend.calls == []
    assert [e.message for e in events if e.stage == "loading model"] == [
        f"loading scripted (profiling {TASK.module} meanwhile)"]


def test_a_model_that_fails_to_load_fails_the_job_and_cancels_the_profile_in_flight(history):
    from evaluator.errors import EvaluatorError
    from kernel_lsp.generation.errors import BackendUnavailable

    profiling, seen = threading.Event(), []

    class Waits:
        def profile(self, reference_src, cancel=None, on_stage=None):  # type: ignore[no-untyped-def]
            profiling.set()
            seen.append(cancel.wait(10))
            raise EvaluatorError("cancelled")

    class Broken(ScriptedBackend):
        def prepare(self) -> None:
            profiling.wait(10)
            raise BackendUnavailable("model file not found: /nowhere/model.gguf")

    res = Engine(Settings(), Waits(), history, Broken([])).run(TASK, strategy="zero-shot")
    assert res.state == "failed" and "model file not found" in res.message, res
    assert not res.reference_failed and not res.oracle_failed
    assert seen == [True]  # the profile in flight was cancelled, not waited out


def test_the_ctypes_binding_asks_for_it_and_its_answer_is_a_correct_kernel(evaluator, history):
    """settings.binding = "ctypes": the prompt asks for launchers called through ctypes and shows the worked example
    in that form; the model's answer in that form is a correct kernel, whose own code is found by the evaluator's
    sampling or, in a call too short to sample, said to be unmeasured (never "none of its own code ran")."""
    from kernel_lsp.generation.prompts import PromptLibrary

    src = PromptLibrary().example("relu_scale_cpu_ctypes.py").replace("relu_scale_cpu_ctypes", "engine_ctypes")
    reply = f"Here is the kernel.\n```python\n{src}```\nSummary: relu and scale through ctypes\n"
    result, backend, _ = run(evaluator, history, [reply], strategy="one-shot", settings=Settings(binding="ctypes"))
    prompt = user_prompts(backend)[0]
    assert "ctypes form" in prompt and "ctypes.CDLL(load_inline(" in prompt and "torch/extension.h" not in prompt
    assert result.best is not None and result.best.correct, result.message
    v = result.best.verdict
    assert v.kernel is not None and v.kernel.finding in ("own_code", "not_checked"), v.kernel.message


class _Coming:
    """The oracle with `candidates_coming` (the evaluator's): what the job held, and when, beside its verdicts."""

    def __init__(self, ev):
        self.ev = ev
        self.log: list[str] = []

    def candidates_coming(self, reference_src, n=0):
        from contextlib import contextmanager

        @contextmanager
        def held():
            assert reference_src == TASK.reference_src
            self.log.append(f"coming {n}")
            try:
                yield
            finally:
                self.log.append("done")
        return held()

    def evaluate(self, *a, **k):
        v = self.ev.evaluate(*a, **k)
        self.log.append(f"verdict {v.status}")
        return v

    def __getattr__(self, name):
        return getattr(self.ev, name)


def test_a_job_holds_its_references_compile_through_its_first_round_only(evaluator, history):
    """The first round's verdicts do not wait for the reference's torch.compile (the evaluator puts it off while
    the job says candidates are coming); the rounds after it are timed against it."""
    oracle = _Coming(evaluator)
    backend = ScriptedBackend([answer("wrong", "w"), answer("fast", "f")])
    result = Engine(Settings(), oracle, history, backend).run(TASK, strategy="refine", rounds=2)
    assert result.state == "done", result.message
    assert oracle.log == ["coming 1", "verdict incorrect", "done", "verdict correct"], oracle.log
