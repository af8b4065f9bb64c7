"""Running proofs, each in a process of its own: by default a child forked from a proof server
that has imported torch and numpy once, so that a proof pays for neither and still has a module
table and stubs of its own (``verify`` sends every proof to one shared server, and children run
side by side); with ``FIXPACK_PROOF_FORK=0``, a fresh interpreter per proof.

The server is single-threaded (forking a threaded process is unsafe): it reads requests as JSON
lines on stdin and answers, as children end, with JSON lines on stdout.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .proofkit import BUG_PRESENT, ERROR, PASSED, Trees, run_request

__all__ = ["ProofRun", "run_proof", "start_server", "threads_per_proof", "ProofServer", "shared"]


@dataclass(frozen=True, slots=True)
class ProofRun:
    code: int  # PASSED, BUG_PRESENT or ERROR
    output: str


def threads_per_proof(jobs: int) -> int:
    """Torch threads for each of ``jobs`` proofs run side by side: the cores shared out. Proofs
    that each take every core oversubscribe them (two such RoPE proofs on two cores: 6.5 s each,
    against 4.3 s with one thread each)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def proof_request(
    proof_file: Path, trees: Trees, threads: int | None = None, coverage: str | None = None
) -> dict[str, Any]:
    """Where a proof runs: its folder, and the proof's own cookbook first on the path (for its
    fixes/_support helpers), then the fixpack it runs with."""
    repo_root = Path(__file__).resolve().parent.parent
    cookbook = proof_file.resolve().parents[2]
    return {
        "proof": str(proof_file.resolve()),
        "vllm_gaudi": None if trees.vllm_gaudi is None else str(trees.vllm_gaudi),
        "vllm": None if trees.vllm is None else str(trees.vllm),
        "cwd": str(proof_file.parent),
        "path": [str(cookbook), str(repo_root)],
        "threads": threads,
        "coverage": coverage,
    }


def _forking() -> bool:
    return os.environ.get("FIXPACK_PROOF_FORK", "1") != "0" and hasattr(os, "fork")


def start_server() -> None:
    """Start the shared proof server now, so that its imports (seconds) overlap the caller's own
    work, such as copying trees; nothing to do when proofs run in fresh interpreters."""
    if _forking():
        shared()


def run_proof(
    proof_file: Path, trees: Trees, timeout: float = 600.0, threads: int | None = None, coverage: str | None = None
) -> ProofRun:
    """Run a proof in a process of its own (with ``threads`` torch threads: default, torch's own
    choice; under coverage.py given ``coverage``, a configuration file, see ``proofkit``); never raises for the proof's
    own failures."""
    request = proof_request(proof_file, trees, threads, coverage)
    if _forking():
        return ProofRun(*shared().run(request, timeout))
    return _run_fresh(request, timeout)


def _run_fresh(request: dict[str, Any], timeout: float) -> ProofRun:
    args = [sys.executable, "-m", "fixpack.proofkit", "run", request["proof"]]
    for flag, key in (("--vllm-gaudi", "vllm_gaudi"), ("--vllm", "vllm")):
        if request[key] is not None:
            args += [flag, request[key]]
    if request.get("coverage"):
        args += ["--coverage", request["coverage"]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*request["path"], os.environ.get("PYTHONPATH", "")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # proofs must not leave __pycache__ in the trees
    if request["threads"]:
        env["OMP_NUM_THREADS"] = str(request["threads"])
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=request["cwd"])
    except subprocess.TimeoutExpired:
        return ProofRun(ERROR, f"proof timed out after {timeout:.0f} s")
    code = done.returncode if done.returncode in (PASSED, BUG_PRESENT) else ERROR
    return ProofRun(code, (done.stdout + done.stderr).strip())


class ProofServer:
    """The client side: ``run`` is safe to call from several threads at once."""

    def __init__(self) -> None:
        repo_root = Path(__file__).resolve().parent.parent
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), os.environ.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "fixpack.proofrun"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self._lock = threading.Lock()
        self._waiting: dict[int, Future[tuple[int, str]]] = {}
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    def run(self, request: dict[str, Any], timeout: float) -> tuple[int, str]:
        future: Future[tuple[int, str]] = Future()
        with self._lock:
            self._next += 1
            rid = self._next
            self._waiting[rid] = future
            line = json.dumps({**request, "id": rid, "timeout": timeout}) + "\n"
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
            except OSError:
                del self._waiting[rid]
                return ERROR, "the proof server stopped"
        return future.result()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            answer = json.loads(raw)
            with self._lock:
                future = self._waiting.pop(answer["id"], None)
            if future is not None:
                future.set_result((answer["code"], answer["output"]))
        with self._lock:  # the server is gone: nothing more will come
            for future in self._waiting.values():
                future.set_result((ERROR, "the proof server stopped"))
            self._waiting.clear()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)


_SHARED: ProofServer | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> ProofServer:
    """The process's proof server, started on first use and stopped at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ProofServer()
            atexit.register(_SHARED.close)
        return _SHARED


def _fork(request: dict[str, Any]) -> tuple[int, str]:
    fd, log = tempfile.mkstemp(prefix="fixpack-proof-", suffix=".log")
    pid = os.fork()
    if pid == 0:  # the child: its output goes to the log, its exit code is the verdict
        code = ERROR
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            code = run_request(request)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(fd)
    return pid, log


def _answer(reply: int, rid: int, code: int, log: str, extra: str = "") -> None:
    with open(log, encoding="utf-8", errors="replace") as fh:
        output = (fh.read() + extra).strip()
    os.unlink(log)
    os.write(reply, (json.dumps({"id": rid, "code": code, "output": output}) + "\n").encode())


def serve() -> int:
    # What the proofs would import each time: once, here. torch._dynamo (1.5 s) is imported lazily
    # by torch.compile, torch.topk under a dispatch mode, Tensor.exponential_'s reference, ...
    for name in ("torch", "numpy", "torch._dynamo"):
        try:
            __import__(name)
        except ImportError:
            pass
    reply = os.dup(1)
    os.dup2(2, 1)  # nothing but answers on the reply pipe
    pending = b""
    children: dict[int, tuple[int, str, float]] = {}  # pid -> request id, log, deadline
    reading = True
    while reading or children:
        ready = select.select([0], [], [], 0.02)[0] if reading else []
        if ready:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid, log = _fork(request)
                children[pid] = (request["id"], log, time.monotonic() + float(request["timeout"]))
        elif not reading:
            time.sleep(0.02)
        for pid, (rid, log, deadline) in list(children.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0 and time.monotonic() < deadline:
                continue
            extra = ""
            if done == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                code, extra = ERROR, "\nproof timed out"
            else:
                code = os.waitstatus_to_exitcode(status)
                code = code if code in (PASSED, BUG_PRESENT) else ERROR
            _answer(reply, rid, code, log, extra)
            del children[pid]
    return 0


if __name__ == "__main__":
    sys.exit(serve())
