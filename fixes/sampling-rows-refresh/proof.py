"""sampling-rows-refresh: device sampling rows must follow InputBatch.swap_states().

Runs the tree's real InputBatch (hpu_input_batch.py) on CPU: add_request, refresh_sampling_metadata,
swap_states and make_selective_sampling_metadata, with vLLM 0.26.0's real SamplingMetadata and
vllm_gaudi.utils' real async_h2d_copy/async_h2d_update (device="cpu").

P is a chunked prompt and Q a decode; HPUModelRunner._ensure_decodes_first() swaps them with
swap_states(0, 1) to put the decode first. Case 1: a step with no added or removed request, so the
runner passes skip_copy=True. Case 2: a step that did add requests (skip_copy=False): only the rows
sampled in that call are copied, and the next step (skip_copy=True) samples the other one.
Case 3: the full copy the fix adds is made once per reorder, not on every sampling call, and a
second reorder after it is copied again. Case 4: a new batch samples without a full copy.
"""

from __future__ import annotations

import types
from typing import Any

from fixes._support.input_batch import VOCAB, SamplingParams, load_input_batch, make_batch, make_request
from fixpack.proofkit import Trees

P_PARAMS = dict(temperature=0.25, top_p=0.5, top_k=3, frequency_penalty=0.5)
Q_PARAMS = dict(temperature=1.75, top_p=0.875, top_k=5, presence_penalty=0.25)
P_PROMPT = [1, 2, 3, 4, 5, 6]
Q_PROMPT = [9, 8, 7]


def _expect(md: Any, row: int, req_id: str, params: dict[str, float], prompt: list[int], what: str) -> None:
    got = {
        "temperature": float(md.temperature[row]),
        "top_p": float(md.top_p[row]),
        "top_k": int(md.top_k[row]),
        "frequency_penalty": float(md.frequency_penalties[row]),
        "presence_penalty": float(md.presence_penalties[row]),
    }
    want = {
        "temperature": params["temperature"],
        "top_p": params["top_p"],
        "top_k": params["top_k"],
        "frequency_penalty": params.get("frequency_penalty", 0.0),
        "presence_penalty": params.get("presence_penalty", 0.0),
    }
    assert got == want, f"{what}: row {row} ({req_id}) is sampled with {got}, its own parameters are {want}"
    ids = [t for t in md.prompt_token_ids[row].tolist() if t != VOCAB]
    assert ids == prompt, f"{what}: row {row} ({req_id}) gets penalty prompt tokens {ids}, its prompt is {prompt}"


def _setup(ib: types.ModuleType) -> tuple[Any, dict[str, Any]]:
    batch = make_batch(ib)
    reqs = {
        "P": make_request(ib, "P", SamplingParams(**P_PARAMS), P_PROMPT, num_computed=2),
        "Q": make_request(ib, "Q", SamplingParams(**Q_PARAMS), Q_PROMPT, [11], num_computed=3),
    }
    batch.add_request(reqs["P"])
    batch.add_request(reqs["Q"])
    # _update_states() after adding them: full CPU -> device copy.
    batch.refresh_sampling_metadata()
    return batch, reqs


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)

    # Case 1: no request added or removed this step.
    batch, reqs = _setup(ib)
    # Any earlier sampling call (decode or prefill) of the previous step.
    batch.make_selective_sampling_metadata([("P", reqs["P"].output_token_ids)], skip_copy=True)
    batch.swap_states(0, 1)  # _ensure_decodes_first(): [P, Q] -> [Q, P]
    assert batch.req_ids == ["Q", "P"]
    md = batch.make_selective_sampling_metadata([("Q", reqs["Q"].output_token_ids)], skip_copy=True)
    _expect(md, 0, "Q", Q_PARAMS, Q_PROMPT, "decode call after the reorder (batch unchanged, skip_copy=True)")
    md = batch.make_selective_sampling_metadata([("P", reqs["P"].output_token_ids)], skip_copy=True)
    _expect(md, 0, "P", P_PARAMS, P_PROMPT, "prefill call after the reorder (batch unchanged, skip_copy=True)")

    # Case 2: the batch changed this step, rows were swapped after the full copy.
    batch, reqs = _setup(ib)
    batch.swap_states(0, 1)
    md = batch.make_selective_sampling_metadata([("Q", reqs["Q"].output_token_ids)], skip_copy=False)
    _expect(md, 0, "Q", Q_PARAMS, Q_PROMPT, "decode call in the step that reordered (skip_copy=False)")
    md = batch.make_selective_sampling_metadata([("P", reqs["P"].output_token_ids)], skip_copy=True)
    _expect(md, 0, "P", P_PARAMS, P_PROMPT, "next step, row not sampled in the reordering step (skip_copy=True)")

    # Case 3: a full copy is made only when rows were swapped since the last one (the device rows
    # are otherwise up to date, and a full copy every sampling call is a host-to-device copy of
    # every row each step), and a second swap after that copy is refreshed again.
    batch, reqs = _setup(ib)
    refreshes = _count_refreshes(batch)
    batch.make_selective_sampling_metadata([("P", reqs["P"].output_token_ids)], skip_copy=True)
    assert refreshes == [], "a sampling call with no swap since the last full copy made another full copy"
    batch.swap_states(0, 1)
    batch.make_selective_sampling_metadata([("Q", reqs["Q"].output_token_ids)], skip_copy=True)
    md = batch.make_selective_sampling_metadata([("P", reqs["P"].output_token_ids)], skip_copy=True)
    _expect(md, 0, "P", P_PARAMS, P_PROMPT, "second call after one reorder (skip_copy=True)")
    assert len(refreshes) == 1, f"one reorder, two sampling calls: {len(refreshes)} full copies, expected 1"
    batch.swap_states(0, 1)  # a second reorder, after the refresh: [Q, P] -> [P, Q]
    md = batch.make_selective_sampling_metadata([("Q", reqs["Q"].output_token_ids)], skip_copy=True)
    _expect(md, 0, "Q", Q_PARAMS, Q_PROMPT, "decode call after a second reorder (skip_copy=True)")
    assert len(refreshes) == 2, f"two reorders: {len(refreshes)} full copies, expected 2"

    # Case 4: a batch as its constructor leaves it (no swap, no refresh yet) samples without a copy.
    batch = make_batch(ib)
    refreshes = _count_refreshes(batch)
    batch.make_selective_sampling_metadata([], skip_copy=True)
    assert refreshes == [], "a new batch, never reordered, made a full copy on its first sampling call"


def _count_refreshes(batch: Any) -> list[None]:
    """Record each full CPU -> device copy (refresh_sampling_metadata) the batch makes from now on."""
    calls: list[None] = []
    refresh = batch.refresh_sampling_metadata

    def counted() -> None:
        calls.append(None)
        refresh()

    batch.refresh_sampling_metadata = counted
    return calls
