"""The CPU clock's symmetry outside the evaluator: does the process that writes a request's inputs run the same
request loop faster than another process? Two processes share one arena (a memfd); before each request the
filler writes fresh inputs (as the referee's fill does: a `get_inputs()`-style temporary copied into the arena, or
with --direct generated straight into it), optionally writes a flush buffer, then the filler or the other process
runs the loop (ReLU of each input set, its output copied into the arena's slot), alternately; each request's CPU
time is taken by the process that ran it.

    python benchmarks/cpu_filler_symmetry.py [--direct] [--flush BYTES] [--rounds N]

Prints the medians and filler/other: 1.00 when whoever wrote the inputs gains nothing. Measured on the 2-core CI
machine: 0.90-0.98 with a temporary, 0.99-1.00 with --direct, 0.96-0.98 with a 256 MB-1 GB flush, 0.92-0.95 with the
temporary taken by mmap (not a reused heap chunk): the filler's advantage comes with its temporaries' traffic.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import socket
import statistics
import time

import torch

R, C, N = 512, 1024, 16  # one 2 MB input per call, N calls a request (as the clock bench's CPU ReLU)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--direct", action="store_true", help="inputs generated straight into the arena")
    ap.add_argument("--flush", type=int, default=0, help="bytes the filler writes after the inputs")
    ap.add_argument("--rounds", type=int, default=60)
    a = ap.parse_args()
    torch.set_num_threads(1)
    libc = ctypes.CDLL(None)
    libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD and M_MMAP_THRESHOLD as every evaluator worker sets them
    libc.mallopt(-3, 64 << 20)
    size = R * C * 4 * N * 2
    fd = os.memfd_create("klsp-filler-symmetry")
    os.ftruncate(fd, size)

    def views() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        base = torch.frombuffer(mmap.mmap(fd, size), dtype=torch.float32)
        return ([base[i * R * C:(i + 1) * R * C].view(R, C) for i in range(N)],
                [base[(N + i) * R * C:(N + i + 1) * R * C].view(R, C) for i in range(N)])

    model = torch.nn.ReLU()

    def loop(ins: list[torch.Tensor], outs: list[torch.Tensor]) -> int:
        c0 = time.process_time_ns()
        with torch.no_grad():
            for i in range(N):
                out = model(ins[i])
                outs[i].copy_(out)
                del out
        return time.process_time_ns() - c0

    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the other process: runs a request when asked, answers its CPU time
        mine.close()
        ins, outs = views()
        while theirs.recv(16):
            theirs.send(str(loop(ins, outs)).encode())
        os._exit(0)
    theirs.close()
    ins, outs = views()
    flush = torch.empty(max(a.flush, 4) // 4)
    got: dict[str, list[int]] = {"filler": [], "other": []}
    for r in range(a.rounds):
        for who in ("filler", "other") if r % 2 else ("other", "filler"):
            for i in range(N):
                if a.direct:
                    torch.randn(R, C, out=ins[i])
                else:
                    t = torch.randn(R, C)
                    ins[i].copy_(t)
                    del t
            if a.flush:
                flush.zero_()
            if who == "filler":
                got[who].append(loop(ins, outs))
            else:
                mine.send(b"go")
                got[who].append(int(mine.recv(32)))
    mine.close()
    os.waitpid(pid, 0)
    f, o = (statistics.median(got[k]) / 1e3 for k in ("filler", "other"))
    print(f"direct={a.direct} flush={a.flush}: filler {f:.0f} us, other {o:.0f} us a request; filler/other {f / o:.3f}")


if __name__ == "__main__":
    main()
