import json
import threading
from pathlib import Path

from evaluator.verdict import CORRECT, INCORRECT, Correctness, Timing, TimingStats, Verdict
from kernel_lsp.history import History


def verdict(status: str, speedup: float | None = None, ms: float = 1.0) -> Verdict:
    timing = Timing(candidate=TimingStats(ms, ms * 0.01), speedup_eager=speedup) if speedup else None
    return Verdict(status, correctness=Correctness(trials=5, passed=5 if status == CORRECT else 0), timing=timing)


def test_candidates_are_numbered_per_task_and_ranked(tmp_path: Path) -> None:
    h = History(tmp_path)
    job = h.start_job("a.py::Model", "fp1", "generate", strategy="best-of-n", settings={"samples": 3})
    c1 = h.add_candidate("a.py::Model", "fp1", "src1", job_id=job, verdict=verdict(CORRECT, 1.2))
    c2 = h.add_candidate("a.py::Model", "fp1", "src2", job_id=job, verdict=verdict(INCORRECT))
    c3 = h.add_candidate("a.py::Model", "fp1", "src3", job_id=job, verdict=verdict(CORRECT, 1.8, ms=0.6))
    other = h.add_candidate("b.py::Model", "x", "other")
    assert (c1.number, c2.number, c3.number, other.number) == (1, 2, 3, 1)
    assert h.best("a.py::Model", "fp1").number == 3  # correct, and the lowest time of its own
    assert h.best("a.py::Model", "stale-fp") is None
    assert Path(c3.source_path).read_text() == "src3"  # sources live as files too, to reopen them
    h.finish_job(job, "done", "3 candidates")
    assert h.job(job).state == "done" and h.job(job).settings == {"samples": 3}


def test_survives_reopening(tmp_path: Path) -> None:
    with History(tmp_path) as h:
        h.add_candidate("t", "fp", "src", verdict=verdict(CORRECT, 2.0, ms=0.41))
    with History(tmp_path) as h:
        (c,) = h.candidates("t")
        assert c.verdict is not None and c.verdict.timing.candidate.median_ms == 0.41 and c.speedup_eager == 2.0


def test_steps_rewards_and_export(tmp_path: Path) -> None:
    h = History(tmp_path)
    job = h.start_job("t", "fp", "generate", strategy="refine", model="m")
    c = h.add_candidate("t", "fp", "kernel", job_id=job, verdict=verdict(CORRECT, 1.5))
    s1 = h.add_step(job, round=0, prompt="p0", completion="no code", summary="tried", prompt_tokens=100)
    s2 = h.add_step(job, candidate_id=c.id, round=1, prompt="p1", completion="code", prompt_tokens=120)
    h.set_rewards({s1: 0.1, s2: 1.4})
    h.update_step(s2, summary="fused the epilogue", score=1.4)
    out = tmp_path / "traj.jsonl"
    assert h.export_jsonl(out) == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in rows] == [0.1, 1.4]
    assert rows[1]["kernel"] == "kernel" and rows[1]["verdict"]["status"] == CORRECT
    assert rows[1]["summary"] == "fused the epilogue" and rows[0]["kernel"] is None


def test_concurrent_writers_get_distinct_numbers(tmp_path: Path) -> None:
    h = History(tmp_path)
    numbers: list[int] = []

    def add() -> None:
        for _ in range(10):
            numbers.append(h.add_candidate("t", "fp", "s").number)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(numbers) == list(range(1, 41))


def test_verdict_json_round_trip_keeps_everything() -> None:
    v = verdict(CORRECT, 1.84, ms=0.41)
    v.warnings.append("forward only calls PyTorch ops")
    assert Verdict.from_json(v.to_json()) == v


def test_the_verify_record_is_typed_survives_reopening_and_an_unreadable_one_is_none(tmp_path: Path) -> None:
    from kernel_lsp.history import verify

    with History(tmp_path) as h:
        assert verify.load(h, "t") is None and verify.load(None, "t") is None
        verify.save(h, "t", verify.VerifyRecord("fp", "doc1", "src1", verdict(CORRECT, 1.5), accepted=3))
    with History(tmp_path) as h:
        rec = verify.load(h, "t")
        assert rec is not None and rec.verdict.status == CORRECT and rec.verdict.timing.speedup_eager == 1.5
        assert rec.current("doc1") and not rec.current("doc2") and rec.job is None
        assert rec.accepted_note() == " (candidate 3 as accepted: its check)"
        verify.save(h, "u", verify.VerifyRecord("fp", "doc1", "src1", verdict(INCORRECT), job=7))
        assert verify.load(h, "u").accepted_note() == "" and verify.load(h, "u").job == 7
        h.put(verify.NAMESPACE, "old", {"fingerprint": "fp", "verdict": "not a verdict"})  # an older, damaged record
        assert verify.load(h, "old") is None


def test_threads_reading_the_same_statement_at_once_each_get_their_own_rows(tmp_path):
    """Tasks of a sweep run side by side and each asks the history for its reference's profile and baseline: the
    same statement from several threads at once, on one connection. Each gets its own row, whole."""
    import threading

    from evaluator.verdict import Profile, ProfileOp

    with History(tmp_path / ".kernel-lsp") as h:
        for i in range(8):
            h.save_profile(f"task{i}", "fp", Profile(device="cpu", total_ms=float(i), ops=[ProfileOp("aten::relu",
                                                                                                    1.0, 1.0)]))
            h.put("bench.baseline", f"task{i}", {"eager": i})
        errors: list[BaseException] = []

        def read(i: int) -> None:
            try:
                for _ in range(300):
                    p = h.profile(f"task{i}", "fp")
                    assert p is not None and p.total_ms == float(i), p
                    assert h.get("bench.baseline", f"task{i}") == {"eager": i}
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        def write() -> None:  # another task's results going in meanwhile
            for n in range(600):
                h.put("bench.result", f"r{n % 10}", {"n": n})

        threads = [threading.Thread(target=read, args=(i,)) for i in range(8)] + [threading.Thread(target=write)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
