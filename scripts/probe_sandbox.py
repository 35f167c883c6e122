"""What the evaluator's sandbox can enforce on this machine, and whether shared tensors cross it.

    python scripts/probe_sandbox.py [--device cpu|cuda]

Prints the probed capabilities, then starts a sandboxed child (as a runner would be started), hands it a shared
arena through a Unix socket, and checks that both sides see each other's writes, that the child cannot write
outside its folder, read the parent's environment, reach the network or outlive the parent's kill.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.processes import cgroup, proctree, sandbox  # noqa: E402
from evaluator.shared.policy import WorkerPolicy  # noqa: E402

CHILD = r'''
import json, os, socket, sys, time
sys.path.insert(0, os.environ["KLSP_ROOT"])
from evaluator.sandboxed.harden import harden
from evaluator.shared.policy import WorkerPolicy
policy = WorkerPolicy.from_json(sys.argv[2])
probe = json.loads(sys.argv[3])
problems = harden(policy)
s = socket.socket(fileno=int(sys.argv[1]))
report = {"problems": problems, "uid": os.getuid(), "pid": os.getpid()}
def attempt(name, fn):
    try:
        report[name] = ("ALLOWED", str(fn())[:80])
    except Exception as e:
        report[name] = ("blocked", f"{type(e).__name__}: {e}"[:120])
attempt("write_tmp", lambda: open("/tmp/klsp_probe_escape", "w").write("x"))
attempt("write_home", lambda: open(os.path.expanduser("~root") + "/klsp_probe_escape", "w").write("x"))
attempt("write_workdir", lambda: open(os.path.join(policy.workdir, "ok.txt"), "w").write("x"))
attempt("read_parent_environ", lambda: open(f"/proc/{os.getppid()}/environ").read())
attempt("read_pid1_environ", lambda: open("/proc/1/environ").read())
attempt("read_shadow", lambda: open("/etc/shadow").read())
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"x", ("8.8.8.8", 53)); return "sent"
attempt("udp", udp)
def tcp():
    t = socket.create_connection(("127.0.0.1", int(probe["tcp_port"])), timeout=1); return "connected"
attempt("tcp_loopback_host", tcp)
attempt("kill_parent", lambda: os.kill(os.getppid(), 0) or "signal 0 delivered")
import torch
dev = torch.device(probe["device"])
if dev.type == "cuda":
    torch.cuda.set_device(0); torch.zeros(1, device=dev)
from evaluator.shared.arena import Arena
msg, fds, _, _ = socket.recv_fds(s, 1024, 1)
info = json.loads(msg)
a = Arena(dev, info["nbytes"], fd=fds[0])
x = a.view(0, [1024], torch.float32)
report["child_saw"] = float(x.sum())
x.mul_(2)
if dev.type == "cuda": torch.cuda.synchronize()
# a setsid grandchild that tries to outlive us
import subprocess
subprocess.Popen(["sleep", "300"], start_new_session=True)
report["cuda"] = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
s.sendall((json.dumps(report) + "\n").encode())
time.sleep(60)
'''


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if Path("/dev/nvidiactl").exists() else "cpu")
    a = p.parse_args()
    caps = sandbox.capabilities()
    print("capabilities:", json.dumps(caps.__dict__, indent=1))
    print("needed read paths:", sandbox.needed_read_paths())
    yes, no = sandbox.describe(caps)
    print("enforced:", *yes, sep="\n  ")
    print("not enforced:", *no, sep="\n  ")
    import torch

    from evaluator.shared.arena import Arena

    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.zeros(1, device=dev)
    arena = Arena(dev, 1 << 20)
    x = arena.view(0, [1024], torch.float32)
    x.copy_(torch.arange(1024, dtype=torch.float32, device=dev))
    work = tempfile.mkdtemp(prefix="klsp-probe-")
    if caps.root:
        os.chown(work, sandbox.NOBODY, sandbox.NOBODY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    policy = WorkerPolicy(role="runner", workdir=work, gpu=dev.type == "cuda", namespaces=bool(caps.bwrap),
                          read_paths=tuple(sandbox.needed_read_paths()))
    probe = {"device": a.device, "tcp_port": listener.getsockname()[1]}
    parent, child = socket.socketpair()
    cg = cgroup.Cgroup(f"klsp-probe-{os.getpid()}", 8 << 30, 64, caps.cgroup)
    env = {"PATH": os.environ.get("PATH", ""), "KLSP_ROOT": str(Path(__file__).resolve().parents[1]),
           "HOME": work, "TMPDIR": work, "SECRET_PROBE_TOKEN": "do-not-leak"}
    for k in ("LD_LIBRARY_PATH", "CUDA_HOME"):
        if k in os.environ:
            env[k] = os.environ[k]
    argv = sandbox.command([sys.executable, "-c", CHILD, str(child.fileno()), policy.to_json(), json.dumps(probe)],
                           policy, caps)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), env=env, start_new_session=True)
    child.close()
    socket.send_fds(parent, [json.dumps({"nbytes": arena.nbytes}).encode()], [arena.fd])
    parent.settimeout(120)
    buf = b""
    while b"\n" not in buf:
        chunk = parent.recv(65536)
        if not chunk:
            print("child died:", proc.wait())
            return 1
        buf += chunk
    report = json.loads(buf)
    print(f"child ready after {time.perf_counter() - t0:.2f} s")
    for d in proctree.descendants(proc.pid):
        cg.add(d)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    report["parent_sees_after_child_doubled"] = float(x.sum())
    report["expected"] = float(sum(range(1024)) * 2)
    print(json.dumps(report, indent=1))
    desc = proctree.descendants(proc.pid)
    print("processes in the sandbox:", len(desc), "cgroup pids:", cg.pids())
    os.kill(proc.pid, 9)
    proc.wait()
    time.sleep(0.5)
    left = [d for d in desc if (proctree.stat(d) or ["Z"])[0] not in ("Z", "X")]
    print("left after killing the sandbox's root:", left)
    print("escape file in /tmp:", Path("/tmp/klsp_probe_escape").exists())
    cg.close()
    arena.close()
    ok = (report["parent_sees_after_child_doubled"] == report["expected"] and not left
          and not Path("/tmp/klsp_probe_escape").exists())
    print("PROBE", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
