"""Evaluations on a Ray cluster, behind the Evaluator's own interface (so the sweep and the generation engine do
not know where they run).

- One `EvalActor` per GPU (`num_gpus=1`), or on a cluster without GPUs one per CPU (`num_cpus=1`). Each actor
  owns an `Evaluator`, which still isolates every candidate in its own worker processes.
- Compiles run on CPU workers: the evaluator builds every candidate in its compile pool (processes with
  `CUDA_VISIBLE_DEVICES=""`) before the device worker loads it from the build cache. On GPU clusters each actor
  reserves its share of the node's CPUs from Ray (`num_cpus = CPUs // GPUs`) and sizes that pool to it, so
  Ray's accounting covers the compilers too.
- Verdicts come back as plain dicts as each evaluation finishes; the caller writes them into its History.

Every node needs this package installed (same version), like any Ray application.
"""

from __future__ import annotations

import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Any

from evaluator.settings import EvalSettings
from evaluator.verdict import CANCELLED, INFRA_ERROR, Profile, Verdict, profile_from_dict

from .selection import BenchError


class EvalActor:
    """Runs inside a Ray worker: an Evaluator for the GPU (or CPU) Ray gave it."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from evaluator import Evaluator

        self.ev = Evaluator(EvalSettings(**settings))

    def evaluate(self, ref_src: str, cand_src: str, profile: bool, time: bool) -> dict[str, Any]:
        return self.ev.evaluate(ref_src, cand_src, profile=profile, time=time).to_dict()

    def profile(self, ref_src: str) -> dict[str, Any]:
        return asdict(self.ev.profile(ref_src))

    def device_info(self) -> dict[str, Any]:
        import os
        import socket

        return {**self.ev.device_info(), "host": socket.gethostname(), "pid": os.getpid()}

    def close(self) -> None:
        self.ev.close()


def connect(address: str) -> bool:
    """Join the cluster at `address` ("auto": the one running here, else start a local one). True when this
    call started Ray (and so should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "include_dashboard": False}
    if address == "local":
        ray.init(**kw)
        return True
    try:
        ray.init(address=address, **kw)
    except ConnectionError as e:
        if address != "auto":
            raise BenchError(f"--ray {address}: cannot connect ({e})") from None
        print("kernel-lsp: no Ray cluster running here; starting a local one", file=sys.stderr)
        ray.init(**kw)
    return True


def actor_plan(resources: dict[str, float], settings: EvalSettings) -> tuple[dict[str, Any], int, EvalSettings]:
    """Ray options per actor, how many actors, and the settings each actor's Evaluator gets.

    With GPUs: one actor per GPU, each reserving its share of the CPUs for its compile workers, and seeing its
    GPU as cuda:0 (Ray sets CUDA_VISIBLE_DEVICES). Without: one single-CPU actor per CPU, one compile worker each.
    """
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    if gpus:
        share = max(1, cpus // gpus)
        device = "cuda" if settings.device.startswith("cuda") else settings.device
        return ({"num_gpus": 1, "num_cpus": share}, gpus,
                replace(settings, device=device, gpu=0, compile_workers=settings.compile_workers or share))
    return {"num_cpus": 1}, cpus, replace(settings, compile_workers=settings.compile_workers or 1)


class RayEvaluator:
    """`evaluate` / `evaluate_many` / `device_info` / `close`, like `evaluator.Evaluator`, on Ray actors."""

    def __init__(self, address: str, settings: EvalSettings, *, actors: int | None = None) -> None:
        import ray

        self._ray = ray
        self._started = connect(address)
        self.actor_options, self.parallelism, eff = actor_plan(ray.cluster_resources(), settings)
        self.parallelism = actors or self.parallelism
        self._actor_cls = ray.remote(**self.actor_options)(EvalActor)
        self._settings = asdict(eff)
        self._free: queue.Queue = queue.Queue()
        for _ in range(self.parallelism):
            self._free.put(self._actor_cls.remote(self._settings))

    def _take(self, q: queue.Queue, cancel: threading.Event | None) -> Any:
        while True:
            try:
                return q.get(timeout=0.2)
            except queue.Empty:
                if cancel is not None and cancel.is_set():
                    return None

    def _wait(self, ref: Any, cancel: threading.Event | None) -> Any:
        ray = self._ray
        while True:
            ready, _ = ray.wait([ref], timeout=0.5)
            if ready:
                return ray.get(ref)
            if cancel is not None and cancel.is_set():
                ray.cancel(ref, force=False)
                return None

    def evaluate(self, ref_src: str, cand_src: str, cancel: threading.Event | None = None, on_stage: Any = None,
                 profile: bool = False, time: bool = True) -> Verdict:
        actor = self._take(self._free, cancel)
        if actor is None:
            return Verdict(status=CANCELLED, message="cancelled")
        try:
            d = self._wait(actor.evaluate.remote(ref_src, cand_src, profile, time), cancel)
        except self._ray.exceptions.RayActorError as e:  # the actor's process died: replace it
            actor = self._actor_cls.remote(self._settings)
            return Verdict(status=INFRA_ERROR, message=f"Ray actor died: {str(e).splitlines()[0][:200]}")
        except self._ray.exceptions.RayError as e:
            return Verdict(status=INFRA_ERROR, message=f"Ray: {str(e).splitlines()[0][:200]}")
        finally:
            self._free.put(actor)
        if d is None:
            return Verdict(status=CANCELLED, message="cancelled")
        return Verdict.from_dict(d)

    def evaluate_many(self, ref_src: str, cands: list[str], cancel: threading.Event | None = None,
                      **kw: Any) -> list[Verdict]:
        with ThreadPoolExecutor(max_workers=max(1, min(len(cands), self.parallelism))) as pool:
            return list(pool.map(lambda c: self.evaluate(ref_src, c, cancel=cancel, **kw), cands))

    def profile(self, ref_src: str, cancel: threading.Event | None = None, on_stage: Any = None) -> Profile:
        """The reference's profile, from one of the actors (for profile-guided generation)."""
        actor = self._take(self._free, cancel)
        if actor is None:
            raise RuntimeError("cancelled")
        try:
            d = self._wait(actor.profile.remote(ref_src), cancel)
        finally:
            self._free.put(actor)
        if d is None:
            raise RuntimeError("cancelled")
        return profile_from_dict(d)

    def device_info(self) -> dict[str, Any]:
        actor = self._take(self._free, None)
        try:
            return self._ray.get(actor.device_info.remote())
        finally:
            self._free.put(actor)

    def close(self) -> None:
        ray = self._ray
        actors = []
        while not self._free.empty():
            actors.append(self._free.get_nowait())
        for a in actors:
            try:  # let the actor's Evaluator kill its workers; the actor goes either way
                ray.get(a.close.remote(), timeout=30)
            except (ray.exceptions.RayError, TimeoutError):
                pass
            ray.kill(a)
        if self._started:
            ray.shutdown()

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
