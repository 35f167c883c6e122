"""Benchmark of the compile stage (not a test): where a cold candidate's compile seconds go, measured in one run.

    python benchmarks/bench_compile.py [--device auto|cpu|cuda] [--cold 5] [--fresh-pch] [--pch-build] [--reps 2]
                                       [--skip-evaluator] [--skip-phases] [--json FILE]

A. The evaluator (sandboxed workers, the product's path; a fresh evaluator and a fresh build cache):
   1. the first candidate, submitted as soon as the evaluator is up. With --fresh-pch torch's precompiled header is
      deleted first, as on a fresh machine (the evaluator rebuilds it in the background: its builders compile
      without it meanwhile instead of waiting, and the compile stage says so);
   2. the precompiled header's background build: its seconds (waited for before the next step);
   3. --cold more cold candidates (each new extension code): compile stage median and max;
   4. on a GPU, one KernelBench-form candidate (torch headers in cuda_sources: the split path).
   Each candidate with its timeline: the start (waiting for the first recorder: the toolchain's salt), a recorder
   up to the candidate's load_inline, the request reaching the evaluator, waiting for a builder, the build (the host unit with torch's headers | the kernel unit, side by side; the link; whether the
   precompiled header was used), the load on the device, the rest.
B. Phases, bare (this process, no sandbox): the fast form built the way a builder builds it, each step alone:
   a builder's start (torch import), load_inline's preparation, the host compile with the precompiled header /
   without it (and without the GC flags; interleaved, --reps times each, the fastest counts), its -ftime-report
   shares, nvcc's phases (--time), one architecture
   without +PTX, the link, ninja -j1 against -j2, the objects with and without the header compared byte for byte,
   the same kernels in the ctypes form (no C++ wrapper: `settings.binding = "ctypes"`) built whole;
   with --pch-build also the one-off build of the header (into a temporary folder, torch's is left alone).
   Without a CUDA torch (no GPU here) the kernel unit is still compiled with nvcc, and the link is made against
   empty stand-ins of torch's CUDA libraries.
The ratios come last, each from figures of this run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_evaluator import CPU_CPP, FAST_CUDA, KB_CUDA, REF, Report, nonce  # noqa: E402

from evaluator import EvalSettings, Evaluator  # noqa: E402


def _torch_path() -> Path:
    out = subprocess.run([sys.executable, "-c", "import torch.utils.cpp_extension as ce; print(ce._TORCH_PATH)"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return Path(out.strip().splitlines()[-1])


def fresh_pch() -> list[str]:
    """Delete torch's precompiled header (and our marks beside it), as on a machine that never built it."""
    head = _torch_path() / "include" / "torch"
    gone = []
    for name in ("extension.h.gch", "extension.h.sign", ".klsp-pch.wanted", ".klsp-pch.building", ".klsp-pch.stamp"):
        p = head / name
        if p.exists():
            try:
                p.unlink()
                gone.append(str(p))
            except OSError as e:
                gone.append(f"{p} NOT removed ({e}): not a fresh machine")
    return gone


# -- A. the evaluator ---------------------------------------------------------------------------------------------

_NUM = r"(\d+(?:\.\d+)?) s"


def timeline(events: list[tuple[float, str, str]], v, t_call: float) -> dict:
    """The compile stage of one verdict, from its stage messages' times and its compile stage's message."""
    st = v.stage("compile")
    total = st.seconds if st else float("nan")
    msg = st.message if st else ""
    t = {}
    building = [ts for ts, s, m in events if s == "compile" and m.startswith("building ")]
    for ts, s, m in events:
        if s != "compile":
            continue
        if m.startswith("waiting for a compile worker"):
            t.setdefault("ask_recorder", ts)
        elif m.startswith("waiting for a builder"):
            t.setdefault("ask_builder", ts)
    out: dict = {"total": total, "message": msg}
    if "ask_recorder" in t:  # parse, screen (ms) and the wait for the first recorder's start (the toolchain's salt)
        out["before_recorder"] = t["ask_recorder"] - t_call
    if "ask_recorder" in t and building:
        out["recorder_wait"] = building[0] - t["ask_recorder"]
        if "ask_builder" in t:
            out["recorder_to_request"] = t["ask_builder"] - building[0]
            later = [b for b in building if b >= t["ask_builder"]]
            if later:
                out["builder_wait"] = later[0] - t["ask_builder"]
    for key in ("host", "kernels", "link"):
        m = re.search(rf"\b{key} {_NUM}", msg)
        if m:
            out[key] = float(m.group(1))
    m = re.search(rf"built \d+ extension\(s\) in {_NUM}", msg)
    if m:
        out["build_round_trip"] = float(m.group(1))
    m = re.search(rf"loaded on the device in {_NUM}", msg)
    if m:
        out["load"] = float(m.group(1))
    out["pch"] = ("not used: " + re.search(r"(torch's precompiled header is being built|incomplete|no precompiled "
                                          r"header)", msg).group(1)) if re.search(
        r"compiled without it", msg) else "used (if its flags fit)"
    known = sum(out.get(k, 0.0) for k in ("before_recorder", "recorder_wait", "recorder_to_request",
                                           "build_round_trip", "load"))
    if known:
        out["rest"] = total - known
    return out


def show(label: str, tl: dict) -> str:
    parts = [f"{label}: compile stage {tl['total']:.2f} s"]
    for key, name in (("before_recorder", "start (a recorder's toolchain salt)"),
                      ("recorder_wait", "a recorder, up to its load_inline"), ("recorder_to_request", "its request"),
                      ("builder_wait", "waiting for a builder"), ("build_round_trip", "build"),
                      ("host", "host unit"), ("kernels", "kernel unit"), ("link", "link"), ("load", "load on device"),
                      ("rest", "rest")):
        if key in tl:
            parts.append(f"{name} {tl[key]:.2f}")
    return "; ".join(parts) + f" [header {tl['pch']}]"


def evaluate(ev, ref: str, src: str) -> tuple[object, dict]:
    events: list[tuple[float, str, str]] = []
    t_call = time.perf_counter()
    v = ev.evaluate(ref, src, time=False, on_stage=lambda s, m: events.append((time.perf_counter(), s, m)))
    return v, timeline(events, v, t_call)


def run_evaluator(a: argparse.Namespace, rep: Report) -> None:
    if a.fresh_pch:
        gone = fresh_pch()
        rep.put("fresh_pch_removed", gone, f"fresh machine: removed {gone or 'nothing (no header was there)'}")
    cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
    settings = EvalSettings(device=a.device, cache_dir=cache, time_compiled=False, compile_workers=0,
                            warm_workers=2, kernel_check=False)
    t_start = time.perf_counter()
    with Evaluator(settings) as ev:
        info = ev.device_info()
        up = time.perf_counter() - t_start
        gpu = ev.device.startswith("cuda")
        rep.put("evaluator_up_s", up, f"device: {info.get('name')}; evaluator up in {up:.2f} s")
        ref = REF.format(rows=4096, cols=8192) if gpu else REF.format(rows=512, cols=1024)
        fast = FAST_CUDA if gpu else CPU_CPP
        v, tl = evaluate(ev, ref, nonce(fast))
        rep.put("first", tl, show(f"first candidate ({v.status})", tl))
        t0 = time.perf_counter()
        while not getattr(ev, "pch_status", {}) and time.perf_counter() - t0 < 900:
            time.sleep(0.2)
        pch = dict(getattr(ev, "pch_status", {}))
        rep.put("pch_build", pch, f"precompiled header (background, from the evaluator's start): {pch}; waited "
                                  f"{time.perf_counter() - t0:.1f} s for it after the first candidate")
        cold = []
        for i in range(a.cold):
            v, tl = evaluate(ev, ref, nonce(fast))
            cold.append(tl)
            print(f"  {show(f'cold #{i + 1} ({v.status})', tl)}", flush=True)
        rep.put("cold", cold)
        if cold:
            tot = [c["total"] for c in cold]
            rep.put("cold_median_s", statistics.median(tot),
                    f"cold candidates: compile stage median {statistics.median(tot):.2f} s, max {max(tot):.2f} s "
                    f"(goal: <= 5 s, <= 8 s)")
            rep.put("cold_max_s", max(tot))
            for key in ("host", "kernels", "link", "load", "rest", "before_recorder", "recorder_wait", "builder_wait"):
                vals = [c[key] for c in cold if key in c]
                if vals:
                    rep.put(f"cold_{key}_median_s", statistics.median(vals))
        if gpu:
            v, tl = evaluate(ev, ref, nonce(KB_CUDA))
            rep.put("kernelbench_form", tl, show(f"KernelBench form ({v.status})", tl) + " (goal: <= 8 s)")


# -- B. phases, bare -------------------------------------------------------------------------------------------------

def timed(cmd: str, cwd: Path) -> dict:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, check=False)  # noqa: S602
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"wall": wall, "cpu": cpu, "rc": p.returncode, "out": (p.stdout + p.stderr)[-20000:]}


def _after_compiler(cmd: str, extra: list[str]) -> str:
    head, _, rest = cmd.partition(" ")
    return f"{head} {' '.join(shlex.quote(x) for x in extra)} {rest}"


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest() if p.exists() else ""  # noqa: S324


def _ftime_shares(out: str) -> dict:
    got = {}
    for key, name in (("parsing", "phase parsing"), ("instantiation", "phase lang. deferred"),
                      ("codegen", "phase opt and generate"), ("total", "TOTAL")):
        m = re.search(rf"^\s*{re.escape(name)}\s*:\s*([\d.]+)", out, re.M)  # usr seconds
        if m:
            got[key] = float(m.group(1))
    return got


def run_phases(a: argparse.Namespace, rep: Report) -> None:
    starts = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch.utils.cpp_extension"], check=True, timeout=600)
        starts.append(time.perf_counter() - t0)
    rep.put("torch_import_s", statistics.median(starts),
            f"a builder's start (python + import torch.utils.cpp_extension): median {statistics.median(starts):.2f} s")

    import torch
    import torch.utils.cpp_extension as ce

    from evaluator.sandboxed import build
    from evaluator.shared.pch import no_pch_flags

    os.environ.setdefault("MAX_JOBS", "2")
    nvcc = shutil.which("nvcc")
    cuda_home = ce.CUDA_HOME or os.environ.get("CUDA_HOME") or (
        "/usr/local/cuda" if Path("/usr/local/cuda/bin/nvcc").exists() else
        str(Path(nvcc).resolve().parents[1]) if nvcc else None)
    cuda = bool(cuda_home and Path(cuda_home, "bin", "nvcc").exists())
    tmp = Path(tempfile.mkdtemp(prefix="bench-compile-"))
    extra_ld: list[str] = []
    if cuda and not torch.version.cuda:
        ce.CUDA_HOME = cuda_home
        stubs = tmp / "stubs"
        stubs.mkdir()
        for lib in ("c10_cuda", "torch_cuda"):
            subprocess.run(["c++", "-shared", "-x", "c++", "/dev/null", "-o", str(stubs / f"lib{lib}.so")], check=True)
        extra_ld = [f"-L{stubs}"]
        print(f"  (torch {torch.__version__} has no CUDA: the link uses empty stand-ins of its CUDA libraries)")
    if cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        arch = ""
        if torch.cuda.is_available():
            from evaluator.trusted.devinfo import arch_list

            arch = arch_list()
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch or "9.0+PTX"
        if not arch:
            print("  (no CUDA device: kernels built for TORCH_CUDA_ARCH_LIST=9.0+PTX, an H100/H200's)")
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    rep.put("phases_setup", {"torch": torch.__version__, "cuda_home": cuda_home, "arch": arch, "cxx": ce.get_cxx_compiler()},
            f"torch {torch.__version__}, CUDA {'at ' + cuda_home if cuda else 'none'}, archs {arch or '-'}")

    src = FAST_CUDA if cuda else CPU_CPP
    cu = re.search(r'cuda_source = r"""(.*?)"""', src, re.S)
    cpp = re.search(r'cpp_source = r?"""(.*?)"""', src, re.S).group(1)
    name = "bench_fast"
    bdir = tmp / "build"
    bdir.mkdir()
    real_pch = getattr(ce, "_check_and_build_extension_h_precompiler_headers", None)
    build._patch_for_sandbox()  # as in a builder (torch's own header check becomes a no-op)
    real_ninja = ce._run_ninja_build
    ce._run_ninja_build = lambda *x, **k: None
    t0 = time.perf_counter()
    try:
        ce.load_inline(name, cpp_sources=cpp, cuda_sources=cu.group(1) if cu else None,
                       functions=["relu_forward"], no_implicit_headers=True, use_pch=True,
                       extra_cuda_cflags=["-O3"], extra_ldflags=extra_ld, build_directory=str(bdir))
    finally:
        ce._run_ninja_build = real_ninja
    rep.put("load_inline_prep_s", time.perf_counter() - t0,
            f"load_inline before ninja (flags, compiler checks, sources written): {time.perf_counter() - t0:.2f} s")

    def command(target: str) -> str:
        return subprocess.run(["ninja", "-t", "commands", "-s", target], cwd=bdir, capture_output=True, text=True,
                              check=True).stdout.strip()

    host_cmd = command("main.o")
    nopch = no_pch_flags(tmp)
    gc = build._no_pch_speedups()
    # the three host compiles interleaved, --reps times each, the fastest kept (least disturbed by other load)
    variants = {"host_pch": ["-H"], "host_nopch": nopch + gc}
    if gc:
        variants["host_nopch_nogc"] = nopch
    best: dict[str, dict] = {}
    md5: dict[str, str] = {}
    for _ in range(max(1, a.reps)):
        for key, extra in variants.items():
            r = timed(_after_compiler(host_cmd, extra), bdir)
            if key == "host_pch":
                r["used"] = bool(re.search(r"^! .*extension\.h\.gch", r["out"], re.M))
            md5.setdefault(key, _md5(bdir / "main.o"))
            if key not in best or r["wall"] < best[key]["wall"]:
                best[key] = r
    used = best["host_pch"]["used"]
    r = best["host_pch"]
    rep.put("host_pch", {"wall": r["wall"], "cpu": r["cpu"], "header_used": used},
            f"host unit with the precompiled header: {r['wall']:.2f} s ({r['cpu']:.2f} s CPU); header used: {used}")
    if not used:
        print("  (the precompiled header was not used: missing or not current here; run the evaluator part first, "
              "or without --skip-evaluator)", flush=True)
    r = timed(_after_compiler(host_cmd, ["-ftime-report"]), bdir)
    shares = _ftime_shares(r["out"])
    rep.put("host_pch_ftime", shares, "  its -ftime-report (user s): " + ", ".join(
        f"{k} {v:.2f}" for k, v in shares.items()))
    r = best["host_nopch"]
    same = md5["host_nopch"] == md5["host_pch"] and (not gc or md5["host_nopch_nogc"] == md5["host_pch"])
    rep.put("host_nopch", {"wall": r["wall"], "cpu": r["cpu"], "identical_object": same},
            f"host unit without the header (as while it is being built, GC flags {gc or 'none'}): {r['wall']:.2f} s "
            f"({r['cpu']:.2f} s CPU); objects byte-identical to the one with the header: {same}")
    if gc:
        r = best["host_nopch_nogc"]
        rep.put("host_nopch_nogc", {"wall": r["wall"], "cpu": r["cpu"]},
                f"host unit without the header and without the GC flags: {r['wall']:.2f} s ({r['cpu']:.2f} s CPU)")
    if cuda:
        cmd = command("cuda.cuda.o")
        csv = tmp / "nvcc_time.csv"
        r = timed(f"{cmd} --time {shlex.quote(str(csv))}", bdir)
        ph: dict[str, float] = {}
        if csv.exists():
            for ln in csv.read_text().splitlines()[1:]:
                f = [x.strip() for x in ln.split(",")]
                if len(f) >= 8 and f[7] == "ms":
                    ph[f[1]] = ph.get(f[1], 0.0) + float(f[6]) / 1000
        rep.put("kernels", {"wall": r["wall"], "cpu": r["cpu"], "phases": ph, "rc": r["rc"]},
                f"kernel unit (nvcc): {r['wall']:.2f} s ({r['cpu']:.2f} s CPU): "
                + ", ".join(f"{k} {v:.2f}" for k, v in ph.items()))
        if r["rc"] != 0:
            print(r["out"][-2000:])
        m = re.search(r"-gencode=arch=compute_(\d+a?),code=compute_\1", cmd)
        if m:
            r = timed(cmd.replace(m.group(0), ""), bdir)
            rep.put("kernels_no_ptx", {"wall": r["wall"], "cpu": r["cpu"]},
                    f"kernel unit without +PTX (sm_{m.group(1)} only): {r['wall']:.2f} s ({r['cpu']:.2f} s CPU)")
        r = timed(command(f"{name}.so"), bdir)
        rep.put("link", {"wall": r["wall"], "cpu": r["cpu"], "rc": r["rc"]},
                f"link: {r['wall']:.2f} s ({r['cpu']:.2f} s CPU)")
    else:
        r = timed(command(f"{name}.so"), bdir)
        rep.put("link", {"wall": r["wall"], "cpu": r["cpu"], "rc": r["rc"]}, f"link: {r['wall']:.2f} s")
    for jobs in (1, 2):
        for p in list(bdir.glob("*.o")) + list(bdir.glob("*.so")) + [bdir / ".ninja_log", bdir / ".ninja_deps"]:
            with contextlib.suppress(OSError):
                p.unlink()
        r = timed(f"ninja -j {jobs}", bdir)
        ph = build.ninja_phases(bdir)
        rep.put(f"ninja_j{jobs}", {"wall": r["wall"], "cpu": r["cpu"], "phases": ph},
                f"whole build, ninja -j {jobs}: {r['wall']:.2f} s ({r['cpu']:.2f} s CPU) {build._phase_note(ph)}")
    if cuda and cu:  # the same kernels in the ctypes form: no C++ wrapper, so no torch header in the build at all
        cdir = tmp / "build_ctypes"
        cdir.mkdir()
        ce._run_ninja_build = lambda *x, **k: None
        try:
            ce.load_inline(f"{name}_ctypes", cpp_sources="", cuda_sources=cu.group(1), is_python_module=False,
                           no_implicit_headers=True, extra_cuda_cflags=["-O3"], extra_ldflags=extra_ld,
                           build_directory=str(cdir))
        finally:
            ce._run_ninja_build = real_ninja
        r = timed("ninja -j 2", cdir)
        ph = build.ninja_phases(cdir)
        rep.put("ctypes_ninja_j2", {"wall": r["wall"], "cpu": r["cpu"], "phases": ph, "rc": r["rc"]},
                f"whole build of the ctypes form (the same kernels, no C++ wrapper, no torch header), ninja -j 2: "
                f"{r['wall']:.2f} s ({r['cpu']:.2f} s CPU) {build._phase_note(ph)}")
        if r["rc"] != 0:
            print(r["out"][-2000:])
    if a.pch_build:
        cmd = pch_command(real_pch)
        if cmd:
            out = tmp / "pch" / "extension.h.gch"
            out.parent.mkdir()
            i = cmd.index("-o")
            cmd = cmd[:i + 1] + [str(out)] + cmd[i + 2:]
            r = timed(shlex.join(cmd), tmp)
            rep.put("pch_build", {"wall": r["wall"], "cpu": r["cpu"], "rc": r["rc"]},
                    f"one-off: the precompiled header's build (torch's command, into a temporary folder): "
                    f"{r['wall']:.2f} s ({r['cpu']:.2f} s CPU)")
            shutil.rmtree(out.parent, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def pch_command(real) -> list[str] | None:
    """torch's command for its precompiled header (default flags), taken from torch's own function run against an
    empty copy of its folder (so it wants to build), with the copy's paths turned back into torch's."""
    import subprocess as sp

    import torch.utils.cpp_extension as ce

    if real is None:
        return None

    got: list[list[str]] = []

    class Stop(Exception):
        pass

    def capture(cmd, *a, **k):
        if "c++-header" in " ".join(map(str, cmd)):
            got.append([str(x) for x in cmd])
            raise Stop()
        return sp.check_output(cmd, *a, **k)

    saved_path, saved_sp = ce._TORCH_PATH, ce.subprocess
    with tempfile.TemporaryDirectory() as fake:
        ce._TORCH_PATH = fake
        ce.subprocess = type("S", (), {"check_output": staticmethod(capture), "STDOUT": sp.STDOUT,
                                      "CalledProcessError": sp.CalledProcessError})
        try:
            real([], [])
        except Stop:
            pass
        finally:
            ce._TORCH_PATH, ce.subprocess = saved_path, saved_sp
        return [x.replace(fake, saved_path) for x in got[0]] if got else None


def ratios(rep: Report) -> None:
    r = rep.results
    print("\nratios (figures of this run)", flush=True)

    def line(label: str, num: float | None, den: float | None, goal: str = "") -> None:
        if num is None or den is None or not den:
            return
        print(f"  {label:62s} {num:7.2f} / {den:6.2f} = {num / den:5.2f}x  {goal}", flush=True)

    first = r.get("first", {}).get("total")
    line("first candidate / cold median (compile stage)", first, r.get("cold_median_s"))
    line("cold median compile stage / bare host unit with the header", r.get("cold_median_s"),
         r.get("host_pch", {}).get("wall"))
    line("cold median host unit (sandboxed) / bare host unit", r.get("cold_host_median_s"),
         r.get("host_pch", {}).get("wall"))
    line("host unit without / with the header (wall)", r.get("host_nopch", {}).get("wall"),
         r.get("host_pch", {}).get("wall"))
    line("host unit without the header: no GC flags / GC flags (CPU)", r.get("host_nopch_nogc", {}).get("cpu"),
         r.get("host_nopch", {}).get("cpu"))
    line("kernel unit / host unit with the header (wall)", r.get("kernels", {}).get("wall"),
         r.get("host_pch", {}).get("wall"))
    line("kernel unit with +PTX / without", r.get("kernels", {}).get("wall"), r.get("kernels_no_ptx", {}).get("wall"))
    line("ninja -j1 / -j2", r.get("ninja_j1", {}).get("wall"), r.get("ninja_j2", {}).get("wall"))
    line("whole build: torch wrapper / ctypes form (ninja -j 2)", r.get("ninja_j2", {}).get("wall"),
         r.get("ctypes_ninja_j2", {}).get("wall"))
    line("header build (one-off) / host unit without the header", r.get("pch_build", {}).get("wall"),
         r.get("host_nopch", {}).get("wall"))
    if first is not None:
        print(f"\n  first candidate {first:.2f} s (goal <= 10 s); cold median {r.get('cold_median_s', float('nan')):.2f}"
              f" s, max {r.get('cold_max_s', float('nan')):.2f} s (goals <= 5 s, <= 8 s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--cold", type=int, default=5, help="cold candidates after the first")
    ap.add_argument("--fresh-pch", action="store_true",
                    help="delete torch's precompiled header first (a fresh machine; the evaluator rebuilds it)")
    ap.add_argument("--pch-build", action="store_true", help="also time the header's one-off build (bare)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each bare host compile (the fastest counts)")
    ap.add_argument("--skip-evaluator", action="store_true")
    ap.add_argument("--skip-phases", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rep = Report(a.json)
    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    try:
        if not a.skip_evaluator:
            print("A. the evaluator (sandboxed)", flush=True)
            run_evaluator(a, rep)
        if not a.skip_phases:
            print("B. phases, bare (no sandbox)", flush=True)
            run_phases(a, rep)
    except KeyboardInterrupt:
        print("\ninterrupted: the figures measured so far", flush=True)
    finally:
        ratios(rep)
        print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
