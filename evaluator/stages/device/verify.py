"""Step 2 of the device stage, verify: trials on fresh random inputs the referee writes, the runner's outputs read
and compared by the referee (a mismatch gets a second opinion against the exact answer before it is final)."""

from __future__ import annotations

import time

from ... import verdict as V
from ...variants import DESCRIBE, OUT_OF_DISTRIBUTION
from ...verdict import Correctness
from .session import DeviceSession, Stop


class Verify(DeviceSession):
    """The verification step."""

    # -- verification ------------------------------------------------------------------------------------------------
    def _verify(self) -> None:
        s = self.s
        plan = [("task" if t % 2 == 0 else "ramp") for t in range(s.trials)] + list(OUT_OF_DISTRIBUTION)
        self.on_stage("verify", f"{len(plan)} trials")
        corr = Correctness(planned=len(plan), atol=s.atol, rtol=s.rtol, max_abs_err=0.0, max_rel_err=0.0)
        warnings: list[str] = []
        assert self.runner is not None
        for t, variant in enumerate(plan):
            t0 = time.perf_counter()
            req = self._request(1, variant, few=True)
            got = self._candidate_request(req, "verify", keep=True)
            if got is None:
                corr.skipped.append(f"{DESCRIBE[variant]}: the reference is not finite there")
                continue
            ms, claim = got
            t1 = time.perf_counter()
            chk = self._check(req, claim, [0], precision=t == 0)[0]
            self._note_trial(t1 - t0, time.perf_counter() - t1)
            self.call_ms.append(ms)
            corr.trials += 1
            if not chk.match:
                corr.failed_trial = t
                corr.where = chk.where
                corr.max_abs_err = chk.max_abs_err
                corr.max_rel_err = chk.max_rel_err  # a mismatch carries no relative figure: none shown
                corr.message = f"trial {t + 1} of {len(plan)} (inputs: {DESCRIBE[variant]}): {chk.message}"
                self.out.correctness = corr
                raise Stop(V.INCORRECT, corr.message, "verify")
            corr.passed += 1
            warnings += chk.warnings
            if (chk.max_abs_err or 0.0) >= (corr.max_abs_err or 0.0):
                corr.max_abs_err, corr.where = chk.max_abs_err or 0.0, chk.where
            corr.max_rel_err = max(corr.max_rel_err or 0.0, chk.max_rel_err or 0.0)
            if chk.decided_by:
                corr.decided_by = chk.decided_by
            self.on_stage("verify", f"trial {t + 1}/{len(plan)} passed")
        ood = [v for v in OUT_OF_DISTRIBUTION if not any(DESCRIBE[v] in x for x in corr.skipped)]
        corr.message = (f"{corr.passed}/{corr.trials} trials passed"
                        + (f" (incl. {', '.join(ood)} inputs)" if ood else "")
                        + f"; max abs error {corr.max_abs_err or 0.0:.2e}" + (f" at {corr.where}" if corr.where else ""))
        if corr.decided_by:
            corr.message += " (a trial beyond fp32's reach judged against the exact float64 answer)"
        self.out.warnings += list(dict.fromkeys(warnings))
        self.out.correctness = corr

    def _note_trial(self, run_s: float, check_s: float) -> None:
        """Where verification's seconds go (`verify_note`): the first trial (the referee's and the runner's first
        work on this task, and the float64 check of precision) apart from the others."""
        if not self.verify_parts:
            self.verify_parts = [run_s, check_s, 0.0, 0.0, 0]
        else:
            self.verify_parts[2] += run_s
            self.verify_parts[3] += check_s
            self.verify_parts[4] += 1


def verify_note(message: str, parts: list) -> str:
    """The verify stage's line: its outcome, then where its seconds went (the trials' runs, with the candidate's
    calls and the referee's fresh inputs, and the referee's checks)."""
    if not parts:
        return message
    run0, check0, run, check, n = parts
    note = f"{message}; seconds: trial 1 {run0:.2f} (its check {check0:.2f})"
    return note + (f", {n} other(s) {run:.2f} (checks {check:.2f})" if n else "")
