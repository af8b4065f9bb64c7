"""bad-words-index: bad_words must be keyed by the row of the sampling call.

Runs on CPU the tree's real InputBatch (hpu_input_batch.py: add_request and
make_selective_sampling_metadata) and feeds its SamplingMetadata to vLLM 0.26.0's real
Sampler.apply_logits_processors() and apply_bad_words(), as the HPU runner's per-call sampler does.
The runner samples each forward pass separately, so a call has only the rows of its own requests.
"""

from __future__ import annotations

from typing import Any

import torch

from fixes._support.input_batch import (
    VOCAB,
    SamplingParams,
    load_apply_logits_processors,
    load_input_batch,
    make_batch,
    make_request,
)
from fixpack.proofkit import Trees


def _sample(batch: Any, apply: Any, reqs: dict[str, Any], rows: list[str]) -> torch.Tensor:
    md = batch.make_selective_sampling_metadata([(rid, reqs[rid].output_token_ids) for rid in rows], skip_copy=False)
    logits = torch.zeros((len(rows), VOCAB))
    try:
        return apply(logits, md, False)
    except IndexError as exc:
        raise AssertionError(
            f"sampling call with rows {rows}: bad_words raises IndexError ({exc}); "
            f"bad_words_token_ids passed to the sampler: {md.bad_words_token_ids}"
        ) from exc


def _banned(logits: torch.Tensor, rows: list[str]) -> dict[str, list[int]]:
    return {rid: torch.nonzero(torch.isinf(logits[r])).flatten().tolist() for r, rid in enumerate(rows)}


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)
    apply = load_apply_logits_processors(trees)
    batch = make_batch(ib)
    greedy = dict(temperature=0.0)
    reqs = {
        "R0": make_request(
            ib, "R0", SamplingParams(**greedy, bad_words_token_ids=[[7]]), [1, 2, 3], [4], num_computed=3
        ),
        "R1": make_request(ib, "R1", SamplingParams(**greedy), [1, 2, 3], [4], num_computed=3),
        "R2": make_request(ib, "R2", SamplingParams(**greedy, bad_words_token_ids=[[5], [9, 6]]), [5, 6, 7]),
    }
    for rid in ("R0", "R1", "R2"):
        batch.add_request(reqs[rid])
    want = {"R0": [7], "R1": [], "R2": [5]}

    # The prefill of the new request R2 (index 2) is sampled on its own: one row.
    rows = ["R2"]
    got = _banned(_sample(batch, apply, reqs, rows), rows)
    assert got == {r: want[r] for r in rows}, f"call {rows}: banned tokens {got}, expected {want}"

    # A call for R1 alone (index 1) must not get R0's bad words.
    rows = ["R1"]
    got = _banned(_sample(batch, apply, reqs, rows), rows)
    assert got == {r: want[r] for r in rows}, f"call {rows}: banned tokens {got}, expected R1 to have none"

    # The decode call, padded to a bucket of 4 rows with copies of the first request.
    rows = ["R1", "R0", "R2", "R1"]
    got = _banned(_sample(batch, apply, reqs, rows), rows[:3])
    assert got == {r: want[r] for r in rows[:3]}, f"call {rows}: banned tokens {got}, expected {want}"
