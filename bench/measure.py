"""Measuring whole processes: wall time (start-up included), peak RSS, and medians of repeated runs."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Run", "Series", "run", "run_together", "peak", "must", "log"]


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


@dataclass
class Run:
    seconds: float
    peak_kib: int
    rc: int
    out: str
    err: str


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """One whole process: wall time (perf_counter around it) and its peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return Run(
            seconds,
            usage.ru_maxrss,
            os.waitstatus_to_exitcode(status),
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def run_together(cmds: list[list[str]], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Processes started at once, as a server starts its workers: the wall time until the last
    ends, the worst exit status, and every output in order (peak RSS: not measured, 0)."""
    with contextlib.ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile()), stack.enter_context(tempfile.TemporaryFile())) for _ in cmds
        ]
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
            for cmd, (out, err) in zip(cmds, files)
        ]
        codes = [p.wait() for p in procs]
        seconds = time.perf_counter() - t0
        texts = []
        for out, err in files:
            out.seek(0)
            err.seek(0)
            texts.append((out.read().decode(errors="replace"), err.read().decode(errors="replace")))
    worst = max(codes, key=abs, default=0)
    return Run(seconds, 0, worst, "".join(o for o, _ in texts), "".join(e for _, e in texts))


GNU_TIME = "/usr/bin/time"
LAUNCHER = (
    "import os,sys\n"
    "pid=os.fork()\n"
    "if pid==0:\n"
    "    os.execvp(sys.argv[2],sys.argv[2:])\n"
    "_,st,ru=os.wait4(pid,0)\n"
    "open(sys.argv[1],'w').write(str(ru.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(st))\n"
)


def peak(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run once for its peak RSS, forked from a small process so that the bench's own RSS stays out.

    A process's max RSS starts at its parent's at fork-and-exec, so wait4 from the bench would
    report at least the bench's size. GNU time where installed, else a minimal python -S launcher.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if os.access(GNU_TIME, os.X_OK):
            wrapped = [GNU_TIME, "-q", "-f", "%M", "-o", rss.name, *cmd]
        else:
            wrapped = [sys.executable, "-S", "-c", LAUNCHER, rss.name, *cmd]
        r = run(wrapped, env=env, cwd=cwd)
        text = Path(rss.name).read_text().strip().splitlines()
        r.peak_kib = int(text[-1]) if text and text[-1].isdigit() else 0
        return r


def must(r: Run, what: str, ok: tuple[int, ...] = (0,)) -> Run:
    if r.rc not in ok:
        tail = "\n".join((r.out + r.err).strip().splitlines()[-20:])
        raise SystemExit(f"bench: {what} failed (exit {r.rc}):\n{tail}")
    return r


@dataclass
class Series:
    """Repeated measurements of one contender."""

    name: str
    runs: list[Run] = field(default_factory=list)
    peak_kib: int = 0  # from peak() runs: the timed runs' wait4 figure includes the bench's own size

    def measure(self, r: Run) -> Run:
        self.peak_kib = max(self.peak_kib, r.peak_kib)
        return r

    def add(self, r: Run) -> Run:
        self.runs.append(r)
        return r

    @property
    def median(self) -> float:
        return statistics.median(r.seconds for r in self.runs) if self.runs else float("nan")

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

    def json(self) -> dict[str, Any]:
        return {
            "median_s": self.median,
            "runs_s": [r.seconds for r in self.runs],
            "peak_rss_mib": self.peak_mib,
            "rc": sorted({r.rc for r in self.runs}),
        }
