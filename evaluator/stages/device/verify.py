"""Step 2 of the device stage, verify: trials on fresh random inputs the referee writes, the runner's outputs read
and compared by the referee (a mismatch gets a second opinion against the exact answer before it is final)."""

from __future__ import annotations

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
            req = self._request(1, variant, few=True)
            got = self._candidate_request(req, "verify", keep=True)
            if got is None:
                corr.skipped.append(f"{DESCRIBE[variant]}: the reference is not finite there")
                continue
            ms, claim = got
            chk = self._check(req, claim, [0], precision=t == 0)[0]
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
