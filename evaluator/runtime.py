"""Worker side: start-up and the ops the parent asks for (see worker.py)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Emit = Callable[[str, str], None]

_device = None
_limits: dict | None = None

CUDA_FAULTS = ("illegal memory access", "device-side assert", "misaligned address", "unspecified launch failure",
               "illegal instruction", "an illegal", "CUDA error: unknown error", "uncorrectable ECC")


def startup(kind: str) -> dict:
    global _device
    import torch
    import torch.utils.cpp_extension

    want = os.environ.get("KLSP_DEVICE", "cpu")
    cuda = torch.cuda.is_available()
    if kind == "compile":
        return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": cuda}
    if want == "auto":
        want = "cuda" if cuda else "cpu"
    if want.startswith("cuda"):
        if not cuda:
            return {"torch": torch.__version__, "cuda_available": False, "device": "none",
                    "error": "CUDA was asked for but torch.cuda.is_available() is False"}
        _device = torch.device(want if ":" in want else f"cuda:{os.environ.get('KLSP_GPU', '0')}")
        torch.cuda.set_device(_device)
        torch.zeros(1, device=_device)  # create the context now, while nobody waits
        if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            from .devinfo import arch_list

            os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list()
    else:
        _device = torch.device("cpu")
    _warm_up(_device)
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": cuda, "device": str(_device),
            "device_name": torch.cuda.get_device_name(_device) if _device.type == "cuda" else "cpu",
            "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST", "")}


def _warm_up(device: Any) -> None:
    """Run the verify / time / profile path once on a toy module before the worker reports ready.

    A fresh process pays ~1 s on its first calls (torch._dynamo is imported by the first `manual_seed`, the
    profiler initialises, first-use dispatch); device workers are single-use spares started in the background,
    so this cost lands while nobody waits instead of in every verdict."""
    import torch

    from . import profiling, timing, verify

    try:
        model = torch.nn.ReLU().to(device)

        def get_inputs() -> list:
            return [torch.randn(8, 8)]

        verify.verify(model, model, get_inputs, device, 2, 0, 1e-4, 1e-4)
        sets = timing.input_sets_for(get_inputs, 0, device, max_sets=1)
        timing.time_fn(model, sets, device, calls=3, budget_s=1.0, warmup=1, flush=timing.Flusher(device))
        with torch.no_grad():
            profiling.profile_call(model, sets[0], device, iters=1, top=1)
    except Exception as e:  # a warm-up is an optimisation: never a reason to fail  # noqa: BLE001
        print(f"warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)


def dispatch(op: str, args: dict, emit: Emit) -> dict:
    global _limits, _info_public_cache
    if args.get("limits"):
        _limits = args["limits"]
    if args.get("device_public"):
        _info_public_cache = args["device_public"]
    if op == "compile":
        from .build import compile_candidate

        return compile_candidate(args, emit)
    if op == "info":
        return _info()
    if op == "run":
        return run(args, emit)
    if op == "profile":
        return profile_reference(args, emit)
    if op == "diag":
        import tempfile

        return {"pid": os.getpid(), "env": sorted(os.environ), "cwd": os.getcwd(), "tmp": tempfile.gettempdir()}
    raise ValueError(f"unknown op {op!r}")


def _info() -> dict:
    global _limits
    from .devinfo import device_info

    d = device_info(_device)
    _limits = d["limits"]
    return d


def classify(e: BaseException) -> tuple[str, str]:
    """(status, one-line message) for an exception raised by candidate code."""
    text = f"{type(e).__name__}: {e}".strip()
    first = text.splitlines()[0][:300]
    if any(f in text for f in CUDA_FAULTS):
        return "crashed", f"crashed: {first} (the CUDA context is poisoned; the worker was replaced)"
    if "out of memory" in text.lower() or type(e).__name__ == "OutOfMemoryError":
        return "runtime_error", f"out of memory: {first}"
    return "runtime_error", first


def _frames(tb: str) -> str:
    from .build import _candidate_frames

    return _candidate_frames(tb)


def _stage(name: str, ok: bool, t0: float, message: str = "", skipped: bool = False) -> dict:
    return {"name": name, "ok": ok, "seconds": time.perf_counter() - t0, "message": message, "skipped": skipped}


def _load(args: dict, emit: Emit) -> tuple[Any, Any, dict]:
    from .build import BuildFailed  # noqa: F401
    from .loader import exec_module, extensions_dir, guard_pch

    emit("load", "loading reference")
    try:
        ref = exec_module(args["reference_src"], "reference.py")
    except Exception as e:  # noqa: BLE001
        raise _Fail("infra_error", f"the reference failed to load: {type(e).__name__}: {e}",
                    _frames(traceback.format_exc())) from None
    cand = None
    info: dict = {}
    if args.get("candidate_src") is not None:
        guard_pch(args["cache_dir"])
        t0 = time.perf_counter()
        emit("load", "loading candidate")
        with extensions_dir(args["cache_dir"], args["candidate_src"]):
            try:
                cand = exec_module(args["candidate_src"], "candidate.py")
            except Exception as e:  # noqa: BLE001
                text = str(e)
                if "Error building extension" in text:
                    from . import compilelog

                    raise _Fail("compile_error", "compile error", compilelog.trim(text), log=True) from None
                status, msg = classify(e)
                raise _Fail(status, f"candidate module failed: {msg}", _frames(traceback.format_exc())) from None
        info["load_s"] = time.perf_counter() - t0
    return ref, cand, info


class _Fail(Exception):
    def __init__(self, status: str, message: str, detail: str = "", log: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.detail, self.log = status, message, detail, log


def _models(ref: Any, cand: Any, device: Any) -> tuple[Any, Any]:
    import torch

    try:
        init = list(ref.get_init_inputs())
        torch.manual_seed(0)
        ref_model = ref.Model(*init).to(device)
    except Exception as e:  # noqa: BLE001
        raise _Fail("infra_error", f"the reference Model failed: {type(e).__name__}: {e}",
                    _frames(traceback.format_exc())) from None
    cand_model = None
    if cand is not None:
        try:
            torch.manual_seed(0)
            cand_model = cand.ModelNew(*init).to(device)
        except Exception as e:  # noqa: BLE001
            status, msg = classify(e)
            raise _Fail(status, f"ModelNew(...) failed: {msg}", _frames(traceback.format_exc())) from None
    return ref_model, cand_model


def run(args: dict, emit: Emit) -> dict:
    import torch

    from . import profiling, verify

    s = args["settings"]
    device = _device
    out: dict[str, Any] = {"stages": [], "warnings": [], "device": _device_label()}
    try:
        ref, cand, info = _load(args, emit)
        out["load_s"] = info.get("load_s", 0.0)
        ref_model, cand_model = _models(ref, cand, device)
        # verify
        t0 = time.perf_counter()
        emit("verify", f"{s['trials']} trials")
        try:
            res = verify.verify(ref_model, cand_model, ref.get_inputs, device, s["trials"], s["seed"], s["atol"],
                                s["rtol"], emit)
        except Exception as e:  # noqa: BLE001
            status, msg = classify(e)
            out["stages"].append(_stage("verify", False, t0, msg))
            out.update(status=status, message=msg, detail=_frames(traceback.format_exc()))
            return out
        out["warnings"] += res.pop("warnings")
        ok = res.pop("ok")
        out["correctness"] = res
        out["stages"].append(_stage("verify", ok, t0, res["message"]))
        if not ok:
            out.update(status="incorrect", message=res["message"])
            return out
        # time
        if args.get("time", True):
            t0 = time.perf_counter()
            emit("time", "timing candidate")
            try:
                out["timing"], w = _time(ref, ref_model, cand_model, device, s, emit)
                out["warnings"] += w
                out["stages"].append(_stage("time", True, t0, _timing_note(out["timing"])))
            except Exception as e:  # noqa: BLE001
                status, msg = classify(e)
                out["stages"].append(_stage("time", False, t0, msg))
                out.update(status=status, message=f"while timing: {msg}", detail=_frames(traceback.format_exc()))
                return out
        else:
            out["stages"].append(_stage("time", True, time.perf_counter(), "not asked for", skipped=True))
        # profile of the candidate
        if args.get("profile"):
            t0 = time.perf_counter()
            emit("profile", "profiling candidate")
            try:
                inputs = verify.make_inputs(ref.get_inputs, s["seed"], device, False)
                p = profiling.profile_call(cand_model, inputs, device)
                out["profile"] = _profile_dict(p)
                out["stages"].append(_stage("profile", True, t0, f"{len(p['ops'])} ops"))
            except Exception as e:  # noqa: BLE001
                status, msg = classify(e)
                out["stages"].append(_stage("profile", False, t0, msg))
                out.update(status=status, message=f"while profiling: {msg}")
                return out
        out.update(status="correct", message=out["stages"][0]["message"] if out["stages"] else "")
        return out
    except _Fail as f:
        out.update(status=f.status, message=f.message, detail=f.detail)
        if f.log:
            out["compiler_log"] = f.detail
        return out
    finally:
        if torch.cuda.is_available() and device is not None and device.type == "cuda":
            torch.cuda.synchronize()


def _device_label() -> str:
    import torch

    if _device is None:
        return ""
    if _device.type == "cuda":
        return f"{_device} ({torch.cuda.get_device_name(_device)})"
    return "cpu"


def _timing_note(t: dict) -> str:
    c = t.get("candidate") or {}
    note = f"median {c.get('median_ms', 0):.4g} ms over {c.get('calls', 0)} calls"
    if t.get("speedup_eager"):
        note += f"; {t['speedup_eager']:.2f}x eager"
    if t.get("speedup_compiled"):
        note += f", {t['speedup_compiled']:.2f}x torch.compile"
    return note


def _time(ref: Any, ref_model: Any, cand_model: Any, device: Any, s: dict, emit: Emit) -> tuple[dict, list[str]]:
    import torch

    from . import profiling, timing

    warnings: list[str] = []
    sets = timing.input_sets_for(ref.get_inputs, s["seed"], device)
    flush = timing.Flusher(device)
    kw = {"calls": s["timing_calls"], "budget_s": s["timing_budget_s"], "warmup": s["warmup_calls"], "flush": flush}
    cand_stats, w = timing.time_fn(cand_model, sets, device, **kw)
    warnings += w
    emit("time", "timing reference (eager)")
    eager_stats, _ = timing.time_fn(ref_model, sets, device, **kw)
    compiled_stats = None
    if s.get("time_compiled", True):
        emit("time", "timing reference (torch.compile)")
        try:
            compiled = torch.compile(ref_model)
            with torch.no_grad():
                compiled(*sets[0])  # compile outside the timed calls
            compiled_stats, _ = timing.time_fn(compiled, sets, device, **kw)
        except Exception as e:  # no C++ compiler / triton: report, do not fail the candidate  # noqa: BLE001
            warnings.append(f"torch.compile of the reference failed: {type(e).__name__}: {str(e)[:200]}")
    t: dict[str, Any] = {"device": _device_label(), "method": "cuda-events" if device.type == "cuda" else "perf-counter",
                         "candidate": cand_stats, "eager": eager_stats, "compiled": compiled_stats}
    cm = cand_stats["median_ms"]
    t["speedup_eager"] = eager_stats["median_ms"] / cm if cm else None
    t["speedup_compiled"] = compiled_stats["median_ms"] / cm if compiled_stats and cm else None
    try:
        limits = _limits or _info()["limits"]
        with torch.no_grad():
            p = profiling.profile_call(ref_model, sets[0], device, iters=1, top=1)
        rl, _bound = profiling.roofline(p["flops"], p["bytes_moved"], limits)
        if rl:
            t["roofline_ms"] = rl
            t["pct_of_limit"] = rl / cm * 100 if cm else None
    except Exception as e:  # the roofline is a nicety  # noqa: BLE001
        warnings.append(f"roofline not computed: {type(e).__name__}: {str(e)[:120]}")
    return t, warnings


def _profile_dict(p: dict) -> dict:
    limits = _limits or _info()["limits"]
    from .profiling import roofline

    rl, bound = roofline(p["flops"], p["bytes_moved"], limits)
    gpu = dict(_info_public_cache or {})
    gpu.update(limits)
    return {"device": _device_label(), "total_ms": p["total_ms"], "ops": p["ops"], "flops": p["flops"],
            "bytes_moved": p["bytes_moved"], "roofline_ms": rl, "bound": bound, "gpu": gpu}


_info_public_cache: dict | None = None


def profile_reference(args: dict, emit: Emit) -> dict:
    from . import profiling, verify

    global _info_public_cache
    t0 = time.perf_counter()
    try:
        ref, _, _ = _load(dict(args, candidate_src=None), emit)
        ref_model, _ = _models(ref, None, _device)
        emit("profile", "profiling reference")
        if _info_public_cache is None:
            _info_public_cache = _info()["public"]
        inputs = verify.make_inputs(ref.get_inputs, args["settings"]["seed"], _device, False)
        p = profiling.profile_call(ref_model, inputs, _device)
    except _Fail as f:
        return {"status": f.status, "message": f.message, "detail": f.detail}
    except Exception as e:  # noqa: BLE001
        return {"status": "infra_error", "message": f"profiling the reference failed: {type(e).__name__}: {e}",
                "detail": _frames(traceback.format_exc())}
    return {"status": "ok", "profile": _profile_dict(p), "seconds": time.perf_counter() - t0}
