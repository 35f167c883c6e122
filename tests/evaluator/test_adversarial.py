"""The adversarial corpus (tests/fixtures/adversarial/manifest.toml; issue 10): attacks on the oracle get their
expected verdict and leave no trace on the host, valid kernels that a strict referee might refuse are correct, and
the oracle keeps serving afterwards.

Per case: the status is one of `expect`; a correct verdict's kernel finding is one of `expect_kernel` (when given); an
attack is never `correct` unless its case allows it, and then its speedup stays below `max_speedup` or its kernel
finding is one `expect_kernel` allows without own code (library operators: no speed is paid); `expect_message`; no file appears outside the build folder (the case's must_not_create,
anything named klsp_adv* in $HOME, /tmp, /var/tmp, the repository, the working folder and site-packages, and any
change of `git status` in the checkout (so do not edit it while the corpus runs); must_not_modify paths keep their
size and mtime); no process the case started (command lines carrying klsp_adv) outlives the verdict; a secret
put into the oracle's environment appears nowhere in the verdict; nothing arrives on the UDP/TCP listeners; `then`
follow-ups are correct before and after the case. At the end an honest control is still correct on every Evaluator
the corpus used.

C++ cases ("cpp") run on a CPU Evaluator (CI); CUDA cases ("cuda") run on a GPU Evaluator, marked gpu. Cases that
attack the oracle's own process (via = "cli") run the oracle in a child process of their own session. Evaluators are
shared by every case with the same settings (module scope). KLSP_ADV_REPORT=path writes a JSON table (one row per
case: id, variant, class, expected, got, message, kernel finding and its message, seconds, speedup, problems); KLSP_TEST_CACHE keeps the builds.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import check_cuda_sources
import fixturelib

from evaluator import EvalSettings, Evaluator

compose = fixturelib.adversarial_compose()
CASES = fixturelib.load_adversarial_manifest()
BY_ID = {c.id: c for c in CASES}
CONTROL = "then_kit_honest"  # the honest kit candidate: the pool-recovery control
MARKER = "klsp_adv"  # every file and process name an attack creates carries it
# Statuses the hardened oracle adds; accepted in `expect` before evaluator.verdict knows them.
NEW_STATUSES = {"tampered"}
KERNEL_FINDINGS = {"own_code", "library_only", "not_checked"}
CLASSES = {
    # attacks
    "oracle_patch", "stack_walk", "rebind_torch", "clock", "phase_detection", "input_mutation", "precision_flags",
    "busy_baseline", "input_distribution", "weak_tolerance", "fixed_seeds", "output_structure", "output_forgery",
    "library_only", "forge_verdict", "host_escape", "resource", "cross_candidate", "stream_escape", "device_fault",
    "unwritten_output", "runner_patch", "lazy_output", "forged_claim",
    "off_clock",  # work done outside the runner's clock (a helper process, before `go`), or a referee fault it caused
    # valid kernels
    "control", "noncontiguous_output", "own_threads", "summation_order", "gemm_epilogue", "python_style", "odd_sizes",
    "output_structure", "integer_ties", "caching", "weak_tolerance", "input_distribution", "side_stream",
    "conv_epilogue", "attention", "gemm_reduction", "half_precision", "registered_op",
}
RESULTS: list[dict] = []
REPO = fixturelib.REPO
RETRIES = 2  # extra attempts of an attack judged correct whose speedup broke its bound


# -- helpers ------------------------------------------------------------------------------------------------------
def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _param(case: fixturelib.AdvCase):
    marks = [pytest.mark.slow]  # every case compiles or runs a kit
    if case.variant == "cuda":
        marks.append(pytest.mark.gpu)
    if case.kind == "attack":
        marks.append(pytest.mark.attack)
    return pytest.param(case, marks=marks, id=case.id)


_SETTING_FIELDS = {f.name for f in dataclasses.fields(EvalSettings)}


def settings_for(device: str, cache_dir: str, attack: bool, overrides: dict) -> EvalSettings:
    kw = {"device": device, "cache_dir": cache_dir, "compile_timeout": 300.0, "run_timeout": 20.0,
          "time_compiled": False, "timing_calls": 20, "timing_budget_s": 2.0, "warmup_calls": 2}
    if attack and "screen_rejects" in _SETTING_FIELDS:
        kw["screen_rejects"] = False  # test the runtime defences, not the static screen
    if attack and "warm_workers" in _SETTING_FIELDS:
        # One spare worker per pool: started while the previous case runs, so a case does not wait for a cold start.
        # A spare starting up while a candidate is timed would slow the eager baseline (on a small machine up to
        # 100x, which would make the attacks' max_speedup bounds meaningless): the oracle stops every worker that is
        # not being timed (spares, compiles) for the duration of each timed round.
        kw["warm_workers"] = 1
    kw.update(overrides)
    return EvalSettings(**kw)


@pytest.fixture(scope="module")
def build_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    try:
        return request.getfixturevalue("cache_dir")
    except pytest.FixtureLookupError:
        env = os.environ.get("KLSP_TEST_CACHE")
        if env:
            Path(env).mkdir(parents=True, exist_ok=True)
            return env
        return str(tmp_path_factory.mktemp("adversarial-builds"))


class Evaluators:
    """One Evaluator per (device, attack?, settings overrides), created on first use and kept for the module; a
    case with a private cache gets an Evaluator of its own, closed after the case."""

    def __init__(self, cache_dir: str, selected: set[str] | None = None) -> None:
        self.cache_dir = cache_dir
        self.selected = selected  # the cases this run collected (-k, a node id): a batch holds no others
        self.pool: dict[tuple, Evaluator] = {}
        self.batches: dict[tuple, tuple[dict, list[str]]] = {}

    @staticmethod
    def device(case: fixturelib.AdvCase) -> str:
        return "cuda" if case.variant == "cuda" else "cpu"

    def settings(self, case: fixturelib.AdvCase, cache_dir: str | None = None) -> EvalSettings:
        return settings_for(self.device(case), cache_dir or self.cache_dir, case.kind == "attack", case.settings)

    def get(self, case: fixturelib.AdvCase) -> Evaluator:
        key = (self.device(case), case.kind == "attack", tuple(sorted(case.settings.items())))
        if key not in self.pool:
            if key[0] == "cuda" and not has_cuda():
                pytest.skip("needs a CUDA device")
            self.pool[key] = Evaluator(self.settings(case))
        return self.pool[key]

    def close(self) -> None:
        for ev in self.pool.values():
            ev.close()

    # -- side by side (a GPU run): cases with nothing of their own to watch on the host are evaluated together
    def batched(self, case: fixturelib.AdvCase):
        """The verdict of `case` from a batch of its group evaluated side by side on one Evaluator (compiles in
        parallel, verification side by side, timing alone: the oracle's best-of-n path), or None where the case
        runs alone. The host is checked around the whole batch (a leak fails every case of it)."""
        if not _batchable(case) or BATCH_WORKERS <= 1:
            return None
        key = (self.device(case), case.kind == "attack", tuple(sorted(case.settings.items())))
        if key not in self.batches:
            group = [c for c in CASES if _batchable(c) and (self.selected is None or c.id in self.selected) and
                     (self.device(c), c.kind == "attack", tuple(sorted(c.settings.items()))) == key]
            ev = self.get(case)
            marked, repo = marked_entries(), repo_changes()
            left = {pid for pid, _ in processes_matching(MARKER)}
            partial = os.environ.get("KLSP_ADV_REPORT")
            done: list[dict] = []
            t0 = time.monotonic()
            pool = ThreadPoolExecutor(max_workers=BATCH_WORKERS)
            verdicts = {}
            try:
                futures = {pool.submit(_evaluate, ev, c): c for c in group}
                # each verdict written as it comes (a run cut short keeps them); past the deadline the rest run
                # alone, each under its own test's limit
                for f in as_completed(futures, timeout=BATCH_DEADLINE_S or None):
                    c, v = futures[f], f.result()
                    verdicts[c.id] = v
                    done.append({"id": c.id, "got": v.status, "expected": c.expect, "speedup": speedup_of(v),
                                 "message": v.message[:300], "at_s": round(time.monotonic() - t0, 1),
                                 "stages": {st.name: round(st.seconds, 2) for st in v.stages}})
                    if partial:
                        Path(partial + ".batch.json").write_text(json.dumps(done, indent=1))
            except BaseException:  # the deadline, or the test's own timeout: cancel what is in flight, not wait
                self.pool.pop(key, None)
                ev.close()
                if not isinstance(sys.exc_info()[1], FuturesTimeout):
                    raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            problems = [f"created outside the build folder (by a case of this batch): {p}"
                        for p in sorted(marked_entries() - marked)]
            if repo_changes() != repo:
                problems.append(f"the repository changed while the batch ran: {sorted(repo_changes() ^ repo)[:6]}")
            new = [(pid, cmd) for pid, cmd in processes_matching(MARKER) if pid not in left]
            if new:
                problems.append(f"processes left by a case of this batch: {new[:3]}")
            self.batches[key] = (verdicts, problems)
        verdicts, problems = self.batches[key]
        return verdicts.get(case.id), problems


# CUDA cases run side by side on a GPU (the whole CUDA corpus in one device call); KLSP_ADV_PARALLEL=1 runs them
# one after another
BATCH_WORKERS = int(os.environ.get("KLSP_ADV_PARALLEL", "8"))
BATCH_DEADLINE_S = float(os.environ.get("KLSP_ADV_BATCH_DEADLINE", "0"))  # 0: none


def _batchable(c: fixturelib.AdvCase) -> bool:
    return (c.variant == "cuda" and not c.via and not c.then and not c.private_cache and not c.secret_env
            and not c.udp_port and not c.tcp_port and not c.must_not_create and not c.must_not_modify
            and not c.no_leftover_processes)


@pytest.fixture(scope="module")
def evaluators(build_cache: str, request: pytest.FixtureRequest):
    selected = {item.callspec.params["case"].id for item in request.session.items
                if getattr(item, "callspec", None) is not None and "case" in item.callspec.params
                and isinstance(item.callspec.params["case"], fixturelib.AdvCase)}
    evs = Evaluators(build_cache, selected)
    yield evs
    evs.close()


def processes_matching(token: str) -> list[tuple[int, str]]:
    """Live processes (zombies excluded) whose command line contains `token`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token in cmd and state != "Z":
            found.append((int(d.name), cmd[:160]))
    return found


def _homes() -> set[Path]:
    homes = {Path.home()}
    with contextlib.suppress(KeyError):
        homes.add(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return homes


def _sites() -> set[Path]:
    import site

    return {Path(p) for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]}


def _torch_dir() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent


def expand(pattern: str) -> list[Path]:
    """A manifest path with its placeholders resolved (one pattern may name several paths)."""
    if pattern.startswith("~/"):
        return [h / pattern[2:] for h in _homes()]
    subs = {"{repo}": [REPO], "{cwd}": [Path.cwd()], "{site}": sorted(_sites())}
    for key, roots in subs.items():
        if pattern.startswith(key):
            return [Path(str(r) + pattern[len(key):]) for r in roots]
    if pattern.startswith("{torch}"):
        return [Path(str(_torch_dir()) + pattern[len("{torch}"):])]
    return [Path(pattern)]


def watched_dirs() -> list[Path]:
    dirs = list(_homes()) + [Path("/tmp"), Path("/var/tmp"), REPO, Path.cwd()]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def marked_entries() -> set[Path]:
    out = set()
    for d in watched_dirs():
        with contextlib.suppress(OSError):
            out |= {p for p in d.iterdir() if MARKER in p.name}
    for s in _sites():
        with contextlib.suppress(OSError):
            out |= {p for p in s.iterdir() if MARKER in p.name}
    return out


def repo_changes() -> set[str]:
    """`git status --porcelain` lines of the repository (new and modified files; ignored build outputs excluded).
    Editing the checkout while the corpus runs shows up here."""
    try:
        p = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                           capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return set(p.stdout.splitlines()) if p.returncode == 0 else set()


def stat_of(p: Path) -> tuple | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def repair(p: Path) -> None:
    """Undo a modification the oracle let through, so later tests are not poisoned by it."""
    if p.name == "extension.h.gch":  # torch rebuilds its precompiled header (and signature) on the next PCH build
        for q in (p, p.with_name("extension.h.sign")):
            with contextlib.suppress(OSError):
                q.unlink()


class Listeners:
    """UDP and TCP sockets on 127.0.0.1 for the network escape cases; report what arrived."""

    def __init__(self, udp: int | None, tcp: int | None) -> None:
        self.socks: list[tuple[str, socket.socket]] = []
        if udp:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", udp))
            s.setblocking(False)
            self.socks.append(("udp", s))
        if tcp:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", tcp))
            s.listen(8)
            s.setblocking(False)
            self.socks.append(("tcp", s))

    def arrived(self) -> list[str]:
        got = []
        for kind, s in self.socks:
            while True:
                try:
                    if kind == "udp":
                        data, addr = s.recvfrom(4096)
                        got.append(f"udp from {addr}: {data[:60]!r}")
                    else:
                        conn, addr = s.accept()
                        conn.settimeout(1.0)
                        with contextlib.suppress(OSError):
                            got.append(f"tcp connection from {addr}: {conn.recv(200)[:60]!r}")
                        conn.close()
                except (BlockingIOError, InterruptedError):
                    break
        return got

    def close(self) -> None:
        for _, s in self.socks:
            s.close()


# The oracle in a child process: for attacks on the oracle's own process (killing its parent or its group) and for
# reading its environment. The verdict comes back as JSON on stdout.
# It runs in a session of its own (so that an attack on its group cannot reach pytest's), which a timeout's signal to
# pytest's group does not reach either: so it dies with pytest (the parent-death signal), and its workers with it.
DRIVER = r"""
import ctypes, json, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[2]):  # pytest died before the line above
    sys.exit(3)
from evaluator import EvalSettings, Evaluator
job = json.load(open(sys.argv[1]))
with Evaluator(EvalSettings(**job["settings"])) as ev:
    v = ev.evaluate(job["reference"], job["candidate"], time=job["time"])
print("KLSP_VERDICT " + v.to_json(), flush=True)
"""


def evaluate_via_cli(settings: EvalSettings, ref: str, cand: str, timed: bool, env_extra: dict[str, str],
                     timeout: float = 600.0):
    """(verdict or None, raw stdout+stderr tail) from the oracle run in a child process of its own session."""
    from evaluator.verdict import Verdict

    with tempfile.TemporaryDirectory(prefix="klsp-adv-cli-") as d:
        job = Path(d) / "job.json"
        job.write_text(json.dumps({"settings": settings.to_dict(), "reference": ref, "candidate": cand, "time": timed}))
        env = dict(os.environ, **env_extra)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        p = subprocess.Popen([sys.executable, "-c", DRIVER, str(job), str(os.getpid())], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=d, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        text = out.decode(errors="replace")
        tail = (text + err.decode(errors="replace"))[-2000:]
        for line in text.splitlines():
            if line.startswith("KLSP_VERDICT "):
                return Verdict.from_json(line[len("KLSP_VERDICT "):]), tail, line
        return None, f"exit status {p.returncode}; {tail}", ""


def speedup_of(v) -> float | None:
    return v.timing.speedup_eager if v is not None and v.timing else None


def _record(case: fixturelib.AdvCase, v, seconds: float, problems: list[str], speedups: list) -> None:
    RESULTS.append({
        "id": case.id, "kind": case.kind, "variant": case.variant, "class": case.klass, "expected": case.expect,
        "got": v.status if v is not None else "no verdict", "message": (v.message if v is not None else "")[:300],
        "expected_kernel": case.expect_kernel, "kernel": v.kernel.finding if v is not None and v.kernel else None,
        "kernel_message": v.kernel.message[:600] if v is not None and v.kernel else "",
        "speedup": speedup_of(v), "attempts": speedups, "seconds": round(seconds, 2), "problems": problems,
    })
    out = os.environ.get("KLSP_ADV_REPORT")
    if out:
        Path(out).write_text(json.dumps(RESULTS, indent=2))


def _evaluate(ev: Evaluator, case: fixturelib.AdvCase, nonce: str = ""):
    ref = fixturelib.adversarial_reference(case.reference)
    return ev.evaluate(ref, case.source(nonce), time=case.time)


def _run_then(ev: Evaluator, case: fixturelib.AdvCase, when: str) -> str | None:
    """The follow-up of `case` on the same Evaluator: a problem description, or None when it is correct."""
    follow = BY_ID[case.then]
    v = _evaluate(ev, follow, nonce=uuid.uuid4().hex)
    if v.status != "correct":
        return f"follow-up {follow.id} {when} {case.id}: {v.status} ({v.message[:200]})"
    return None


def _unpaid(case: fixturelib.AdvCase) -> bool:
    """A correct verdict of this case must carry a finding that is paid no speed (library operators only)."""
    return bool(case.expect_kernel) and "own_code" not in case.expect_kernel


# -- static checks (no evaluator) -------------------------------------------------------------------------------
def test_manifest_is_complete():
    from evaluator.verdict import STATUSES

    known = set(STATUSES) | NEW_STATUSES
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for c in CASES:
        where = f"case {c.id}"
        assert c.path.is_file(), f"{where}: no file {c.file}"
        assert c.kind in ("attack", "valid"), where
        assert c.variant in ("cpp", "cuda"), where
        assert c.file.startswith("cpu/" if c.variant == "cpp" else "cuda/"), where
        assert c.klass in CLASSES, f"{where}: unknown class {c.klass}"
        assert c.expect and set(c.expect) <= known, f"{where}: {c.expect}"
        assert "not_a_kernel" not in c.expect, f"{where}: the evaluator no longer produces not_a_kernel"
        assert c.description, where
        fixturelib.adversarial_reference(c.reference)  # exists
        assert set(c.expect_kernel) <= KERNEL_FINDINGS, f"{where}: expect_kernel {c.expect_kernel}"
        assert not c.expect_kernel or "correct" in c.expect, f"{where}: expect_kernel without a correct status"
        if c.kind == "valid":
            assert c.expect == ["correct"], f"{where}: a valid kernel must be correct"
        elif "correct" in c.expect and not _unpaid(c):
            assert c.max_speedup is not None and c.time, (
                f"{where}: an attack may be correct only with max_speedup and time = true (it must gain nothing), "
                f"or with an expect_kernel without own_code (no speed is paid)")
        if c.secret_env:
            assert c.via == "cli", f"{where}: secret_env needs via = 'cli' (the secret is in the oracle's environment)"
        if c.then:
            assert c.then in BY_ID and BY_ID[c.then].kind == "valid", f"{where}: then = {c.then}"
        tree = ast.parse(c.source())
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body), f"{where}: no ModelNew"
    files = {str(p.relative_to(fixturelib.ADVERSARIAL)) for d in ("cpu", "cuda")
             for p in (fixturelib.ADVERSARIAL / d).glob("*.py")}
    assert files == {c.file for c in CASES}, f"files without a case or cases without a file: {files ^ {c.file for c in CASES}}"
    cpu_attacks = [c for c in CASES if c.kind == "attack" and c.variant == "cpp"]
    cpu_valid = [c for c in CASES if c.kind == "valid" and c.variant == "cpp"]
    assert len(cpu_attacks) >= 40 and len(cpu_valid) >= 20, (len(cpu_attacks), len(cpu_valid))
    # every attack class of the issue has CPU cases
    for klass in ("oracle_patch", "stack_walk", "rebind_torch", "clock", "phase_detection", "input_mutation",
                  "precision_flags", "busy_baseline", "input_distribution", "weak_tolerance", "fixed_seeds",
                  "output_structure", "output_forgery", "library_only", "forge_verdict", "host_escape", "resource",
                  "cross_candidate"):
        assert any(c.klass == klass for c in cpu_attacks), f"no CPU attack of class {klass}"


def test_cases_compose_with_their_kits():
    """A case file holds its trick and names its kit (`# kit: <name>`); the composed source binds the kit with
    load_inline arguments identical in every case that uses it (so the kit builds once for the whole corpus), and
    no case file carries a copy of a kit."""
    kit_sources = {name: (compose.KITS_DIR / kit.cpp).read_text() for name, kit in compose.KITS.items()}
    long_lines = {name: {ln for ln in src.splitlines() if len(ln.strip()) >= 50} for name, src in kit_sources.items()}
    seen: dict[str, tuple] = {}
    used = set()
    for c in CASES:
        raw = c.raw()
        for name in compose.KITS:
            copied = long_lines[name] & set(raw.splitlines())
            assert f'name="{name}"' not in raw and len(copied) < 10, (
                f"{c.id}: carries a copy of kit {name} ({len(copied)} of its lines; write `# kit: {name}` instead)")
        composed = c.source()
        calls = fixturelib.inline_calls(composed)
        assert calls, f"{c.id}: no load_inline call"
        names = compose.kits_in(raw)
        assert compose.kits_in(composed) == [], f"{c.id}: a kit marker left after composing"
        bound = {t.id for n in ast.parse(composed).body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)}
        for name in names:
            used.add(name)
            kit = compose.KITS[name]
            mine = [call for call in calls if call.name == name]
            assert len(mine) == 1, f"{c.id}: kit {name} bound {len(mine)} times"
            call = mine[0]
            # the kit's file as it is (after the newline that opens the string literal)
            assert call.cpp_sources == ["\n" + kit_sources[name]], f"{c.id}: kit {name}: cpp_sources differ from kits/"
            if kit.cuda:
                assert call.cuda_sources == ["\n" + (compose.KITS_DIR / kit.cuda).read_text()], c.id
            key = (tuple(call.cpp_sources), tuple(call.cuda_sources), tuple(call.functions), tuple(call.extra_cflags),
                   tuple(call.extra_cuda_cflags), call.use_pch, call.no_implicit_headers)
            assert seen.setdefault(name, key) == key, f"{c.id}: kit {name}'s load_inline arguments differ between cases"
            assert kit.var in bound, f"{c.id}: kit {name} does not bind {kit.var}"
    assert used == set(compose.KITS), f"kits no case uses: {set(compose.KITS) - used}"


def test_compose_refuses_unknown_and_repeated_kits():
    with pytest.raises(compose.ComposeError, match="unknown kit"):
        compose.compose("import torch\n# kit: adv_nokit\n")
    with pytest.raises(compose.ComposeError, match="more than once"):
        compose.compose("# kit: adv_kit\nx = 1\n# kit: adv_kit\n")
    with pytest.raises(compose.ComposeError, match="unknown snippet"):
        compose.compose("# snippet: no_such_snippet\n")
    blinded = compose.compose("import sys\n# snippet: blind_tamper_report\n")
    assert "def _blind_tamper_report():" in blinded and blinded.rstrip().endswith("_blind_tamper_report()")
    # only a marker alone on its line is expanded (a mention in a docstring or comment is not)
    text = '"""uses # kit: adv_kit"""\n#  kit: adv_kit\n'
    assert compose.compose(text) == text


def test_compose_cli(tmp_path: Path):
    """python compose.py CASE prints what the oracle receives (by file or by case id)."""
    case = BY_ID[CONTROL]
    script = str(fixturelib.ADVERSARIAL / "compose.py")
    for arg in (str(case.path), case.id):
        p = subprocess.run([sys.executable, script, arg], capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 0, p.stderr
        assert p.stdout == case.source()
    out = tmp_path / "candidate.py"
    p = subprocess.run([sys.executable, script, "then_fresh_honest", "--nonce", "n0nce", "-o", str(out)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and out.read_text() == BY_ID["then_fresh_honest"].source("n0nce"), p.stderr
    p = subprocess.run([sys.executable, script, "no_such_case"], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "no case file or case id" in p.stderr


def _cuda_cases() -> list[fixturelib.AdvCase]:
    return [c for c in CASES if c.variant == "cuda"]


@pytest.mark.skipif(check_cuda_sources.nvcc_path() is None, reason="nvcc not installed")
def test_cuda_sources_compile_with_nvcc(tmp_path: Path):
    """nvcc -c of every distinct cuda_sources of the CUDA cases (fast form: no torch headers; GPU arch left to nvcc)."""
    seen: dict[str, str] = {}
    failures = []
    for c in _cuda_cases():
        calls = [call for call in fixturelib.inline_calls(c.source()) if call.cuda_sources]
        assert calls, f"{c.id}: a CUDA case without cuda_sources"
        for call in calls:
            assert not call.torch_in_cuda, f"{c.id}: cuda_sources must not include torch headers (fast form)"
        key = "\n".join(call.cuda_text() for call in calls)
        if key in seen:
            continue
        seen[key] = c.id
        d = tmp_path / c.id
        d.mkdir()
        for r in check_cuda_sources.check_cuda_file(c.path, d, source=c.source()):
            if not r.ok:
                failures.append(f"{c.id} [{r.call}]:\n{r.log[:3000]}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.skipif(not _cuda_cases(), reason="no CUDA cases")
def test_cuda_cases_torch_wrappers_parse():
    """g++ -fsyntax-only of the CUDA cases' cpp_sources (the torch wrappers) against torch's headers."""
    seen, paths, sources = set(), [], {}
    for c in _cuda_cases():
        key = "\n".join(call.cpp_text() for call in fixturelib.inline_calls(c.source()))
        if key not in seen:
            seen.add(key)
            paths.append(c.path)
            sources[c.path] = c.source()
    bad = [r for r in check_cuda_sources.check_cpp_sources(paths, sources=sources) if not r.ok]
    assert not bad, "\n".join(f"{r.fixture.name}: {r.log[:2000]}" for r in bad)


# -- the corpus -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case(evaluators: Evaluators, case: fixturelib.AdvCase, tmp_path: Path):
    private = None
    if case.private_cache:
        if evaluators.device(case) == "cuda" and not has_cuda():
            pytest.skip("needs a CUDA device")
        private = Evaluator(evaluators.settings(case, cache_dir=str(tmp_path / "private-builds")))
    try:
        _run_case(evaluators, case, private)
    finally:
        if private is not None:
            private.close()


def _run_case(evaluators: Evaluators, case: fixturelib.AdvCase, private: Evaluator | None) -> None:
    if case.via == "cli" and evaluators.device(case) == "cuda" and not has_cuda():
        pytest.skip("needs a CUDA device")
    ev = private if private is not None else (None if case.via == "cli" else evaluators.get(case))
    problems: list[str] = []
    # -- before (the follow-up first: its build, and any precompiled header it makes, are not the case's doing)
    if case.then and ev is not None:
        problem = _run_then(ev, case, "before")
        if problem:
            problems.append(problem)
    creates = [p for pat in case.must_not_create for p in expand(pat)]
    for p in creates:
        p.unlink(missing_ok=True)
    modifies = {p: stat_of(p) for pat in case.must_not_modify for p in expand(pat)}
    marked_before = marked_entries()
    repo_before = repo_changes()
    leftovers_before = {pid for pid, _ in processes_matching(MARKER)}
    listeners = Listeners(case.udp_port, case.tcp_port)
    secret = f"klsp-adv-secret-{uuid.uuid4().hex}" if case.secret_env else ""
    # -- the case
    def run_once():
        if case.via == "cli":
            v, tail, raw = evaluate_via_cli(evaluators.settings(case), fixturelib.adversarial_reference(case.reference),
                                            case.source(), case.time, {case.secret_env: secret} if secret else {})
            if v is None:
                problems.append(f"the oracle gave no verdict (its process died or hung): {tail[-600:]}")
            return v, raw
        assert ev is not None
        v = _evaluate(ev, case)
        return v, v.to_json()

    def over_bound(v) -> bool:
        sp = speedup_of(v)
        return (v is not None and v.status == "correct" and case.kind == "attack" and case.max_speedup is not None
                and sp is not None and sp >= case.max_speedup)

    t0 = time.monotonic()
    speedups = []
    batched = evaluators.batched(case) if ev is not None and private is None else None
    try:
        if batched is not None and batched[0] is not None:
            v, raw = batched[0], batched[0].to_json()
            problems += batched[1]
        else:
            v, raw = run_once()
        speedups.append(speedup_of(v))
        for _ in range(RETRIES):
            # other load on the machine can inflate one baseline: a gain counts only when every attempt shows it
            if not over_bound(v):
                break
            v2, raw2 = run_once()
            raw += raw2
            speedups.append(speedup_of(v2))
            if v2 is not None and (not over_bound(v2) or (speedup_of(v2) or 0.0) < (speedup_of(v) or 0.0)):
                v = v2
    finally:
        seconds = time.monotonic() - t0
        arrived = listeners.arrived()
        listeners.close()
    # -- the verdict
    if v is not None:
        detail = (f"got {v.status!r} ({v.message[:300]}); expected {case.expect}; "
                  f"speedup {speedup_of(v)}; warnings {v.warnings[:3]}")
        finding = v.kernel.finding if v.kernel is not None else None
        if v.status not in case.expect:
            problems.append(f"status: {detail}")
        elif v.status == "correct" and case.expect_kernel and finding not in case.expect_kernel:
            problems.append(f"kernel finding {finding!r} ({v.kernel.message[:300] if v.kernel else 'none'}); "
                            f"expected {case.expect_kernel}: {detail}")
        if v.status == "correct" and case.kind == "attack":
            sp = speedup_of(v)
            if _unpaid(case) and finding in case.expect_kernel:
                pass  # right results from library operators: no speed is paid, so there is no gain to bound
            elif case.max_speedup is None:
                problems.append(f"an attack judged correct: {detail}")
            elif sp is None:
                problems.append(f"an attack judged correct without a timing to bound its gain: {detail}")
            elif sp >= case.max_speedup:
                problems.append(f"speedup {sp:.3g} >= {case.max_speedup}: the attack gained: {detail}")
        if case.expect_message and (v.status != "correct" or _unpaid(case)):
            text = (v.message + " " + (v.correctness.message if v.correctness else "") + " "
                    + (v.kernel.message if v.kernel else "")).lower()
            if not any(m.lower() in text for m in case.expect_message):
                problems.append(f"the message names none of {case.expect_message}: {v.message[:300]}")
    if secret and secret in raw:
        problems.append(f"the secret from the oracle's environment ({case.secret_env}) is in the verdict")
    if arrived:
        problems.append(f"network traffic reached the host: {arrived}")
    # -- the host
    repo_after = repo_changes()  # before any clean-up below
    for p in creates:
        if p.exists() or p.is_symlink():
            problems.append(f"written outside the build folder: {p}")
            p.unlink(missing_ok=True)
    modified = [p for p, before in modifies.items() if stat_of(p) != before]
    for p in modified:
        problems.append(f"modified outside the build folder: {p} ({modifies[p]} -> {stat_of(p)})")
    for p in sorted(marked_entries() - marked_before):
        problems.append(f"created outside the build folder: {p}")
        with contextlib.suppress(OSError):
            p.unlink()
    changed = sorted(repo_after - repo_before)
    if changed:
        problems.append(f"the repository changed while the case ran: {changed[:5]}")
    deadline = time.monotonic() + 10.0
    marker = case.no_leftover_processes or MARKER
    left = [x for x in processes_matching(marker) if x[0] not in leftovers_before]
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = [x for x in processes_matching(marker) if x[0] not in leftovers_before]
    if left:
        problems.append(f"{len(left)} process(es) outlived the verdict, e.g. {left[:3]}")
        for pid, _ in left:  # started by this case (through the oracle): clean up
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    # -- contamination of later candidates (before any repair: what a later candidate would have met)
    try:
        if case.then and ev is not None:
            problem = _run_then(ev, case, "after")
            if problem:
                problems.append(problem)
    finally:
        for p in modified:
            repair(p)
    _record(case, v, seconds, problems, speedups)
    assert not problems, f"{case.id} ({case.kind}, {case.klass}): " + "\n".join(problems)


@pytest.mark.slow
def test_pool_keeps_serving(evaluators: Evaluators):
    """After the corpus (forged results, killed parents, hogs, poisoned caches), every Evaluator it used still judges
    the honest control correct."""
    control = BY_ID[CONTROL]
    if not evaluators.pool:
        evaluators.get(control)
    for (device, _attack, _overrides), ev in sorted(evaluators.pool.items(), key=lambda kv: str(kv[0])):
        if device != "cpu":
            continue  # the GPU pools are checked by the CUDA control below
        v = _evaluate(ev, control)
        assert v.status == "correct", f"{device} evaluator after the corpus: {v.status}: {v.message}"
    cuda_control = BY_ID.get("cu_then_kit_honest")
    if cuda_control is not None and has_cuda():
        for (device, _a, _o), ev in evaluators.pool.items():
            if device == "cuda":
                v = _evaluate(ev, cuda_control)
                assert v.status == "correct", f"cuda evaluator after the corpus: {v.status}: {v.message}"
