"""Step 4 of the device stage, the kernel check: one call under the profiler, the candidate's own code against
library operators (profiles.py, kernelcheck.py), checked against the outside clock and, on the CPU, its own code's
time against the evaluator's sampling of the sandbox's threads (cpusampler.py)."""

from __future__ import annotations

import os

from ... import binaries, cpusampler, kernelcheck
from ... import messages as M
from ... import verdict as V
from ...profiles import Own, check_against_clock, library_kernels, summarise_least
from ...verdict import KernelCheck, Profile, ProfileOp
from .session import DeviceSession, Stop

# How the kernel finding was measured, said in its message.
MEASURED = ("Measured: one call of its forward under the profiler (the candidate process's report, checked against "
            "the evaluator's clock); its own code is the kernels and operators of the binaries the evaluator built "
            "from its sources, never a library operator's")
SAMPLES_WANTED = 2000  # CPU: the evaluator's sampling of the profiled call, about this many samples per thread
SAMPLE_PERIOD_MIN_NS, SAMPLE_PERIOD_MAX_NS = 50_000, 2_000_000
PROFILED_CALLS = 3  # each on its own fresh input set; each operator's least time is kept

_SAMPLING: str | None = None  # "" where this machine lets the evaluator sample its sandboxes, else why not


class KernelCheckStep(DeviceSession):
    """The kernel check."""

    # -- what ran ----------------------------------------------------------------------------------------------------
    def _profile(self) -> None:
        self.on_stage("profile", "profiling the candidate")
        assert self.runner is not None
        if self.ref.summary is None:
            raw = self._referee(M.RefereeOps.summary).events
            self.ref.summary = summarise_least(raw)
            self.ref.library_kernels = library_kernels(raw)
        req = self._request(min(PROFILED_CALLS, self.n_slots))
        self._prepare("profile")
        self._device_quiet("profile")
        self._fill(req, poison=True)
        items = req.items()
        sampler = self._sampler(len(items))
        c0 = self.runner.cpu_ns() if sampler is not None else 0
        if sampler is not None:
            sampler.start()
        try:
            ms, claim = self._clocked(lambda: self._runner(M.RunnerOps.profile, M.ProfileCall(items=items), "profile",
                                                           self.s.run_timeout, clocked=True), "profile",
                                      stop_runner=True, who=self.runner, wall=True)  # the profile's events: wall time
        finally:
            if sampler is not None:
                sampler.close()
        tally = None
        if sampler is not None and not self.runner.dead:
            tally = sampler.tally(cpusampler.file_ids(self._own_libraries()), self.runner.cpu_ns() - c0,
                                  calling_tid=self.runner.worker_pid)
        if len(claim.scalars) != len(items) or len(claim.problems) != len(items):
            raise Stop(V.TAMPERED, f"the candidate's process answered {len(claim.problems)} profiled calls for "
                                   f"{len(items)}", "profile")
        results = self._check(req, M.RunClaim(scalars=claim.scalars, problems=claim.problems),
                              list(range(len(items))))
        bad = next((r for r in results if not r.match), None)
        if bad is not None:
            raise Stop(V.INCORRECT, f"profiled call: {bad.message}", "profile")
        ms /= max(1, len(items))
        if tally is None:
            self.out.not_checked.append("kernel(the profile is the candidate process's report; checked against the "
                                        "outside clock)")
        else:
            self.out.not_checked.append("kernel(the split of library work by class is the candidate process's "
                                        "report; checked against the outside clock)")
        if claim.events is None:
            why = f"not checked: no profile of its forward could be taken ({claim.error or 'no profile'})"
            self.out.warnings.append(f"own code: {why}")
            self.out.kernel = KernelCheck(finding=V.KERNEL_NOT_CHECKED, message=why)
            return
        first = (claim.events.get("calls") or [{}])[0] if isinstance(claim.events, dict) else {}
        summ = summarise_least(claim.events, self._own(first))
        wrong = check_against_clock(summ, ms)
        if wrong:
            raise Stop(V.TAMPERED, f"the candidate's profile disagrees with the evaluator's clock: {wrong}", "profile")
        finding, message, figures = kernelcheck.judge(summ, self.ref.summary)
        unseen = kernelcheck.unseen_own_ms(summ, tally, len(items))
        unevented = not self.gpu and any(not binaries.is_python_module(p) for p in self._own_libraries())
        why = kernelcheck.unseen_unmeasured(summ, tally) if unevented else ""
        if unseen and tally is not None:  # its binaries ran with no profiler event: judged on the samples alone
            finding, message, figures = kernelcheck.judge(dict(summ, custom_ms=unseen), self.ref.summary)
            message = (f"{message} (its own code's time is the evaluator's sampling of its threads, {unseen:.3g} ms "
                       f"a call in the binaries it built: its profile has no event for it, as for a call through "
                       f"ctypes; {tally.describe()})")
            self.out.checked.append("kernel(its own code's time: the evaluator sampled the sandbox's threads and "
                                    "placed each sample in the binaries it built or elsewhere)")
        elif why and finding == V.LIBRARY_ONLY and \
                kernelcheck.judge(dict(summ, custom_ms=max(ms, 1e-3)), self.ref.summary)[0] == V.OWN_CODE:
            # called without a profiler event and not timed otherwise, where its own code could be what did the
            # work (library operators that do every class of it leave it library-only whatever its own code did)
            finding = V.KERNEL_NOT_CHECKED
            message = (f"its own code's time could not be measured: the library the evaluator built for it is called "
                       f"without a profiler event (through ctypes or torch.ops), and {why}. {message}")
            self.out.not_checked.append("kernel(its own code's time: its library is called without a profiler event)")
        elif tally is not None:
            finding, message, held = kernelcheck.against_samples(finding, message, summ, tally, len(items))
            if held == kernelcheck.SAMPLES_CONTRADICT:
                figures["custom_ms"] = tally.own_ms / max(1, len(items))
            if held == kernelcheck.SAMPLES_UNMEASURED:
                self.out.not_checked.append("kernel(its own code's time: part of its CPU time was not sampled)")
            else:
                self.out.checked.append("kernel(its own code's time: the evaluator sampled the sandbox's threads "
                                        "and placed each sample in the binaries it built or elsewhere)")
        left_ms = figures.pop("replaced_ms", 0.0)  # the reference's time on the work left to its own code
        was = finding
        evented = sum((summ.get("library_ms") or {}).values()) + float(summ.get("data_ms", 0.0))
        finding, message = kernelcheck.unevented_library(finding, message, left_ms, tally, len(items), evented,
                                                         self._runner_cpus())
        if finding != was:
            figures["custom_ms"] = 0.0
        st = self._runner(M.RunnerOps.state, M.Empty(), "profile", 30.0)
        if st.ext_errors:
            finding = V.LIBRARY_ONLY
            message = (f"the custom kernel raised {st.ext_errors} time(s) ({st.ext_error[:200]}) and the outputs "
                       f"came from a fallback: {message}")
        self.out.kernel = KernelCheck(**figures, finding=finding, message=f"{message}. {MEASURED}",
                                      kernels=summ.get("kernels", [])[:10], ops=summ.get("ops", [])[:10])
        self.out.checked.append("kernel(its own code: the kernels and operators of the sources and binaries the "
                                "evaluator built)")
        if self.want_profile:
            total = float(summ.get("custom_ms", 0.0)) + sum((summ.get("library_ms") or {}).values()) + \
                float(summ.get("data_ms", 0.0))
            custom = float(summ.get("custom_ms", 0.0))
            ops = [ProfileOp("custom kernels", custom, custom / total if total else 0.0)]
            ops += [ProfileOp(o["name"], o["ms"], o["ms"] / total if total else 0.0) for o in summ.get("ops", [])]
            self.out.profile = Profile(device=self.device_label, total_ms=total, ops=ops)

    def _sampler(self, calls: int) -> cpusampler.Sampler | None:
        """CPU: a sampling of the runner's threads for the profiled call, opened while the sandbox is frozen;
        None where the machine does not allow it (said in the verdict) or on a GPU."""
        global _SAMPLING
        if self.gpu or self.runner is None:
            return None
        if _SAMPLING is None:
            _SAMPLING = cpusampler.unavailable()
        if _SAMPLING:
            self.out.not_checked.append(f"kernel(its own code's time by the evaluator's sampling: {_SAMPLING})")
            return None
        t = self.out.timing
        expect_ms = (t.candidate.median_ms * calls * 4.0) if t is not None and t.candidate.median_ms else 0.0
        period = min(SAMPLE_PERIOD_MAX_NS, max(SAMPLE_PERIOD_MIN_NS, int(expect_ms * 1e6 / SAMPLES_WANTED)))
        sampler = cpusampler.Sampler(self.runner.processes(), period)
        if not sampler.open():
            self.out.not_checked.append(f"kernel(its own code's time by the evaluator's sampling: {sampler.error})")
            return None
        return sampler

    def _runner_cpus(self) -> int:
        """The CPUs the runner may run on (its operators' worker threads are at most that many)."""
        try:
            return len(os.sched_getaffinity(self.runner.worker_pid)) if self.runner is not None else 1
        except OSError:
            return os.cpu_count() or 1

    def _own_libraries(self) -> list[str]:
        """The libraries the evaluator built for this candidate (and those its runner says it loaded from the
        build cache, kept to what exists there)."""
        libs = list(self.libraries)
        for e in (self.loaded.extensions if self.loaded else []):  # the runner's claim, kept to what exists
            p = os.path.join(self.cache_dir, str(e.get("key", "")), f"{e.get('name', '')}.so")
            if os.path.isfile(p) and p not in libs and os.path.dirname(os.path.dirname(os.path.realpath(p))) == \
                    os.path.realpath(self.cache_dir):
                libs.append(p)
        return libs

    def _own(self, raw: dict) -> Own:
        """What counts as the candidate's own code: from the sources and libraries the evaluator built."""
        from ...binaries import demangle, device_entries, direct_library_calls, registered_ops

        libs = self._own_libraries()
        exact: set[str] = set()
        if raw.get("on_device"):
            for p in libs:
                names = device_entries(p)
                if names:
                    exact |= {(d[5:] if d.startswith("void ") else d) for d in demangle(names).values()}
        from ...opclass import is_registered_op

        candidates = {o["name"] for o in raw.get("ops") or [] if isinstance(o, dict) and not o.get("ann")
                      and is_registered_op(str(o.get("name", "")))}
        return Own(label_prefix=f"klsp_ext_{self.nonce}::", extensions=set(self.extension_names),
                   kernels=set(self.own_kernels), exact=exact,
                   ops=registered_ops(libs, candidates), not_own=set(self.ref.library_kernels),
                   direct=direct_library_calls(libs))
