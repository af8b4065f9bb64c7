"""async-discard-counter: HPUAsyncScheduler._update_request_with_output on vLLM 0.26.0.

Runs the tree's HPUAsyncScheduler on top of vLLM's real AsyncScheduler and the real Scheduler
methods it relies on (_update_request_with_output, reset_prefix_cache, _preempt_request), each
compiled from the given trees. Only the KV cache manager, the queues and the Request object are
stand-ins; the Request carries exactly the async fields that vLLM 0.26.0's Request.__init__ sets.
It covers a partial prefill chunk's spurious token, a force preemption with one frame in flight,
and one with two frames in flight where the request is rescheduled before the second stale frame
returns (so a counter cleared instead of counted down lets that stale token through).
"""

from __future__ import annotations

import ast
import enum
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from unittest import mock

from fixpack.proofkit import Trees, load_function, parse_file

HPU_SCHED = "vllm_gaudi/v1/core/sched/hpu_async_scheduler.py"
ASYNC_SCHED = "vllm/v1/core/sched/async_scheduler.py"
SCHED = "vllm/v1/core/sched/scheduler.py"
REQUEST = "vllm/v1/request.py"


def _init_attributes(path: Path) -> set[str]:
    """Names that vLLM's Request.__init__ assigns on self."""
    tree = parse_file(path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Request")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {
        t.attr
        for node in ast.walk(init)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _build(trees: Trees) -> tuple[Any, type, Any]:
    if trees.vllm_gaudi is None or trees.vllm is None:
        raise RuntimeError("this proof needs both the vllm-gaudi and the vllm tree")
    gaudi, vllm = Path(trees.vllm_gaudi), Path(trees.vllm)

    attrs = _init_attributes(vllm / REQUEST)
    if "async_tokens_to_discard" not in attrs or "num_output_placeholders" not in attrs:
        raise RuntimeError("the vllm tree's Request has no async_tokens_to_discard counter")

    status = load_function(vllm / REQUEST, "RequestStatus", {"enum": enum})
    append = load_function(vllm / REQUEST, "Request.append_output_token_ids", {})

    class Request:
        """The fields of vLLM 0.26.0's Request that the schedulers touch, nothing more."""

        def __init__(self, request_id: str, output: list[int], num_computed_tokens: int) -> None:
            self.request_id = request_id
            self.status = status.RUNNING
            self._output_token_ids = list(output)
            self._all_token_ids = list(range(8)) + list(output)
            self.num_computed_tokens = num_computed_tokens
            self.num_output_placeholders = 0
            self.async_tokens_to_discard = 0
            self.spec_token_ids: list[int] = []
            self.num_preemptions = 0

        append_output_token_ids = append

        def update_block_hashes(self) -> None:
            pass

    for name in vars(Request(request_id="x", output=[], num_computed_tokens=0)):
        if name not in attrs:
            raise RuntimeError(f"stand-in Request field {name!r} is not a vLLM Request field")

    ns: dict[str, Any] = {
        "Request": Request,
        "RequestStatus": status,
        "check_stop": lambda request, max_model_len: False,
        "time": time,
        "logger": mock.MagicMock(),
        "EngineCoreEventType": mock.MagicMock(),
    }

    class Scheduler:
        _update_request_with_output = load_function(vllm / SCHED, "Scheduler._update_request_with_output", ns)
        reset_prefix_cache = load_function(vllm / SCHED, "Scheduler.reset_prefix_cache", ns)
        _preempt_request = load_function(vllm / SCHED, "Scheduler._preempt_request", ns)

    async_scheduler = load_function(
        vllm / ASYNC_SCHED, "AsyncScheduler", dict(ns, Scheduler=Scheduler, SchedulerOutput=object)
    )
    hpu_scheduler = load_function(
        gaudi / HPU_SCHED,
        "HPUAsyncScheduler",
        dict(ns, AsyncScheduler=async_scheduler, Iterable=Iterable),
    )

    sched = object.__new__(hpu_scheduler)
    sched.max_model_len = 4096
    sched.kv_cache_manager = mock.MagicMock()
    sched.kv_cache_manager.reset_prefix_cache.return_value = True
    sched.encoder_cache_manager = mock.MagicMock()
    sched.waiting = mock.MagicMock()
    sched._free_request_blocks = mock.MagicMock()
    sched._inflight_prefills = set()
    sched.reset_preempted_req_ids = set()
    sched.prev_step_scheduled_req_ids = set()
    sched.running = []
    sched.log_stats = False
    return sched, Request, status


def _update(sched: Any, request: Any, tokens: list[int], what: str) -> tuple[list[int], bool]:
    try:
        return sched._update_request_with_output(request, list(tokens))
    except AttributeError as exc:
        if "discard_latest_async_tokens" not in str(exc):
            raise
        raise AssertionError(f"{what}: HPUAsyncScheduler._update_request_with_output raised {exc!r}") from exc


def check(trees: Trees) -> None:
    sched, request_cls, status = _build(trees)

    # 1. A partial prefill chunk has no placeholder, but the HPU runner may still return a token
    #    for it (a resumed, chunked recompute after an ordinary preemption). It must be dropped.
    req = request_cls("chunk", output=[], num_computed_tokens=512)
    new, stopped = _update(sched, req, [7], "spurious token for a partial prefill chunk")
    assert (new, stopped, req._output_token_ids) == ([], False, []), (
        f"spurious partial-chunk token kept: returned {new}, output {req._output_token_ids}"
    )
    assert req.async_tokens_to_discard == 0

    # 2. Force preemption with one decode frame in flight (vLLM's real reset_prefix_cache).
    req = request_cls("forced", output=[5], num_computed_tokens=10)
    req.num_output_placeholders = 1
    sched.running = [req]
    sched.reset_prefix_cache(reset_running_requests=True)
    assert (req.async_tokens_to_discard, req.num_output_placeholders) == (1, 0)
    assert req.status == status.PREEMPTED

    # The stale frame returns: it must be dropped and counted off.
    new, _ = _update(sched, req, [111], "stale frame of a force-preempted request")
    assert new == [], f"stale frame token {new} was kept"
    assert req.async_tokens_to_discard == 0, (
        f"stale frame dropped but async_tokens_to_discard left at {req.async_tokens_to_discard}: "
        "the next real token of the request will be discarded"
    )

    # The request is rescheduled (full recompute, one placeholder) and its first real token comes.
    req.status = status.RUNNING
    req.num_computed_tokens = 11
    req.num_output_placeholders = 1
    new, _ = _update(sched, req, [222], "first token after resume")
    assert new == [222] and req._output_token_ids == [5, 222], (
        f"first real token after force preemption lost: returned {new}, output {req._output_token_ids}"
    )
    assert (req.async_tokens_to_discard, req.num_output_placeholders) == (0, 0), (
        f"after resume: counter {req.async_tokens_to_discard}, placeholders {req.num_output_placeholders}"
    )

    # 3. Force preemption with two decode frames in flight. The first stale frame arrives while the
    #    request is preempted (no placeholder: the HPU path drops it); the request is then
    #    rescheduled, so the second stale frame arrives with a placeholder set and goes to
    #    AsyncScheduler, which must still see one frame to discard. The counter has to be counted
    #    down by one per stale frame, not cleared.
    req = request_cls("forced-2", output=[5], num_computed_tokens=10)
    req.num_output_placeholders = 2
    sched.running = [req]
    sched.reset_prefix_cache(reset_running_requests=True)
    assert (req.async_tokens_to_discard, req.num_output_placeholders) == (2, 0)

    new, _ = _update(sched, req, [111], "first stale frame (two in flight)")
    assert new == [] and req._output_token_ids == [5], f"first stale frame token {new} was kept"

    # Rescheduled before the second stale frame returns.
    req.status = status.RUNNING
    req.num_computed_tokens = 11
    req.num_output_placeholders = 1
    new, _ = _update(sched, req, [112], "second stale frame, after the request was rescheduled")
    assert new == [] and req._output_token_ids == [5], (
        f"second stale frame token kept after resume: returned {new}, output {req._output_token_ids}"
    )
    assert (req.async_tokens_to_discard, req.num_output_placeholders) == (0, 1), (
        f"after the second stale frame: counter {req.async_tokens_to_discard}, "
        f"placeholders {req.num_output_placeholders}"
    )

    new, _ = _update(sched, req, [222], "first real token after two stale frames")
    assert new == [222] and req._output_token_ids == [5, 222], (
        f"first real token after force preemption (two frames in flight): returned {new}, "
        f"output {req._output_token_ids}"
    )
    assert (req.async_tokens_to_discard, req.num_output_placeholders) == (0, 0)
