"""Trusted: the ops of the referee and of the precompiled-header build, bound at start-up."""

from __future__ import annotations

from typing import Any

from .. import messages as M
from ..shared.devices import describe_device, describe_torch, device


def start(role: str, chan: Any, ready: dict) -> dict[str, Any]:
    describe_torch(ready)
    if role == "pch":
        from ..shared.pch import build_pch

        return {"pch": lambda req: M.PchReport(**build_pch())}
    dev = device()
    describe_device(ready, dev)
    from . import devinfo, referee

    ref = referee.Referee(dev)
    info: dict = {}

    def device_info(req: M.Empty) -> M.DeviceInfo:
        if not info:
            info.update(devinfo.device_info(dev))
        return M.DeviceInfo(public=dict(info["public"]), limits=dict(info["limits"]))

    return {"ping": lambda req: M.Empty(), "info": device_info, "load": ref.load, "open_arena": ref.open_arena,
            "close_arena": ref.close_arena, "fill": ref.fill, "check": ref.check, "stage": ref.stage, "go": ref.go, "prepare": ref.prepare,
            "idle": ref.idle,
            "compile": ref.compile, "flush": ref.flush, "release": ref.release, "memory": ref.memory,
            "roofline": ref.roofline, "summary": ref.summary,
            "profile": lambda req: ref.profile_reference(req, info)}

