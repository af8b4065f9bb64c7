"""allowed-token-ids-swap: swap_states() must move each request's allowed_token_ids mask row with it.

Runs on CPU the tree's real InputBatch (hpu_input_batch.py: add_request, swap_states and
make_selective_sampling_metadata), the runner's real reorders that call swap_states()
(HPUModelRunner._ensure_decodes_first with _is_prompt and is_decoder_only, and the module-level
ensure_multi_token_decodes_last, from hpu_model_runner.py), and feeds each sampling call's
SamplingMetadata to vLLM 0.26.0's real Sampler.apply_logits_processors(), which masks the logits
with allowed_token_ids_mask. The tokens left finite in a request's row are the tokens it may sample.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from fixes._support.input_batch import (
    VOCAB,
    SamplingParams,
    load_apply_logits_processors,
    load_input_batch,
    make_batch,
    make_request,
    sampleable,
)
from fixpack.proofkit import Trees, load_function

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
EVERY_TOKEN = list(range(VOCAB))


def load_runner(trees: Trees, batch: Any) -> Any:
    """A stand-in runner with the tree's real _ensure_decodes_first, _is_prompt and is_decoder_only."""
    assert trees.vllm_gaudi is not None
    path = trees.vllm_gaudi / RUNNER
    runner = SimpleNamespace(input_batch=batch)
    for name in ("_ensure_decodes_first", "_is_prompt", "is_decoder_only"):
        setattr(runner, name, functools.partial(load_function(path, f"HPUModelRunner.{name}"), runner))
    return runner


def _add(ib: Any, batch: Any, scene: dict[str, tuple[list[int] | None, int, int]]) -> dict[str, Any]:
    """Add the scene's requests in order: req_id -> (allowed_token_ids, prompt length, computed)."""
    reqs = {}
    for rid, (allowed, prompt_len, computed) in scene.items():
        output = [1] if computed >= prompt_len else []
        params = SamplingParams(temperature=0.0, allowed_token_ids=allowed)
        reqs[rid] = make_request(ib, rid, params, list(range(1, prompt_len + 1)), output, num_computed=computed)
        batch.add_request(reqs[rid])
    return reqs


def _allowed(batch: Any, apply: Any, reqs: dict[str, Any], rows: list[str]) -> dict[str, list[int]]:
    """The tokens each request of one sampling call can still sample after the logits processors."""
    return dict(zip(rows, sampleable(batch, apply, [(rid, reqs[rid].output_token_ids) for rid in rows])))


def _check_calls(
    batch: Any, apply: Any, reqs: dict[str, Any], calls: list[list[str]], want: dict[str, list[int]], what: str
) -> None:
    wrong = {}
    for rows in calls:
        for rid, toks in _allowed(batch, apply, reqs, rows).items():
            if toks != want[rid]:
                wrong[f"{rid} in call {rows}"] = f"can sample {toks}, its allowed_token_ids give {want[rid]}"
    assert not wrong, (
        f"after {what} (batch {batch.req_ids}): {wrong}. swap_states() moved the requests but "
        f"not their rows of allowed_token_ids_mask_cpu_tensor"
    )


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None
    ib = load_input_batch(trees)
    apply = load_apply_logits_processors(trees)

    # _ensure_decodes_first(): two new prompts took the low indices (holes finished requests left),
    # two running decodes sit behind them. P1 and D2 have allowed_token_ids, P2 and D1 have not, so
    # one swap pairs two restricted rows and the other a restricted row with a free one.
    batch = make_batch(ib)
    reqs = _add(ib, batch, {"P1": ([7, 8], 6, 0), "P2": ([9], 6, 0), "D1": (None, 4, 4), "D2": ([3, 4], 4, 4)})
    runner = load_runner(trees, batch)
    runner._ensure_decodes_first(
        SimpleNamespace(num_scheduled_tokens={"P1": 6, "P2": 6, "D1": 1, "D2": 1}, scheduled_spec_decode_tokens={})
    )
    assert batch.req_ids[:2] == ["D2", "D1"], f"_ensure_decodes_first left {batch.req_ids}: no decodes first"
    want = {"P1": [7, 8], "P2": [9], "D1": EVERY_TOKEN, "D2": [3, 4]}
    # As the runner samples: one call for the decodes, then one per prefill forward pass.
    _check_calls(batch, apply, reqs, [["D2", "D1"], ["P2"], ["P1"]], want, "_ensure_decodes_first()")

    # ensure_multi_token_decodes_last(): M, a decode with 3 tokens scheduled (a catch-up decode),
    # has allowed_token_ids; the 1-token decode S behind it is moved to the front.
    ensure_last = load_function(
        trees.vllm_gaudi / RUNNER, "ensure_multi_token_decodes_last", {"InputBatch": ib.InputBatch, "Mapping": Mapping}
    )
    batch = make_batch(ib)
    reqs = _add(ib, batch, {"M": ([5, 6], 4, 4), "S": (None, 4, 4)})
    ensure_last(batch, {"M": 3, "S": 1})
    assert batch.req_ids == ["S", "M"], f"ensure_multi_token_decodes_last left {batch.req_ids}"
    want = {"M": [5, 6], "S": EVERY_TOKEN}
    _check_calls(batch, apply, reqs, [["S"], ["M"], ["S", "M"]], want, "ensure_multi_token_decodes_last()")
