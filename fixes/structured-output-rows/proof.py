"""structured-output-rows: the combined structured-output sampling call must get its requests in
the order of its logits rows.

Runs the tree's real ``HPUModelRunner.sample_tokens`` (with its real ``_run_sampling``,
``_prepare_sampling`` and ``_generate_req_id_output_token_ids_lst``, and
``_get_structured_output_request_order`` where the tree has it) for a step with two decodes and two
prompts and a grammar. The model, the input preparation and the sampler are stand-ins: each logits
row says which request it belongs to, ``make_selective_sampling_metadata`` builds one metadata row
per request id it is given, in that order, as the real one does, and the sampler compares the two.
sample_tokens then goes on until it copies the batch's request ids; by then the call's logprobs
rows must be recorded with the request ids of its logits rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fixes._support.runner import PrefillData, RunnerStandIn, runner_class, sample_tokens_globals, stand_in_runner
from fixpack.proofkit import Trees

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
REAL_METHODS = ("sample_tokens", "_run_sampling", "_prepare_sampling", "_generate_req_id_output_token_ids_lst")
REAL_IF_PRESENT = ("_get_structured_output_request_order",)

VOCAB = 16
HIDDEN = 4
DECODES = ["decode-0", "decode-1"]
PROMPTS = ["prompt-0", "prompt-1"]
TEMPERATURE = {"decode-0": 0.0, "decode-1": 0.3, "prompt-0": 0.7, "prompt-1": 1.0}
CODE = {rid: i + 1 for i, rid in enumerate(DECODES + PROMPTS)}  # the logits column that marks a request
PROMPT_LEN = 3


class _Stop(Exception):
    """Raised once sample_tokens has recorded the structured-output call's logprobs rows."""


LOGPROBS = SimpleNamespace(name="the structured-output call's logprobs tensors")


class _StopAtCopy(list):
    """The batch's req_ids: sample_tokens copies them after its sampling calls; the copy records
    the logprobs segments sample_tokens has built (its local ``logprobs_segments``) and stops it."""

    def __init__(self, items: list, call: dict[str, Any]) -> None:
        super().__init__(items)
        self.call = call

    def copy(self) -> list:
        self.call["logprobs_segments"] = sys._getframe(1).f_locals.get("logprobs_segments")
        raise _Stop


def _make_runner(path: Path) -> tuple[RunnerStandIn, list[dict[str, Any]]]:
    base = sample_tokens_globals(path, SamplingMetadata=type("SamplingMetadata", (), {}))
    text = path.read_text(encoding="utf-8")
    names = list(REAL_METHODS) + [n for n in REAL_IF_PRESENT if f"def {n}(" in text]
    calls: list[dict[str, Any]] = []
    order = DECODES + PROMPTS  # persistent batch after the decodes-first reorder

    scheduler_output = SimpleNamespace(
        num_scheduled_tokens={**{rid: 1 for rid in DECODES}, **{rid: PROMPT_LEN for rid in PROMPTS}},
        scheduled_spec_decode_tokens={},
        kv_connector_metadata=None,
        structured_output_request_ids=list(order),
    )
    runner = stand_in_runner(runner_class(path, names, base), scheduler_output, list(order))
    runner.requests = {rid: SimpleNamespace(output_token_ids=[], prompt_token_ids=[1, 2, 3]) for rid in order}

    def make_selective_sampling_metadata(
        req_id_output_token_ids: list, skip_copy: bool = False, **kwargs: Any
    ) -> SimpleNamespace:
        # Row r of the metadata is request req_id_output_token_ids[r] (req_indices in the real one).
        rows = [rid for rid, _ in req_id_output_token_ids]
        return SimpleNamespace(req_ids=rows, temperature=torch.tensor([TEMPERATURE[r] for r in rows]))

    runner.input_batch.num_prompt_logprobs = {}
    runner.input_batch.make_selective_sampling_metadata = make_selective_sampling_metadata

    runner._get_prompts_and_decodes = lambda *args, **kwargs: SimpleNamespace(
        prompt_req_ids=list(PROMPTS), decode_req_ids=list(DECODES), prompt_scheduled_tokens=[PROMPT_LEN] * 2
    )
    runner.apply_grammar_bitmask = lambda *args, **kwargs: None

    # One prefill batch per prompt, as for hybrid models; token ids carry the request's code.
    prefill = PrefillData()
    for rid in PROMPTS:
        prefill.request_ids.append([rid])
        prefill.prompt_lens.append(torch.tensor([PROMPT_LEN]))
        prefill.token_ids.append(torch.full((1, PROMPT_LEN), CODE[rid]))
        prefill.position_ids.append(torch.arange(PROMPT_LEN).unsqueeze(0))
        prefill.attn_metadata.append(None)
        prefill.logits_indices.append(torch.tensor([PROMPT_LEN - 1]))
        prefill.logits_requests.append([rid])
    # Decodes padded to a bucket of 4 rows; the padding rows carry token 0.
    decode = SimpleNamespace(
        num_decodes=len(DECODES),
        token_ids=torch.tensor([[CODE[r]] for r in DECODES] + [[0], [0]]),
        position_ids=None,
        attn_metadata=None,
        logits_indices=None,
        spec_decode_metadata=None,
    )
    runner._prepare_inputs = lambda *args, **kwargs: ((prefill, None), (decode, None))

    def execute_model_generic(
        token_ids: torch.Tensor, position_ids: Any, attn_metadata: Any, logits_indices: Any, *args: Any, **kwargs: Any
    ) -> tuple:
        # Model stand-in: one logits row per sequence, peaked at the request's code.
        codes = token_ids[:, -1]
        logits = torch.nn.functional.one_hot(codes.long(), VOCAB).float()
        hidden = torch.zeros(token_ids.shape[0], token_ids.shape[1], HIDDEN)
        return hidden, None, hidden[:, -1], logits

    runner._execute_model_generic = execute_model_generic

    def sampler(logits: torch.Tensor, sampling_metadata: SimpleNamespace) -> SimpleNamespace:
        owner = {code: rid for rid, code in CODE.items()}
        codes = logits.argmax(dim=-1)
        calls.append(
            {
                "logits_rows": [owner.get(int(c), "padding") for c in codes],
                "metadata_rows": list(sampling_metadata.req_ids),
                "temperature": sampling_metadata.temperature.tolist(),
            }
        )
        # sample_tokens goes on to record the call's logprobs rows with their request ids; it is
        # stopped where it next copies the batch's request ids, after that (_StopAtCopy).
        runner.input_batch.req_ids = _StopAtCopy(runner.input_batch.req_ids, calls[-1])
        return SimpleNamespace(sampled_token_ids=codes.view(-1, 1), logprobs_tensors=LOGPROBS)

    runner.sampler = sampler
    return runner, calls


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None, "needs the vllm-gaudi tree"
    runner, calls = _make_runner(trees.vllm_gaudi / RUNNER)
    grammar_output = SimpleNamespace(
        structured_output_request_ids=list(DECODES + PROMPTS), grammar_bitmask=np.zeros((4, 1), dtype=np.int32)
    )
    try:
        runner.sample_tokens(grammar_output)
    except _Stop:
        pass
    if len(calls) != 1:
        raise RuntimeError(f"expected one structured-output sampler call, saw {len(calls)}")
    call = calls[0]
    logits_rows, metadata_rows = call["logits_rows"], call["metadata_rows"]
    if len(logits_rows) != len(DECODES + PROMPTS):
        raise RuntimeError(f"unexpected logits rows {logits_rows}")
    wrong = [
        f"row {r}: logits of {lr} sampled with {mr}'s parameters (temperature {t:.2f} instead of {TEMPERATURE[lr]:.2f})"
        for r, (lr, mr, t) in enumerate(zip(logits_rows, metadata_rows, call["temperature"], strict=False))
        if lr != mr
    ]
    assert not wrong and len(metadata_rows) == len(logits_rows), (
        "structured-output step samples each row with another request's sampling metadata; logits rows "
        f"{logits_rows}, metadata rows {metadata_rows}: " + "; ".join(wrong)
    )
    # The call's logprobs rows are its logits rows: they are attributed to the same request ids.
    segments = call.get("logprobs_segments")
    if segments is None:
        raise RuntimeError("sample_tokens did not reach its copy of the batch's request ids")
    got = [(list(ids), lp) for ids, lp in segments if lp is LOGPROBS]
    assert got == [(logits_rows, LOGPROBS)], (
        f"structured-output step attributes its logprobs rows to {[ids for ids, _ in got]}, "
        f"its logits rows are {logits_rows}"
    )
