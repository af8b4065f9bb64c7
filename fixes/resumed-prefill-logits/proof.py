"""Proof for resumed-prefill-logits.

Builds the persistent-batch row of a request with the tree's real ``CachedRequestState`` and
``InputBatch.add_request`` (numpy arrays as in ``InputBatch``), then runs the real
``HPUModelRunner._extract_prefill_batch_contents`` on it and reads which positions it samples.

Reference (vLLM 0.26.0 gpu_model_runner): a request is sampled once, at the last scheduled
position, and the sample is discarded while ``num_computed + num_scheduled < num_tokens``.

The bug: a request resumed after preemption with prefix-cache hits keeps num_prompt_tokens = the
original prompt length (add_request only folds the outputs in when num_computed_tokens == 0), so
the runner samples at every recomputed output position and each sample is appended as a new
token: the generated tail repeats. With async scheduling its non-final chunks return tokens.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Optional
from unittest import mock

import numpy as np
import torch

from fixpack.proofkit import Trees, compile_nodes, load_function, load_node

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
INPUT_BATCH = "vllm_gaudi/v1/worker/hpu_input_batch.py"
BLOCK = 128
MAX_REQS, MAX_LEN = 4, 1024


class SamplingParams:
    """Greedy request; any field the code reads that is not listed here is None."""

    sampling_type = "greedy"
    temperature, top_p, top_k, min_p = 0.0, 1.0, 0, 0.0
    frequency_penalty, presence_penalty, repetition_penalty = 0.0, 0.0, 1.0

    def __getattr__(self, name: str) -> Any:
        return None


class Batch:
    """Stand-in ``InputBatch``: the real per-row arrays; sampling bookkeeping is mocked."""

    def __init__(self) -> None:
        self.max_num_reqs, self.max_model_len, self.vocab_size = MAX_REQS, MAX_LEN, 1000
        self._req_ids: list[str | None] = []
        self.req_output_token_ids: list[Any] = []
        self.req_id_to_index: dict[str, int] = {}
        self.token_ids_cpu = np.zeros((MAX_REQS, MAX_LEN), dtype=np.int32)
        self.num_tokens = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_prompt_tokens = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_computed_tokens_cpu = np.zeros(MAX_REQS, dtype=np.int32)
        table = types.SimpleNamespace(
            get_cpu_tensor=lambda: torch.zeros((MAX_REQS, MAX_LEN // BLOCK), dtype=torch.int32)
        )
        self.block_table = mock.MagicMock()
        self.block_table.__getitem__.return_value = table

    @property
    def req_ids(self) -> list[str | None]:
        return self._req_ids

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    def __getattr__(self, name: str) -> Any:
        value = mock.MagicMock(name=name)
        setattr(self, name, value)
        return value


class Runner(types.SimpleNamespace):
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"proof stand-in runner has no attribute {name!r}; the method now reads it")


def _loaders(trees: Trees) -> tuple[Any, Any, Any]:
    assert trees.vllm_gaudi is not None, "needs the vllm-gaudi tree"
    runner_py, batch_py = trees.vllm_gaudi / RUNNER, trees.vllm_gaudi / INPUT_BATCH
    any_type: dict[str, Any] = {
        name: Any
        for name in ("MultiModalFeatureSpec", "SamplingParams", "LoRARequest", "PoolingParams", "PoolingStates")
    }
    ns: dict[str, Any] = {"dataclass": dataclass, "field": field, "Optional": Optional, "torch": torch, **any_type}
    exec(compile_nodes(batch_py, [load_node(batch_py, "CachedRequestState")]), ns)
    add_request = load_function(
        batch_py,
        "InputBatch.add_request",
        {
            "Optional": Optional,
            "torch": torch,
            "np": np,
            "_SAMPLING_EPS": 1e-5,
            "SamplingType": types.SimpleNamespace(GREEDY="greedy", RANDOM="random", RANDOM_SEED="random_seed"),
            "CachedRequestState": ns["CachedRequestState"],
        },
    )

    rns: dict[str, Any] = {
        "dataclass": dataclass,
        "field": field,
        "Optional": Optional,
        "Any": Any,
        "np": np,
        "torch": torch,
        "empty_list": lambda: field(default_factory=list),
    }
    exec(compile_nodes(runner_py, [load_node(runner_py, "BatchContents")]), rns)
    for name in ("round_up", "merge_contents", "shallow_tuple"):
        rns[name] = load_function(runner_py, name, rns)
    extract = load_function(runner_py, "HPUModelRunner._extract_prefill_batch_contents", rns)
    return ns["CachedRequestState"], add_request, extract


def check(trees: Trees) -> None:
    cached_request_state, add_request, extract = _loaders(trees)

    def sampled(*, prompt: int, outputs: int, computed: int, scheduled: int, use_async: bool) -> tuple[list[int], bool]:
        """Positions (within the scheduled chunk) the runner samples, and whether it marks the row invalid."""
        req = cached_request_state(
            req_id="r0",
            prompt_token_ids=list(range(1, prompt + 1)),
            mm_features=[],
            sampling_params=SamplingParams(),
            generator=None,
            block_ids=[[1, 2, 3, 4]],
            num_computed_tokens=computed,
            output_token_ids=list(range(5001, 5001 + outputs)),
        )
        batch = Batch()
        add_request(batch, req, 0)
        runner = Runner(
            input_batch=batch,
            use_async_scheduling=use_async,
            use_structured_output=False,
            invalid_req_indices=[],
            attn_block_size=BLOCK,
            _get_attention_group_id_for_hybrid=lambda: 0,
            _resolve_block=lambda b: b,
            _can_merge_prefill_contents=lambda lhs, rhs: False,
            get_dp_padding=lambda n: 0,
        )
        contents, _ = extract(runner, 1, 0, [scheduled])
        [positions] = [c.logits_positions[0] for c in contents if c.req_ids == ["r0"]]
        return positions, 0 in runner.invalid_req_indices

    P, OUT = 300, 200
    failures: list[str] = []

    def expect(label: str, got: tuple[list[int], bool], want: tuple[list[int], bool]) -> None:
        if got != want:
            pos, inv = got
            failures.append(
                f"{label}: samples {len(pos)} position(s) {pos[:3]}{'...' if len(pos) > 3 else ''}"
                f" (invalid={inv}); expected {want[0]} (invalid={want[1]})"
            )

    # Resumed after preemption with a 256-token prefix-cache hit; the rest (prompt tail and the
    # 200 earlier outputs) is recomputed in one chunk: only its last position may be sampled.
    h = 2 * BLOCK
    rest = P + OUT - h
    for use_async in (False, True):
        expect(
            f"resumed, hit={h}, last chunk, async={use_async}",
            sampled(prompt=P, outputs=OUT, computed=h, scheduled=rest, use_async=use_async),
            ([rest - 1], False),
        )
    # Same request, non-final chunk: no token (non-async), or one discarded logit (async).
    expect(
        "resumed, hit=256, partial chunk, async=False",
        sampled(prompt=P, outputs=OUT, computed=h, scheduled=BLOCK, use_async=False),
        ([], False),
    )
    expect(
        "resumed, hit=256, partial chunk, async=True",
        sampled(prompt=P, outputs=OUT, computed=h, scheduled=BLOCK, use_async=True),
        ([BLOCK - 1], True),
    )
    # Unchanged cases: resumed without hits, fresh prompts (whole, chunked, with a prefix hit).
    expect(
        "resumed, no hit",
        sampled(prompt=P, outputs=OUT, computed=0, scheduled=P + OUT, use_async=False),
        ([P + OUT - 1], False),
    )
    expect("new prompt", sampled(prompt=P, outputs=0, computed=0, scheduled=P, use_async=False), ([P - 1], False))
    expect(
        "new prompt, prefix hit",
        sampled(prompt=P, outputs=0, computed=BLOCK, scheduled=P - BLOCK, use_async=True),
        ([P - BLOCK - 1], False),
    )
    expect(
        "new prompt, first chunk",
        sampled(prompt=P, outputs=0, computed=0, scheduled=BLOCK, use_async=False),
        ([], False),
    )
    expect(
        "new prompt, first chunk, async",
        sampled(prompt=P, outputs=0, computed=0, scheduled=BLOCK, use_async=True),
        ([BLOCK - 1], True),
    )

    assert not failures, (
        "prefill of a request resumed with prefix-cache hits samples recomputed outputs again "
        "(each sample is appended as a new token): " + "; ".join(failures)
    )
