"""The ops tables: per worker role, the only requests it answers (each party's table stands with its messages)."""

from __future__ import annotations

from .build import BuilderOps, PchOps, RecorderOps
from .referee import RefereeOps
from .runner import RunnerOps
from .wire import Op, op_table

REFEREE: dict[str, Op] = op_table(RefereeOps)
RUNNER: dict[str, Op] = op_table(RunnerOps)
RECORDER: dict[str, Op] = op_table(RecorderOps)
BUILDER: dict[str, Op] = op_table(BuilderOps)
PCH: dict[str, Op] = op_table(PchOps)
OPS: dict[str, dict[str, Op]] = {"referee": REFEREE, "runner": RUNNER, "recorder": RECORDER, "builder": BUILDER,
                                 "pch": PCH}
TRUSTED_ROLES = ("referee", "pch")
