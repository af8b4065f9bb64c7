"""prompt-logprobs: prompt logprobs must be computed from each request's own token rows, whatever the
layout of the prefill hidden states.

Runs the tree's real ``HPUModelRunner.sample_tokens`` for one prefill batch of four requests (three
with ``prompt_logprobs``: one whole prompt, the last chunk of a chunked prefill, and a middle chunk,
for which every scheduled token has a prompt logprob) until its first sampler call, takes the
per-request hidden states it collected, and feeds them to the tree's real
``_get_prompt_logprobs_dict`` (with the real ``_gather_prompt_logprobs_hpu`` and vLLM's real
``LogprobsTensors``). The model is a stand-in: the hidden state of a token is its embedding row and
``compute_logits`` is a matmul with an lm_head, which like the real one needs ``[n, hidden]``
input. Layouts: flat ``[bs * seq, H]`` (flatten_input: qwen3_moe, qwen3_5_moe, ...), ``[bs, seq, H]``,
and merged prefill ``[total, H]`` / ``[1, total, H]``. The result (and, for the middle chunk, the
rows it fills in the request's in-progress prompt logprobs) must equal a reference computed from the
prompts directly.
"""

from __future__ import annotations

import typing
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import torch

from fixes._support.runner import PrefillData, RunnerStandIn, runner_class, sample_tokens_globals, stand_in_runner
from fixpack.proofkit import Trees, load_function

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
OUTPUTS = "vllm/v1/outputs.py"
VOCAB = 64
HIDDEN = 32
SEQ = 8  # padded prefill length (2-D prefill bucket)
MERGED_LEN = 24  # padded total length (merged prefill bucket)
# req id: (prompt token ids, num_computed_tokens, num_prompt_logprobs or None, num_scheduled_tokens)
REQUESTS = {
    "req-a": ([10, 11, 12, 13], 0, 2, 4),
    "req-c": ([20, 21, 22], 0, None, 3),
    "req-b": ([30, 31, 32, 33, 34, 35, 36, 37], 3, 1, 5),  # last chunk of a chunked prefill
    # A middle chunk (positions 2-5 of 10): its 4 scheduled tokens all have a next prompt token, so
    # it needs all 4 hidden-state rows, where a last chunk needs one fewer.
    "req-d": ([40, 41, 42, 43, 44, 45, 46, 47, 48, 49], 2, 1, 4),
}

_gen = torch.Generator().manual_seed(0)
EMBED = torch.randn(VOCAB, HIDDEN, generator=_gen)
LM_HEAD = torch.randn(VOCAB, HIDDEN, generator=_gen)


class _Stop(Exception):
    """Raised at the first sampler call of sample_tokens, after the hidden states are collected."""


def _scheduled(rid: str) -> list[int]:
    prompt, computed, _, scheduled = REQUESTS[rid]
    return prompt[computed : computed + scheduled]


def _compute_logits(hidden_states: torch.Tensor) -> torch.Tensor:
    assert hidden_states.dim() == 2 and hidden_states.shape[-1] == HIDDEN, (
        f"compute_logits got prompt hidden states of shape {tuple(hidden_states.shape)}, not [n, {HIDDEN}]: "
        "the lm_head matmul raises in the worker and the engine dies"
    )
    # _get_prompt_logprobs_dict only asks for logits when num_logits > 0.
    assert hidden_states.shape[0] > 0, (
        "compute_logits got no prompt hidden states: the request's rows were sliced out of range, so "
        "gathering its prompt logprobs raises in the worker and the engine dies"
    )
    return hidden_states @ LM_HEAD.T


def _runner_class(trees: Trees, tensors_cls: Any) -> type[RunnerStandIn]:
    """The stand-in runner with the tree's real methods (loaded once: each load parses the whole runner file)."""
    path = trees.vllm_gaudi / RUNNER
    torch_ns = SimpleNamespace(**{n: getattr(torch, n) for n in dir(torch) if not n.startswith("__")})
    torch_ns.hpu = mock.MagicMock(name="torch.hpu")  # torch.hpu.synchronize()
    base = sample_tokens_globals(path, torch=torch_ns, LogprobsTensors=tensors_cls)
    return runner_class(path, ("sample_tokens", "_get_prompt_logprobs_dict", "_gather_prompt_logprobs_hpu"), base)


def _make_runner(runner_cls: type[RunnerStandIn], merged: bool, flat: bool) -> RunnerStandIn:
    order = list(REQUESTS)
    scheduler_output = SimpleNamespace(
        num_scheduled_tokens={rid: len(_scheduled(rid)) for rid in order},
        scheduled_spec_decode_tokens={},
        kv_connector_metadata=None,
    )
    runner = stand_in_runner(runner_cls, scheduler_output, order, merged_prefill=merged)
    runner.requests = {
        rid: SimpleNamespace(prompt_token_ids=list(prompt), num_computed_tokens=computed, output_token_ids=[])
        for rid, (prompt, computed, _, _) in REQUESTS.items()
    }
    runner.input_batch.num_prompt_logprobs = {rid: n for rid, (_, _, n, _) in REQUESTS.items() if n is not None}
    runner.input_batch.in_progress_prompt_logprobs_cpu = {}
    runner.model = SimpleNamespace(compute_logits=_compute_logits)
    runner.sampler = SimpleNamespace(compute_logprobs=lambda logits: logits.log_softmax(dim=-1, dtype=torch.float32))

    runner._get_prompts_and_decodes = lambda *args, **kwargs: SimpleNamespace(
        prompt_req_ids=list(order), decode_req_ids=[], prompt_scheduled_tokens=[len(_scheduled(r)) for r in order]
    )

    # One prefill batch with the four requests, laid out as _form_prefill_batch does: one padded row
    # per request and a padding row (bucket 5 x SEQ), or all requests back to back in one row (merged
    # prefill).
    rows = [_scheduled(rid) for rid in order]
    if merged:
        flat_tokens = [t for row in rows for t in row]
        token_ids = torch.tensor([flat_tokens + [-1] * (MERGED_LEN - len(flat_tokens))])
        ends = np.cumsum([len(r) for r in rows]) - 1
    else:
        token_ids = torch.tensor([r + [-1] * (SEQ - len(r)) for r in rows] + [[-1] * SEQ])
        ends = [i * SEQ + len(r) - 1 for i, r in enumerate(rows)]
    prefill = PrefillData(
        request_ids=[order],
        prompt_lens=[None],
        token_ids=[token_ids],
        position_ids=[None],
        attn_metadata=[None],
        logits_indices=[torch.tensor([int(e) for e in ends])],
        logits_requests=[order],
    )
    runner._prepare_inputs = lambda *args, **kwargs: ((prefill, None), (None, None))

    def execute_model_generic(
        token_ids: torch.Tensor,
        position_ids: Any,
        attn_metadata: Any,
        logits_indices: torch.Tensor,
        *args: Any,
        **kwargs: Any,
    ) -> tuple:
        # Model stand-in: a token's hidden state is its embedding (zeros for padding).
        hidden = torch.where((token_ids >= 0).unsqueeze(-1), EMBED[token_ids.clamp(min=0)], 0.0)
        sample_hidden = hidden.reshape(-1, HIDDEN)[logits_indices]
        if flat:  # flatten_input: the model sees input_ids.view(-1) and returns [tokens, H]
            hidden = hidden.reshape(-1, HIDDEN)
        return hidden, None, sample_hidden, sample_hidden @ LM_HEAD.T

    runner._execute_model_generic = execute_model_generic

    def run_sampling(*args: Any, **kwargs: Any) -> None:
        raise _Stop

    runner._run_sampling = run_sampling
    return runner


def _collected_hidden_states(runner: RunnerStandIn) -> dict[str, torch.Tensor]:
    try:
        runner.sample_tokens(None)
    except _Stop as stop:
        tb = stop.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_name == "sample_tokens":
                return tb.tb_frame.f_locals["prefill_hidden_states_for_logprobs"]
            tb = tb.tb_next
    raise RuntimeError("sample_tokens did not reach its prefill sampler call")


def _final_chunk(rid: str) -> bool:
    prompt, computed, _, scheduled = REQUESTS[rid]
    return computed + scheduled == len(prompt)


def _reference(rid: str) -> tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]:
    prompt, computed, num, scheduled = REQUESTS[rid]
    # A token has a prompt logprob when a prompt token follows it: all of a middle chunk's tokens,
    # all but the last of a final chunk's.
    num_logits = scheduled - 1 if _final_chunk(rid) else scheduled
    positions = list(range(computed, computed + num_logits))
    logprobs = (EMBED[[prompt[p] for p in positions]] @ LM_HEAD.T).log_softmax(dim=-1, dtype=torch.float32)
    targets = torch.tensor([prompt[p + 1] for p in positions])
    top_logprobs, top_ids = torch.topk(logprobs, num, dim=-1)
    target_logprobs = logprobs.gather(-1, targets.unsqueeze(-1))
    ids = torch.cat((targets.unsqueeze(-1), top_ids), dim=1).to(torch.int32)
    ranks = (logprobs >= target_logprobs).sum(-1).to(torch.int32)
    return slice(computed, computed + num_logits), ids, torch.cat((target_logprobs, top_logprobs), dim=1), ranks


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "needs the vllm-gaudi and vllm trees"
    tensors_cls = load_function(
        trees.vllm / OUTPUTS,
        "LogprobsTensors",
        {
            "NamedTuple": typing.NamedTuple,
            "torch": torch,
            "LogprobsLists": mock.MagicMock(name="LogprobsLists"),
        },
    )
    runner_cls = _runner_class(trees, tensors_cls)
    # Flat layout first: that is the qwen3_5_moe recipe.
    for merged, flat in ((False, True), (False, False), (True, True), (True, False)):
        layout = ("merged prefill, " if merged else "") + ("flat [tokens, H]" if flat else "3-D hidden states")
        runner = _make_runner(runner_cls, merged, flat)
        scheduler_output = runner.scheduler_output  # sample_tokens clears it
        try:
            collected = _collected_hidden_states(runner)
        except IndexError as exc:
            raise AssertionError(
                f"{layout}: sample_tokens fails collecting prompt-logprobs hidden states "
                f"(IndexError: {exc}); the engine dies"
            ) from exc
        try:
            result = runner._get_prompt_logprobs_dict(collected, scheduler_output)
        except AssertionError as exc:
            raise AssertionError(f"{layout}: {exc}") from exc
        except RuntimeError as exc:  # e.g. gathering targets for more rows than there are logits
            raise AssertionError(
                f"{layout}: computing prompt logprobs fails in the worker ({exc}); the engine dies"
            ) from exc
        with_logprobs = sorted(rid for rid, (_, _, n, _) in REQUESTS.items() if n is not None)
        expected = [rid for rid in with_logprobs if _final_chunk(rid)]
        assert sorted(result) == expected, f"{layout}: prompt logprobs returned for {sorted(result)}, not {expected}"
        # A middle chunk's prompt logprobs are returned with a later step; this step fills its rows.
        in_progress = runner.input_batch.in_progress_prompt_logprobs_cpu
        for rid in with_logprobs:
            chunk, ids, logprobs, ranks = _reference(rid)
            got = result[rid] if _final_chunk(rid) else in_progress[rid]
            same = (
                torch.equal(got.logprob_token_ids[chunk], ids)
                and torch.equal(got.selected_token_ranks[chunk], ranks)
                and torch.allclose(got.logprobs[chunk], logprobs)
            )
            assert same, (
                f"{layout}: prompt logprobs of {rid} are computed from other tokens' hidden states: ids "
                f"{got.logprob_token_ids[chunk].tolist()}, expected {ids.tolist()}"
            )
