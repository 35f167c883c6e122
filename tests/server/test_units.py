"""Unit tests of the pieces under the server: the job manager, the source surgery, the edits."""

from __future__ import annotations

import threading
import time

import pytest
from lsp_helpers import MODEL_SRC, candidate_source, model_new

from kernel_lsp.documents import analyse, edits
from kernel_lsp.documents.sources import candidate_only, reference_only
from kernel_lsp.jobs import JobManager, JobOutcome


def _wait(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_one_job_per_module_others_queue_and_events_are_plain() -> None:
    seen = []
    release = threading.Event()
    jm = JobManager(on_change=seen.append, max_workers=2)

    def blocking(ctx):
        ctx.report("compile", "compiling 1/2", 40)
        release.wait(5)
        return JobOutcome("ok")

    a = jm.submit("m.py::A", "verify", blocking, uri="file:///m.py", module="A")
    b = jm.submit("m.py::A", "profile", lambda ctx: JobOutcome("profiled"), uri="file:///m.py", module="A")
    c = jm.submit("m.py::B", "profile", lambda ctx: JobOutcome("other module"), uri="file:///m.py", module="B")
    _wait(lambda: jm.get(c.id).state == "done")  # another module is not held up
    assert jm.get(b.id).state == "queued" and "behind verify job" in jm.get(b.id).message
    _wait(lambda: jm.get(a.id).message == "compiling 1/2")
    assert jm.get(a.id).percentage == 40
    release.set()
    _wait(lambda: jm.get(b.id).state == "done")
    assert [s.state for s in seen if s.id == a.id][-1] == "done"
    assert set(seen[0].public()) == {"id", "uri", "module", "kind", "state", "message", "percentage"}
    jm.shutdown()


def test_a_stage_reported_from_another_thread_never_arrives_after_the_end() -> None:
    """The evaluator reports stages from its own threads: a report racing the job's end reaches the listener first,
    so the editor never sees progress after a job's End."""
    seen, entered = [], threading.Event()

    def listener(s):
        if s.stage == "profile" and not s.final:
            entered.set()
            time.sleep(0.2)  # the listener is slow to take this one while the job ends on its own thread
        seen.append(s)

    jm = JobManager(on_change=listener)

    def work(ctx):
        threading.Thread(target=ctx.report, args=("profile", "profiling the candidate", 90)).start()
        entered.wait(2)
        return JobOutcome("ok")

    j = jm.submit("k", "verify", work)
    _wait(lambda: jm.get(j.id).final and len([s for s in seen if s.final]) == 1)
    time.sleep(0.3)
    mine = [s for s in seen if s.id == j.id]
    assert mine[-1].final and [s.final for s in mine].count(True) == 1, [(s.state, s.stage) for s in mine]
    jm.shutdown()


def test_cancel_running_queued_and_a_stuck_job() -> None:
    jm = JobManager(max_workers=1, cancel_grace=0.3)
    started = threading.Event()

    def polite(ctx):
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)
        return JobOutcome("stopped")

    a = jm.submit("k", "generate", polite)
    b = jm.submit("k", "verify", lambda ctx: JobOutcome("never"))
    started.wait(2)
    assert jm.cancel(b.id) and jm.get(b.id).state == "cancelled"
    t0 = time.monotonic()
    assert jm.cancel(a.id)
    _wait(lambda: jm.get(a.id).state == "cancelled")
    assert time.monotonic() - t0 < 1.0
    assert not jm.cancel(a.id)  # already final

    stuck = threading.Event()
    s = jm.submit("k2", "profile", lambda ctx: (stuck.wait(3), JobOutcome("late"))[1])
    _wait(lambda: jm.get(s.id).state == "running")
    jm.cancel(s.id)
    _wait(lambda: jm.get(s.id).state == "cancelled", timeout=1.5)  # let go after the grace period
    stuck.set()
    time.sleep(0.1)
    assert jm.get(s.id).state == "cancelled"  # the late result does not resurrect it
    jm.shutdown()


def test_failing_work_fails_the_job_not_the_manager() -> None:
    jm = JobManager()
    j = jm.submit("k", "verify", lambda ctx: 1 / 0)
    _wait(lambda: jm.get(j.id).state == "failed")
    assert "ZeroDivisionError" in jm.get(j.id).message
    jm.shutdown()
    with pytest.raises(RuntimeError):
        jm.submit("k", "verify", lambda ctx: JobOutcome("x"))


def test_reference_and_candidate_split() -> None:
    src = MODEL_SRC + model_new()
    ref = reference_only(src)
    assert "class Model(" in ref and "ModelNew" not in ref and "load_inline(" not in ref and "relu2_cpp" not in ref
    cand = candidate_only(src)
    assert "class ModelNew" in cand and "class Model(" not in cand and "def get_inputs" not in cand
    # Two files differing only in their reference give the same candidate (one build).
    assert candidate_only(src.replace("relu(x) * 2.0", "relu(x) * 3.0")) == cand
    # A candidate that uses the reference keeps it.
    uses = MODEL_SRC + "\n\nclass ModelNew(Model):\n    pass\n"
    assert "class Model(" in candidate_only(uses)
    assert reference_only("def broken(:") == "def broken(:"


def _apply_edits(text: str, edits_: list) -> str:
    """Apply non-overlapping (line, col, end_line, end_col, new_text) edits the way an editor does."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(line: int, col: int) -> int:
        return offsets[line] + col if line < len(lines) else len(text)

    for a, b, c, d, new in sorted(edits_, reverse=True):
        text = text[: at(a, b)] + new + text[at(c, d):]
    return text


def test_accept_edit_appends_then_replaces() -> None:
    a = analyse(MODEL_SRC)
    [e] = edits.accept_edits(MODEL_SRC, a, candidate_source(), 3, "Model")
    assert e[0] == e[2] == len(MODEL_SRC.splitlines()) - 1
    block = e[4]
    assert "accepted candidate 3 of Model" in block and "import torch\n" not in block  # imports already there
    assert "from torch.utils.cpp_extension import load_inline" in block
    after = _apply_edits(MODEL_SRC, [e])
    assert after == MODEL_SRC.rstrip("\n") + block + "\n"
    [e2] = edits.accept_edits(after, analyse(after), candidate_source(), 4, "Model")
    start = after.splitlines().index(next(l for l in after.splitlines() if l.startswith("# >>>")))
    assert e2[0] == start and "candidate 4" in e2[4]
    again = _apply_edits(after, [e2])
    assert again.count("# >>> kernel-lsp") == 1 and "candidate 4" in again and "candidate 3" not in again
    # the import only the replaced block had comes back with the new block (the file still imports)
    assert again.count("from torch.utils.cpp_extension import load_inline") == 1
    third = _apply_edits(again, edits.accept_edits(again, analyse(again), candidate_source(), 5, "Model"))
    assert third.count("from torch.utils.cpp_extension import load_inline") == 1 and "candidate 5" in third
    with pytest.raises(ValueError, match="no ModelNew"):
        edits.accept_edits(MODEL_SRC, a, "import torch\n", 6, "Model")


def test_accept_over_a_hand_written_model_new_removes_its_kernel_code() -> None:
    # the user's own ModelNew with its own kernel (source string + load_inline call) between Model and the class
    own = MODEL_SRC + model_new().replace("relu2_cpp", "mine_cpp").replace("relu2_ext", "mine_ext")
    es = edits.accept_edits(own, analyse(own), candidate_source(), 5, "Model")
    assert es[-1][0] == analyse(own).model_new.span.line
    out = _apply_edits(own, es)
    compile(out, "accepted.py", "exec")  # the result parses
    assert "mine_cpp" not in out and "mine_ext" not in out, out  # no stale kernel left to compile at import
    assert out.count("class ModelNew") == 1 and "relu2_ext = load_inline" in out
    assert out.count("class Model(nn.Module)") == 1 and "def get_inputs" in out and "def get_init_inputs" in out
    assert "\n\n\n\n\n" not in out


def test_inputs_stub_from_signatures() -> None:
    src = "from torch import nn\n\nclass M(nn.Module):\n    def __init__(self, n: int, p: float = 0.1):\n" \
          "        super().__init__()\n\n    def forward(self, x, mask=None, *rest):\n        return x\n"
    a = analyse(src)
    out = edits.inputs_stub(a, a.module("M"), src)
    assert out[0] == (0, 0, 0, 0, "import torch\n")
    stub = out[1][4]
    assert "x = torch.randn(16, 1024)  # TODO" in stub and "mask = torch.randn" in stub and "rest" not in stub
    assert "1,  # n TODO" in stub and "0.1,  # p" in stub


@pytest.mark.parametrize("uri, path", [
    ("file:///home/u/a%20b.py", "/home/u/a b.py"),
    ("file:///c%3A/Users/u/m.py", "c:/Users/u/m.py"),
    ("file:///C:/Users/u/m.py", "c:/Users/u/m.py"),
    ("file://server/share/m.py", "//server/share/m.py"),
    ("untitled:Untitled-1", None),
    ("file://", None),
])
def test_a_file_uri_is_its_path_and_anything_else_is_no_file(uri, path) -> None:
    from kernel_lsp.documents.store import uri_to_path

    got = uri_to_path(uri)
    assert (got.as_posix() if got is not None else None) == path


def test_command_arguments_are_typed_and_a_wrong_one_is_one_line_naming_its_field() -> None:
    from kernel_lsp.server.arguments import AcceptArgs, ArgumentError, CancelArgs, JobArgs, parse

    assert parse(JobArgs, ({"uri": "file:///m.py", "line": 3, "strategy": ""},)) == JobArgs("file:///m.py", None, 3)
    assert parse(JobArgs, ([{"uri": "u", "module": "M", "extra": 1}],)).module == "M"  # nested once; extra keys
    assert parse(CancelArgs, ({"jobId": "7"},)).jobId == 7
    wrong = [
        (JobArgs, (), "expected one argument object with {uri, module, line, strategy}"),
        (JobArgs, ({"module": "M"},), "missing 'uri' in {uri, module, line, strategy}"),
        (JobArgs, ({"uri": "u"},), "expected 'module' or 'line'"),
        (JobArgs, ({"uri": "u", "line": True},), "'line': expected a whole number, got True"),
        (JobArgs, ({"uri": "u", "module": "M", "strategy": "beam"},), "unknown strategy 'beam'"),
        (AcceptArgs, ({"uri": "u", "module": "M", "candidate": 2.5},), "'candidate': expected a whole number"),
        (AcceptArgs, ({"uri": 5, "module": "M", "candidate": 1},), "'uri': expected a string, got 5"),
        (AcceptArgs, ({"uri": "", "module": "M", "candidate": 1},), "'uri' must not be empty"),
    ]
    for cls, args, message in wrong:
        with pytest.raises(ArgumentError) as e:
            parse(cls, args)
        assert str(e.value).startswith(message), (args, str(e.value))
        assert "\n" not in str(e.value)


def test_a_newer_version_of_a_document_supersedes_its_older_references_only() -> None:
    """The preparer tells the evaluator which references a document no longer holds (their compile ahead stops),
    with every document's current ones; none while no evaluator is open, none another document still holds."""
    from kernel_lsp.server.features.prepare import Preparer

    told: list[tuple[str, list[str]]] = []

    class Ev:
        def superseded(self, reference_src: str, by: list[str]) -> None:
            told.append((reference_src, list(by)))

    ev: list[Ev] = []
    services = type("S", (), {"started_evaluator": lambda self: ev[0] if ev else None})()
    p = Preparer(type("LS", (), {"services": services})())  # type: ignore[arg-type]
    p._supersede("a", ["A1", "B"])
    p._supersede("a", ["A2", "B"])  # no evaluator open: nothing to stop
    assert told == []
    ev.append(Ev())
    p._supersede("b", ["C1"])
    p._supersede("a", ["A3", "B"])
    p._supersede("a", ["A3", "B"])  # the same version again
    p._supersede("b", ["C2"])
    p._supersede("b", ["A3"])  # another document's version with a's code: a's stays current
    p._supersede("a", ["A4"])
    assert told == [("A2", ["A3", "B", "C1"]), ("C1", ["A3", "B", "C2"]), ("C2", ["A3", "B"]),
                    ("B", ["A4", "A3"])]
