"""The generation engine: strategy -> rounds -> samples -> oracle -> feedback, recorded step by step in History.

`Engine.run` is blocking and honours `cancel` promptly: the event goes to the backend (checked between tokens)
and to the evaluator, and is checked between every two steps. Events may come from several threads (evaluations
overlap with the next sample's generation); they are delivered one at a time.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from evaluator.verdict import CORRECT, INFRA_ERROR, Profile, Verdict
from kernel_lsp import verdicts
from kernel_lsp.config import Settings
from kernel_lsp.history import CandidateRecord, History, ranking
from kernel_lsp.history.store import GENERATION_KIND
from kernel_lsp.oracle import Oracle
from kernel_lsp.tasks import Task

from . import rewards
from .backends import Backend, open_backend
from .context import NO_KERNEL, Attempt, ContextBuilder, Target
from .early import EarlyBuild
from .errors import ExtractionError, GenerationError, OracleFailed, ReferenceFailed, reference_failure
from .evaluation import Evaluations
from .extract import extract, extract_summary, strip_thinking
from .forms import KernelForm, kernel_form
from .prompts import PromptLibrary
from .retrieval import builtin_example, retrieve
from .strategies import Plan, make_plan

log = logging.getLogger(__name__)

STAGES = ("profiling", "loading model", "sampling", "extracting", "compiling", "verifying", "timing",
          "verdict", "round", "done")
SUMMARY_TOKENS = 120
TOKEN_TICK_S = 1.0  # while the model writes, its tokens so far are reported at most this often
ANALYSIS_TOKENS = 320
_REFINE = {CORRECT: "refine_speed", "incorrect": "refine_wrong", "runtime_error": "refine_wrong",
           "crashed": "refine_wrong", "timeout": "refine_wrong", NO_KERNEL: "refine_format",
           "not_a_kernel": "refine_kernel", "tampered": "refine_kernel"}  # not_a_kernel: older records


def refine_template(focus: Attempt) -> str:
    """The feedback prompt for refining `focus`: by its status; a correct candidate whose library operators do the
    work (kernel finding library_only) is asked for a kernel of its own, as a refused one is."""
    if focus.verdict is not None and focus.verdict.library_only:
        return "refine_kernel"
    return _REFINE.get(focus.status, "refine_compile")


@dataclass(frozen=True)
class EngineEvent:
    stage: str  # one of STAGES
    message: str
    percentage: int  # 0..100, never lower than the run's previous event
    round: int = 0
    sample: int = 0
    candidate: CandidateRecord | None = None
    verdict: bool = False  # `candidate`'s verdict was just stored in the history (sent as soon as it exists)
    # everything in flight at this moment, in one line ("candidate 1: timing · round 1: sample 2/2: 412/2048
    # tokens, 21 tok/s"), the same whichever thread sent the event: what a job's one-line status shows. `message`
    # when nothing is in flight.
    status: str = ""
    tokens: int | None = None  # a sample being written: its tokens so far (stage "sampling")


@dataclass
class RunResult:
    job_id: int
    state: str  # "done" | "failed" | "cancelled"
    message: str
    candidates: list[CandidateRecord] = field(default_factory=list)
    # the best CORRECT candidate of this run (ranking.best: the lowest time of its own), None when none is correct
    best: CandidateRecord | None = None
    prompt_tokens_per_round: list[int] = field(default_factory=list)
    reference_failed: bool = False  # the reference module itself did not run (a problem of the input, not the run)
    oracle_failed: bool = False  # the evaluator could not do its part: nobody's fault, worth running again

    @property
    def offered(self) -> CandidateRecord | None:
        """`best` when it is a win (correct and shown faster than eager: ranking.is_win), else None."""
        return self.best if self.best is not None and ranking.is_win(self.best) else None


class _Cancelled(Exception):
    pass


def tok_rate(per_second: float) -> str:
    """Tokens per second as a user reads them: whole numbers from 10 up, one decimal below (a starved machine's
    0.4 tok/s is not "0 tok/s" while the count rises)."""
    return f"{per_second:.0f}" if per_second >= 10 else f"{per_second:.1f}"


def target_of(device_info: dict[str, Any], binding: str = "torch") -> Target:
    """CUDA when the evaluator's device is a GPU (device_info name is the GPU's), else a C++ CPU kernel; called from
    Python the way `binding` says."""
    name = str(device_info.get("name") or "cpu")
    if name.lower() == "cpu" or name.lower().startswith("cpu"):
        return Target("cpu", "the CPU", binding)
    cap = device_info.get("capability")
    return Target("cuda", name + (f" (compute capability {cap})" if cap else ""), binding)


# What a prompt template is, in the words progress shows (the strategy spelt as in settings: profile-guided).
_TEMPLATE_WORDS = {"zero_shot": "zero-shot prompt", "one_shot": "one-shot prompt",
                   "profile_guided": "profile-guided prompt", "agent_generate": "agent prompt",
                   "refine_compile": "refining: compile errors", "refine_wrong": "refining: wrong results",
                   "refine_speed": "refining: speed", "refine_format": "refining: the answer's format",
                   "refine_kernel": "refining: its own kernel"}


def _takes(backend: Backend, callback: str) -> bool:
    """Whether the backend's chat takes this callback (`on_tokens`, `on_text`: every built-in one does)."""
    try:
        return callback in inspect.signature(backend.chat).parameters
    except (TypeError, ValueError):
        return False


def template_words(template: str) -> str:
    """'profile-guided prompt' for 'profile_guided'; a template it does not know: its name with dashes."""
    return _TEMPLATE_WORDS.get(template, template.replace("_", "-"))


class Engine:
    def __init__(self, settings: Settings, evaluator: Oracle, history: History, backend: Backend | None = None, *,
                 prompts: PromptLibrary | None = None,
                 use_model: Callable[[Settings], tuple[Backend, Callable[[], None]]] | None = None):
        """Without `backend` the engine opens the model the settings name on first use and closes it with itself;
        `use_model` (a process's kept model) lends it instead, and `close` gives it back."""
        self.settings = settings
        self.evaluator = evaluator
        self.history = history
        self._backend = backend
        self._owns_backend = backend is None
        self._use_model = use_model
        self._give_back: Callable[[], None] | None = None
        self.prompts = prompts or PromptLibrary(settings.prompts_dir or None)
        self._lock = threading.Lock()

    @property
    def backend(self) -> Backend:
        with self._lock:
            if self._backend is None:
                if self._use_model is not None:
                    self._backend, self._give_back = self._use_model(self.settings)
                else:
                    self._backend = open_backend(self.settings)
                if hasattr(self._backend, "turn"):  # a model in this process: it pauses while the oracle times
                    self._backend.turn = getattr(self.evaluator, "device_turn", None)
            return self._backend

    def close(self) -> None:
        with self._lock:
            backend, give_back = self._backend, self._give_back
            if self._owns_backend:
                self._backend, self._give_back = None, None
        if give_back is not None:
            give_back()
        elif self._owns_backend and backend is not None:
            backend.close()

    def run(self, task: Task, *, strategy: str | None = None, samples: int | None = None,
            rounds: int | None = None, job_id: int | None = None, cancel: threading.Event | None = None,
            on_event: Callable[[EngineEvent], None] | None = None) -> RunResult:
        cancel = cancel or threading.Event()
        name = strategy or self.settings.strategy
        try:
            plan: Plan | None = make_plan(name, settings_samples=self.settings.samples,
                                          settings_rounds=self.settings.rounds, samples=samples, rounds=rounds)
        except GenerationError as e:
            plan, plan_error = None, str(e)
        if job_id is None:
            job_id = self.history.start_job(task.key, task.fingerprint, GENERATION_KIND,
                                            strategy=plan.name if plan else name, model=self._model_name(),
                                            settings=self.settings.to_dict())
        else:
            self.history.set_job_model(job_id, self._model_name())
        if plan is None:
            self.history.finish_job(job_id, "failed", plan_error)
            return RunResult(job_id, "failed", plan_error)
        run = _Run(self, task, plan, job_id, cancel, on_event)
        return run.execute()

    def check_reference(self, task: Task, cancel: threading.Event | None = None) -> Profile:
        """Run the task's reference once (its profile, kept in the history for this fingerprint). Raises
        ReferenceFailed when it does not import or run, or its get_inputs() raises; every run does this before it
        asks the model anything."""
        cached = self.history.profile(task.key, task.fingerprint)
        if cached is not None:
            return cached
        try:
            prof = self.evaluator.profile(task.reference_src, cancel=cancel)
        except Exception as e:  # noqa: BLE001 - the evaluator's message says what failed
            if cancel is not None and cancel.is_set():
                raise
            if type(e).__name__ == "ReferenceFailed":  # the module's own failure: the user's to fix
                raise ReferenceFailed(reference_failure(task.module, str(e))) from None
            # the evaluator's (a worker lost, no device): nothing the module did, so never "Model does not run"
            detail = str(e) if type(e).__name__.startswith("Evaluator") else f"{type(e).__name__}: {e}"
            raise OracleFailed(f"the oracle could not profile {task.module} ({detail}); the model was asked "
                               "nothing: try again") from None
        self.history.save_profile(task.key, task.fingerprint, prof)
        return prof

    def prepare(self, task: Task, cancel: threading.Event | None = None) -> None:
        """Everything of the task a click needs before its first candidate, done ahead (the editor, once a document
        is quiet): the reference's profile in the history, its referee loaded on the device. Raises like
        `check_reference`."""
        if self.history.profile(task.key, task.fingerprint) is None:
            self.check_reference(task, cancel)  # its profile loads the referee (and begins its compile)
            return
        ahead = getattr(self.evaluator, "prepare_reference", None)
        if ahead is not None:
            ahead(task.reference_src, cancel=cancel)

    def load_model(self) -> None:
        """A model in this process loads now (ahead of a click; an endpoint has nothing to load). Raises
        BackendUnavailable."""
        load = getattr(self.backend, "load", None)
        if load is not None:
            load()

    def _model_name(self) -> str:
        try:
            return self.backend.name
        except GenerationError:
            return self.settings.model


class _Run:
    """One engine run: the state of a job in progress."""

    def __init__(self, engine: Engine, task: Task, plan: Plan, job_id: int, cancel: threading.Event,
                 on_event: Callable[[EngineEvent], None] | None):
        self.e = engine
        self.s = engine.settings
        self.task = task
        self.plan = plan
        self.job_id = job_id
        self.user_cancel = cancel
        self.cancel = threading.Event()  # set by the caller's cancel (linked) or by a failure of the run
        self._over = threading.Event()
        self.on_event = on_event
        self.attempts: list[Attempt] = []
        # its candidates at the oracle
        self.evals = Evaluations(engine.evaluator, engine.history, task, self.cancel, self.emit)
        self.scored = self.evals.scored  # every step's score (the agent's analysis adds its own)
        self.tokens_per_round: list[int] = []
        self.profile: Profile | None = None
        self.form: KernelForm | None = None
        self.analysis = ""
        self.root_step: int | None = None
        self._event_lock = threading.Lock()
        self.reference_failed = False
        self.oracle_failed = False
        self._done_units = 0
        self._pct = 0
        self._total_units = max(1, plan.rounds * plan.samples * 2 + 1)
        # work in flight, by (round, sample, 0 writing | 1 evaluating): its words and how far it is (0..1 of a unit)
        self._doing: dict[tuple[int, int, int], str] = {}
        self._part: dict[tuple[int, int, int], float] = {}

    # --- events ----------------------------------------------------------------------------------------------
    def emit(self, stage: str, message: str, *, round: int = 0, sample: int = 0,
             candidate: CandidateRecord | None = None, units: int = 0, percentage: int | None = None,
             verdict: bool = False, work: tuple[int, int, int] | None = None, doing: str | None = None,
             part: float | None = None, finished: bool = False, tokens: int | None = None) -> None:
        """One event. `work` names a piece of work in flight (a sample being written, a candidate being
        evaluated): `doing` is what it is doing now, `part` how far it is (the percentage moves with it, not only
        when a unit ends), `finished` that it is over (its `units` count instead)."""
        with self._event_lock:
            if work is not None:
                if finished:
                    self._doing.pop(work, None)
                    self._part.pop(work, None)
                else:
                    if doing is not None:
                        self._doing[work] = doing
                    if part is not None:
                        self._part[work] = max(self._part.get(work, 0.0), min(0.95, part))
            self._done_units += units
            done = self._done_units + sum(self._part.values())
            pct = percentage if percentage is not None else min(99, int(100 * done // self._total_units))
            self._pct = pct = max(self._pct, pct)
            if self.on_event is None:
                return
            status = message if stage == "done" or not self._doing else \
                " · ".join(self._doing[k] for k in sorted(self._doing))
            try:
                self.on_event(EngineEvent(stage, message, pct, round, sample, candidate, verdict, status, tokens))
            except Exception:
                log.exception("event listener failed")

    def check(self) -> None:
        if self.cancel.is_set():
            raise _Cancelled()

    # --- the run ---------------------------------------------------------------------------------------------
    def execute(self) -> RunResult:
        pool = ThreadPoolExecutor(max_workers=max(1, self.plan.samples), thread_name_prefix="kernel-eval")
        threading.Thread(target=self._link_cancel, name="kernel-cancel-link", daemon=True).start()
        state, message = "failed", "interrupted"
        first = ExitStack()  # held through the first round: its verdicts do not wait for the reference's compile
        try:
            coming = getattr(self.e.evaluator, "candidates_coming", None)
            if coming is not None:
                first.enter_context(coming(self.task.reference_src, n=self.plan.samples))
            self._prepare()
            for r in range(1, self.plan.rounds + 1):
                self.check()
                self._round(r, pool)
                first.close()
            self.check()
            state, message = "done", self._summary_message()
        except _Cancelled:
            state, message = "cancelled", "cancelled"
        except ReferenceFailed as e:
            log.info("job %d: %s", self.job_id, e)
            state, message, self.reference_failed = "failed", str(e), True
        except OracleFailed as e:
            log.warning("job %d: %s", self.job_id, e)
            state, message, self.oracle_failed = "failed", str(e), True
        except GenerationError as e:
            log.warning("job %d failed: %s", self.job_id, e)
            state, message = "failed", str(e)
        except Exception as e:
            log.exception("job %d crashed", self.job_id)
            state, message = "failed", f"internal error: {type(e).__name__}: {e}"
        finally:
            if state != "done":
                self.cancel.set()  # stop evaluations still in flight before waiting for them
            pool.shutdown(wait=True, cancel_futures=True)
            first.close()
            self._over.set()
        return self._finish(state, message)

    def _link_cancel(self) -> None:
        """The caller's cancel stops the run; a failure stops it too, without touching the caller's event."""
        while not self._over.is_set():
            if self.user_cancel.wait(0.05):
                self.cancel.set()
                return

    def _prepare(self) -> None:
        backend = self.e.backend  # raises BackendUnavailable (missing model) -> failed job
        prepare = getattr(backend, "prepare", None)
        self.check()
        if prepare is None:
            reference = self._check_reference()  # before the model is asked anything
        else:
            reference = self._load_model_beside_reference(backend.name, prepare)
        info = self.e.evaluator.device_info()
        self.target = target_of(info, self.s.binding)
        budget = max(1024, self.s.n_ctx - self.s.max_tokens)
        self.ctx = ContextBuilder(self.e.prompts, self.task, self.target, history_window=self.s.history_window,
                                  count_tokens=backend.count_tokens, budget_tokens=budget)
        if self.plan.profile:
            self.profile = reference
        self.form = kernel_form(reference)  # picks the worked example even where the profile is not shown
        if self.plan.agent:
            self._agent_prepare()
        if self.plan.seed_from_file and self.task.candidate_src:
            self._seed_from_file()
        self.emit("round", self.plan.describe(), units=1)

    def _check_reference(self) -> Profile:
        self.emit("profiling", f"profiling {self.task.module} (it must run before the model is asked anything)")
        try:
            prof = self.e.check_reference(self.task, self.cancel)
        except Exception:
            self.check()  # cancelled meanwhile: the run ends cancelled, not failed
            raise
        self.check()
        return prof

    def _load_model_beside_reference(self, name: str, prepare: Callable[[], None]) -> Profile:
        """The model loads (a local model: seconds of reading its weights and putting them on the device; an
        endpoint: one request to see that it answers) while the reference is profiled: a first click waits for
        the longer of the two, not their sum. The model is still asked nothing before the reference ran. A model
        that fails to load fails the run as before (the profile in flight is cancelled)."""
        got: dict[str, Any] = {}

        def profile() -> None:
            try:
                got["profile"] = self.e.check_reference(self.task, self.cancel)
            except BaseException as e:  # noqa: BLE001 - handed to the run's thread below
                got["error"] = e

        ahead = threading.Thread(target=profile, name="kernel-reference-check", daemon=True)
        ahead.start()
        self.emit("loading model", f"loading {name} (profiling {self.task.module} meanwhile)", units=0)
        try:
            prepare()  # loads the model, or checks that the endpoint answers: nothing is asked of it yet
        except BaseException:
            self.cancel.set()  # the run fails: its reference's profile is not waited for
            ahead.join(30.0)
            raise
        if ahead.is_alive():
            self.emit("profiling", f"profiling {self.task.module} (it must run before the model is asked anything)")
            ahead.join()
        if "error" in got:
            self.check()  # cancelled meanwhile: the run ends cancelled, not failed
            raise got["error"]
        self.check()
        return got["profile"]

    # --- rounds ----------------------------------------------------------------------------------------------
    def _round(self, r: int, pool: ThreadPoolExecutor) -> None:
        focus = self._focus() if self.attempts else None
        template, extra = self._prompt_for(focus)
        messages = self.ctx.render(template, attempts=self.attempts, focus=focus, **extra)
        tokens = self.e.backend.count_tokens(messages)
        self.tokens_per_round.append(tokens)
        self.emit("round", f"round {r}/{self.plan.rounds}: {template_words(template)} ({tokens} prompt tokens)",
                  round=r)
        parent = focus.step_id if focus is not None else self.root_step
        pending: list[tuple[Attempt, Future[Verdict]]] = []
        for sample in range(1, self.plan.samples + 1):
            self.check()
            attempt = self._sample(r, sample, messages, template, parent)
            if attempt.source:
                pending.append((attempt, pool.submit(self.evals.evaluate_and_store, attempt)))
            else:
                self.evals.record_score(attempt)
            self.attempts.append(attempt)
        for attempt, fut in pending:
            fut.result()
            self.evals.record_score(attempt)
        self.check()

    def _prompt_for(self, focus: Attempt | None) -> tuple[str, dict[str, Any]]:
        extra: dict[str, Any] = {"profile": self.profile, "analysis": self.analysis}
        if self.plan.example:
            extra["example"] = builtin_example(self.e.prompts, self.target.kind, self.form, self.target.binding)
        if self.plan.agent:
            extra["examples"] = [r.__dict__ for r in self.retrieved]
        if focus is None:
            return self.plan.first_prompt, extra
        template = refine_template(focus)
        if focus.status == INFRA_ERROR or focus.status == "cancelled":
            return self.plan.first_prompt, extra
        if template == "refine_speed" and self.plan.profile and focus.verdict and focus.verdict.profile is None:
            self.evals.profile_candidate(focus)
        return template, extra

    def _sample(self, r: int, sample: int, messages: list[dict[str, str]], template: str,
                parent: int | None) -> Attempt:
        backend = self.e.backend
        seed = self.s.seed + (r - 1) * 1000 + (sample - 1)
        work = (r, sample, 0)
        what = f"round {r}: sample {sample}/{self.plan.samples}"
        started = f"{what} from {backend.name}"
        self.emit("sampling", started, round=r, sample=sample, work=work, doing=started, part=0.0)
        kwargs: dict[str, Any] = {}
        if _takes(backend, "on_tokens"):
            kwargs["on_tokens"] = self._token_ticker(r, sample, what)
        prebuild = getattr(self.e.evaluator, "prebuild", None)
        if prebuild is not None and _takes(backend, "on_text"):  # its build starts once its code block is complete
            kwargs["on_text"] = EarlyBuild(prebuild, self.task.reference_src, self.cancel).feed
        comp = backend.chat(messages, max_tokens=self.s.max_tokens, temperature=self.s.temperature, seed=seed,
                            cancel=self.cancel, **kwargs)
        self.check()
        extra: dict[str, Any] = {"template": template, "seed": seed, "parent_step": parent,
                                 "seconds": round(comp.seconds, 3), "finish_reason": comp.finish_reason}
        step_id = self.e.history.add_step(
            self.job_id, round=r, sample=sample, role="generate", prompt=json.dumps(messages),
            completion=comp.text, prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens,
            extra=extra)
        attempt = Attempt(step_id, r, sample, parent_step=parent)
        self.emit("extracting", f"round {r}: extracting sample {sample} ({comp.completion_tokens} tokens, "
                  f"{tok_rate(comp.tokens_per_second)} tok/s)", round=r, sample=sample, units=1, work=work, finished=True)
        try:
            ex = extract(comp.text, self.task.reference_src)
        except ExtractionError as err:
            attempt.error, attempt.problem = err.reason, err.problem
            attempt.summary = extract_summary(comp.text)
            self.e.history.update_step(step_id, summary=attempt.summary,
                                       extra={**extra, "extraction_error": err.reason,
                                              "extraction_problem": err.problem})
            self.emit("extracting", f"round {r}: sample {sample} has no usable ModelNew: {err.problem}",
                      round=r, sample=sample, units=1)
            return attempt
        attempt.source = ex.source
        attempt.summary = ex.summary or self._summarise(r, sample, ex.source, step_id)
        cand = self.e.history.add_candidate(self.task.key, self.task.fingerprint, ex.source, job_id=self.job_id,
                                            round=r, sample=sample, strategy=self.plan.name)
        attempt.number, attempt.candidate_id = cand.number, cand.id
        self.e.history.update_step(step_id, candidate_id=cand.id, summary=attempt.summary,
                                   extra={**extra, "extraction_notes": list(ex.notes)})
        self.emit("compiling", f"candidate {cand.number}: submitted to the oracle", round=r, sample=sample,
                  candidate=cand, work=(r, sample, 1), doing=f"candidate {cand.number}: waiting for the oracle",
                  part=0.0)
        return attempt

    def _token_ticker(self, r: int, sample: int, what: str) -> Callable[[int], None]:
        """The backend's per-token callback: an event with the tokens so far and their rate, at most every
        TOKEN_TICK_S (the first token at once), so the editor and the command line show the model writing."""
        t0 = time.monotonic()
        last = [t0 - TOKEN_TICK_S]
        limit = max(1, self.s.max_tokens)

        def on_tokens(n: int) -> None:
            now = time.monotonic()
            if now - last[0] < TOKEN_TICK_S:
                return
            last[0] = now
            # the rate once there is a second to measure it over (the first token may come at once)
            rate = f", {tok_rate(n / (now - t0))} tok/s" if now - t0 >= 1.0 else ""
            text = f"{what}: {n}/{limit} tokens{rate}"
            self.emit("sampling", text, round=r, sample=sample, work=(r, sample, 0), doing=text, part=n / limit,
                      tokens=n)

        return on_tokens

    def _summarise(self, r: int, sample: int, source: str, parent: int) -> str:
        """The model gave no Summary line: ask for one on the kernel alone (cheap; never the reasoning)."""
        if self.cancel.is_set():
            return ""
        msgs = [{"role": "user", "content": self.e.prompts.render("summarise", source=source[:6000])}]
        try:
            comp = self.e.backend.chat(msgs, max_tokens=SUMMARY_TOKENS, temperature=0.0, seed=self.s.seed,
                                       cancel=self.cancel)
        except GenerationError as e:
            log.warning("summary failed: %s", e)
            return ""
        text = strip_thinking(comp.text)
        summary = extract_summary(text) or re.sub(r"\s+", " ", re.sub(r"```.*?(```|$)", "", text, flags=re.DOTALL))
        summary = summary.strip()[:400]
        self.e.history.add_step(self.job_id, round=r, sample=sample, role="summarise", prompt=json.dumps(msgs),
                                completion=comp.text, summary=summary, prompt_tokens=comp.prompt_tokens,
                                completion_tokens=comp.completion_tokens, extra={"parent_step": parent})
        return summary

    def _seed_from_file(self) -> None:
        """Refine starts from the file's own ModelNew: check it (round 0), then refine on that feedback."""
        src = self.task.candidate_src
        step_id = self.e.history.add_step(self.job_id, round=0, role="seed", summary="the file's own ModelNew",
                                          extra={"origin": self.task.path or "file"})
        attempt = Attempt(step_id, 0, 0, source=src, summary="the file's own ModelNew")
        self.emit("compiling", "checking the file's own ModelNew")
        attempt.verdict = self.evals.evaluate(attempt)
        self.check()
        self.evals.record_score(attempt)
        self.attempts.append(attempt)
        self.emit("verifying", f"the file's ModelNew: {attempt.status}"
                  f"{' — ' + attempt.detail if attempt.detail else ''}", work=(0, 0, 1), finished=True)

    # --- focus (triage) --------------------------------------------------------------------------------------
    def _focus(self) -> Attempt | None:
        usable = [a for a in self.attempts if a.status not in ("cancelled", INFRA_ERROR, "pending")]
        if not usable:
            return self.attempts[-1] if self.attempts else None
        if self.plan.agent:
            chosen = self._agent_triage(usable)
            if chosen is not None:
                return chosen
        return heuristic_focus(usable)

    # --- agent -----------------------------------------------------------------------------------------------
    def _agent_prepare(self) -> None:
        msgs = self.ctx.render("agent_analysis", profile=self.profile)
        self.emit("sampling", "agent: analysis")
        comp = self.e.backend.chat(msgs, max_tokens=ANALYSIS_TOKENS, temperature=self.s.temperature,
                                   seed=self.s.seed, cancel=self.cancel)
        self.check()
        self.analysis = strip_thinking(comp.text).strip()[:1500]
        self.root_step = self.e.history.add_step(
            self.job_id, role="analysis", prompt=json.dumps(msgs), completion=comp.text, summary=self.analysis[:400],
            prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens)
        self.scored.append(rewards.StepScore(self.root_step, 0, None, None, scored=False))
        self.retrieved = retrieve(self.e.history, self.e.prompts, self.task.reference_src, self.target.kind,
                                  exclude_task=self.task.key, form=self.form, binding=self.target.binding)
        self.e.history.add_step(self.job_id, role="retrieval", extra={
            "retrieved": [{"title": r.title, "similarity": round(r.similarity, 3)} for r in self.retrieved]})

    def _agent_triage(self, usable: list[Attempt]) -> Attempt | None:
        options = [a for a in usable if not a.correct][-self.s.history_window or None:]
        best_correct = [a for a in usable if a.correct]
        if best_correct:
            options = [max(best_correct, key=lambda a: a.score or 0.0), *options]
        if len(options) < 2:
            return options[0] if options else None
        lines = ContextBuilder.history_lines(options, len(options))
        msgs = [{"role": "user", "content": self.e.prompts.render(
            "agent_triage", task={"name": self.task.name}, candidates=lines)}]
        comp = self.e.backend.chat(msgs, max_tokens=8, temperature=0.0, seed=self.s.seed, cancel=self.cancel)
        self.check()
        m = re.search(r"\d+", strip_thinking(comp.text))
        pick = int(m.group()) if m else 0
        chosen = options[pick - 1] if 1 <= pick <= len(options) else None
        self.e.history.add_step(self.job_id, round=options[-1].round, role="triage", prompt=json.dumps(msgs),
                                completion=comp.text, prompt_tokens=comp.prompt_tokens,
                                completion_tokens=comp.completion_tokens,
                                extra={"picked": chosen.step_id if chosen else None, "fallback": chosen is None})
        return chosen

    # --- the end ---------------------------------------------------------------------------------------------
    def _candidates(self) -> list[CandidateRecord]:
        out = []
        for a in self.attempts:
            if a.candidate_id is not None:
                c = self.e.history.candidate_by_id(a.candidate_id)
                if c is not None:
                    out.append(c)
        return out

    def _summary_message(self) -> str:
        cands = self._candidates()
        correct = [c for c in cands if c.correct]
        if correct:
            best = ranking.best(correct)
            assert best is not None
            t = best.verdict.timing if best.verdict else None
            if not ranking.is_win(best):  # a finding, not a result to take: how close the best came
                return f"{verdicts.no_win(best.number, t)}; {len(correct)}/{len(self.attempts)} correct"
            lib = f", {verdicts.LIBRARY_ONLY}" if verdicts.library_only(best.verdict) else ""
            return f"best: candidate {best.number} (correct, {verdicts.timing_speed(t)}{lib}); " \
                f"{len(correct)}/{len(self.attempts)} correct"
        counts: dict[str, int] = {}
        for a in self.attempts:
            counts[a.status] = counts.get(a.status, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        what = ", ".join(f"{n} {verdicts.label(k)}" for k, n in ranked)
        problem = next((a.problem for a in self.attempts if a.problem), "")
        advice = what_to_try(ranked[0][0] if ranked else "", problem)
        return f"no correct candidate in {len(self.attempts)} attempt(s): {what or 'none'}. {advice}"

    def _finish(self, state: str, message: str) -> RunResult:
        try:
            rw = rewards.compute_rewards(self.scored)
            self.e.history.set_rewards({k: v for k, v in rw.items() if v is not None})
        except Exception:
            log.exception("rewards failed for job %d", self.job_id)
        self.e.history.finish_job(self.job_id, state, message)
        cands = self._candidates()
        best = ranking.best(cands)
        self.emit("done", message, candidate=best, percentage=100)
        return RunResult(self.job_id, state, message, cands, best, list(self.tokens_per_round), self.reference_failed,
                         self.oracle_failed)


def what_to_try(status: str, problem: str = "") -> str:
    """Advice after a run without a correct candidate, by what most attempts ended as."""
    stronger = "a stronger code model (setting `model` or `endpoint`; the embedded 135M model rarely writes kernels)"
    if status == NO_KERNEL:
        seen = f" (e.g. {problem})" if problem else ""
        return f"The model's answers held no usable ModelNew{seen}: try {stronger}, or more `samples`."
    if status in ("compile_error", "compile_timeout"):
        return f"The kernels did not build: try more `rounds` (each feeds the compiler's errors back) or {stronger}."
    if status == "incorrect":
        return f"The kernels compute something else: try more `rounds` (each feeds the mismatch back) or {stronger}."
    return f"Try more `samples` or `rounds`, or {stronger}; each candidate's verdict is in the hover."


def heuristic_focus(attempts: list[Attempt]) -> Attempt:
    """The attempt to refine next: the highest score (correct and fast > wrong > runtime > compile > no kernel),
    the most recent among equals."""
    return max(enumerate(attempts), key=lambda ia: (ia[1].score or 0.0, ia[0]))[1]
