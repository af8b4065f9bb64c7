"""What the rank agreement adds to a rank's start: N CPU ranks (2, 4, 8), each a process with a
real torch.distributed default group (gloo, a tcp:// rendezvous store on 127.0.0.1) and fixpack's
runtime check package as apply writes it (one fix set for all), call ``agree()`` right after a
barrier, as they would once vLLM's groups exist. Each rank times its own call; the figure per run
is the slowest rank's (the start waits for it), over ``--repeat`` runs: median and max.

The index lists ``--files`` patched files of 100 KB each (the v0.26.0 pack patches 13), whose hashes
decide whether a rank may send its digest. In a vLLM process the runtime check has hashed them
already (vLLM loads its plugins first), and the agreement reuses those hashes: ``after the check``
is that order; ``alone`` has the agreement hash them itself, what a process that loads no plugins
pays. Last, one rank's record alone (``_own_record``: the index read and the digest as vouched for),
timed in one process over many calls: the part of the agreement that the rule changed.

    PYTHONPATH=. python3 bench/agree.py [--ranks 2 4 8] [--repeat 5] [--files 13]

Not part of bench/run.py: it needs torch, and it measures vLLM's start rather than fixpack's apply.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from fixpack.installation import plugin

FIXES = ["sampling-rows-refresh", "hybrid-decode-pad", "rank-exception-fatal", "fix-set-agreement"]

RANK = """
import sys, time
import torch.distributed as dist
rank, world, port, checked = map(int, sys.argv[1:5])
if checked:
    from fixpack_runtime_check import check
    check()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank)
from fixpack_runtime_check.agree import agree
dist.barrier()
start = time.perf_counter()
agree()
took = time.perf_counter() - start
dist.barrier()  # rank 0 holds the store: nobody leaves before every rank has read it
print(f"{took * 1000:.3f}", flush=True)
"""


def _package(folder: Path, n_files: int) -> None:
    entries = []
    for i in range(n_files):
        content = (f"# module {i}\n".encode() + b"x = 1\n" * 17_000)[:100_000]
        file = folder / "patched" / f"module_{i}.py"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
        entries.append(
            {"path": f"patched/module_{i}.py", "module": f"patched.module_{i}", "file": str(file),
             "sha256": hashlib.sha256(content).hexdigest(), "original": None, "pristine": None}
        )  # fmt: skip
    index = {"format": 1, "mode": "in-place", "profile": "v0.26.0", "release": "v0.26.0", "files": entries}
    index.update(fixes=FIXES, fix_set={"digest": "0123456789abcdef", "fixes": FIXES})
    for rel, content in plugin.files(json.dumps(index).encode()).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)


RECORD = """
import time
from fixpack_runtime_check import check
from fixpack_runtime_check.agree import _own_record
check()
n = 2000
start = time.perf_counter()
for _ in range(n):
    _own_record(0)
print(f"{(time.perf_counter() - start) / n * 1e6:.1f}")
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(folder: Path, world: int, checked: bool) -> float:
    """The slowest rank's agreement, in ms; ``checked``: the runtime check ran first in each rank."""
    env = dict(os.environ, PYTHONPATH=str(folder), FIXPACK_RUNTIME_CHECK="stop")
    port = _port()
    argv = [sys.executable, "-c", RANK]
    procs = [
        subprocess.Popen([*argv, str(r), str(world), str(port), str(int(checked))], env=env, stdout=subprocess.PIPE)
        for r in range(world)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"bench/agree.py: a rank failed (world {world})")
    return max(float(o.decode().strip().splitlines()[-1]) for o in outs)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/agree.py")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=13)
    ns = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"rank agreement, {cores} CPU cores, {ns.files} patched files, {ns.repeat} runs each: "
        "the slowest rank's agree() per run"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _package(folder, ns.files)
        for world in ns.ranks:
            for checked in (True, False):
                runs = [one_run(folder, world, checked) for _ in range(ns.repeat)]
                how = "after the check" if checked else "alone"
                print(f"  {world} ranks, {how}: median {statistics.median(runs):.1f} ms, max {max(runs):.1f} ms")
        env = dict(os.environ, PYTHONPATH=str(folder))
        took = subprocess.run([sys.executable, "-c", RECORD], env=env, capture_output=True, text=True, check=True)
        print(f"  one rank's record after the check: {took.stdout.strip()} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
