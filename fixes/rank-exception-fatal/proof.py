"""rank-exception-fatal: a failing non-output rank must make the executor fail the engine.

Runs vLLM's real WorkerProc.worker_main and WorkerProc.worker_busy_loop in a forked worker
process (rank 1 of 2; output rank 0), and vLLM's real MultiprocExecutor.start_worker_monitor in
this process, all compiled from the given tree. Stand-ins: the broadcast and response message
queues, the model worker and the executor object. The worker's execute_model raises for step 1;
the executor then broadcasts step 2. On the executor side only the monitor can learn of a failure
on rank 1, since only the output rank's reply is read; its failure callback is what EngineCore
registers to fail the engine (EXECUTOR_FAILED).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
import weakref
from functools import partial
from pathlib import Path
from threading import Thread
from types import SimpleNamespace
from typing import Any
from unittest import mock

from fixpack.proofkit import Trees, load_function

EXECUTOR = "vllm/v1/executor/multiproc_executor.py"
RANK, OUTPUT_RANK = 1, 0


def _logger() -> logging.Logger:
    log = logging.getLogger("proof.multiproc_executor")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


class StepFailed(RuntimeError):
    pass


class _Worker:
    """The model worker: step 1 fails on this rank, every call is reported to the parent."""

    def __init__(self, report: Any) -> None:
        self.report = report

    def execute_model(self, step: int) -> str:
        self.report.put(("execute_model", step))
        if step == 1:
            raise StepFailed("device error on rank 1 in step 1")
        return f"output of step {step}"


def _worker_proc_class(busy_loop: Any) -> type:
    class WorkerProc:
        READY_STR = "READY"
        worker_busy_loop = busy_loop

        def __init__(self, *, rank: int, rpc: Any, report: Any, **kwargs: Any) -> None:
            self.rank = rank
            self.report = report
            self.rpc_broadcast_mq = SimpleNamespace(
                dequeue=lambda indefinite=False: rpc.get(), wait_until_ready=lambda: None
            )
            self.worker_response_mq = SimpleNamespace(
                export_handle=lambda: "response-handle", wait_until_ready=lambda: None
            )
            self.peer_response_handles: list[Any] = []
            self.worker = _Worker(report)

        def monitor_death_pipe(self, death_pipe: Any, shutdown_requested: Any) -> None:
            pass

        def handle_output(self, output: Any) -> None:
            self.report.put(("reply", repr(output)))

        def shutdown(self) -> None:
            self.report.put(("worker shutdown",))

    return WorkerProc


class _Executor:
    """What start_worker_monitor touches on MultiprocExecutor."""

    def __init__(self, proc: Any, failed: threading.Event) -> None:
        self.workers = [SimpleNamespace(proc=proc)]
        self.is_failed = False
        self.shut_down = False
        self.failure_callback = failed.set

    def shutdown(self) -> None:
        self.shut_down = True


def _drain(report: Any, seen: list[tuple[Any, ...]], timeout: float = 0.0) -> None:
    while True:
        try:
            seen.append(report.get(timeout=timeout) if timeout else report.get_nowait())
        except queue.Empty:
            return


def _busy_loop_in_process(busy_loop: Any) -> None:
    """Failures that are reported (output rank, or every rank replying) keep the loop going."""

    class Stop(Exception):
        pass

    for rank, output_rank in ((OUTPUT_RANK, OUTPUT_RANK), (RANK, None)):
        rpcs = [("execute_model", (1,), {}, output_rank), ("execute_model", (2,), {}, output_rank)]
        replies: list[Any] = []

        def dequeue(indefinite: bool = False, rpcs: list[Any] = rpcs) -> Any:
            if not rpcs:
                raise Stop
            return rpcs.pop(0)

        proc = SimpleNamespace(
            rank=rank,
            rpc_broadcast_mq=SimpleNamespace(dequeue=dequeue),
            worker=_Worker(mock.MagicMock()),
            handle_output=replies.append,
        )
        try:
            busy_loop(proc)
        except Stop:
            pass
        assert len(replies) == 2 and isinstance(replies[0], StepFailed), (
            f"rank {rank}, output_rank {output_rank}: replies {replies!r}"
        )
        assert replies[1] == "output of step 2"


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    path = Path(trees.vllm) / EXECUTOR
    log = _logger()
    busy_loop = load_function(
        path,
        "WorkerProc.worker_busy_loop",
        {"cloudpickle": mock.MagicMock(), "partial": partial, "traceback": traceback, "logger": log},
    )
    _busy_loop_in_process(busy_loop)

    worker_main = load_function(
        path,
        "WorkerProc.worker_main",
        {
            "signal": signal,
            "threading": threading,
            "os": os,
            "logger": log,
            "set_worker_net_device": lambda local_rank, vllm_config: None,
            "maybe_init_worker_tracer": lambda **kwargs: None,
            "numa_utils": mock.MagicMock(),
            "WorkerProc": _worker_proc_class(busy_loop),
        },
    )
    start_worker_monitor = load_function(
        path,
        "MultiprocExecutor.start_worker_monitor",
        {"weakref": weakref, "multiprocessing": multiprocessing, "Thread": Thread, "logger": log},
    )

    ctx = multiprocessing.get_context("fork")
    rpc, report = ctx.Queue(), ctx.Queue()
    ready_reader, ready_writer = ctx.Pipe(duplex=False)
    vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(assigned_physical_gpu_ids=None, numa_bind=False))
    proc = ctx.Process(
        target=worker_main,
        kwargs={
            "vllm_config": vllm_config,
            "local_rank": RANK,
            "rank": RANK,
            "ready_pipe": ready_writer,
            "death_pipe": None,
            "rpc": rpc,
            "report": report,
        },
        name=f"VllmWorker-{RANK}",
        daemon=True,
    )
    proc.start()
    ready_writer.close()
    if not ready_reader.poll(30) or ready_reader.recv().get("status") != "READY":
        proc.kill()
        raise RuntimeError("the stand-in worker did not start")

    failed = threading.Event()
    executor = _Executor(proc, failed)
    start_worker_monitor(executor)

    # The executor broadcasts two steps and reads only the output rank's replies.
    rpc.put(("execute_model", (1,), {}, OUTPUT_RANK))
    rpc.put(("execute_model", (2,), {}, OUTPUT_RANK))

    seen: list[tuple[Any, ...]] = []
    start = time.monotonic()
    ran_step_2_at = None
    while not failed.wait(0.05):
        _drain(report, seen)
        if ran_step_2_at is None and ("execute_model", 2) in seen:
            ran_step_2_at = time.monotonic()
        now = time.monotonic()
        # Step 2 having run is the bug already; the short grace only lets the message say whether
        # the monitor failed the engine late.
        if (ran_step_2_at is not None and now - ran_step_2_at > 0.3) or now - start > 30.0:
            break
    engine_failed = failed.is_set()
    if proc.is_alive():
        proc.kill()
    proc.join(10)
    _drain(report, seen, timeout=0.2)  # the worker has exited: what it sent is in the pipe

    assert engine_failed, (
        f"rank {RANK} raised in execute_model, logged it and kept serving: it ran "
        f"{[s for s in seen if s[0] == 'execute_model']} out of step with the output rank; the "
        "worker process stayed alive, so the executor's worker monitor never failed the engine"
    )
    assert executor.is_failed and executor.shut_down, "the monitor did not fail the executor"
    assert ("execute_model", 2) not in seen, f"rank {RANK} ran step 2 after step 1 failed"
    assert ("worker shutdown",) in seen, f"the worker was not shut down: {seen}"
    assert not any(s[0] == "reply" for s in seen), f"non-output rank replied: {seen}"
