"""logitsprocs-rows: logit_bias, min_tokens and min_p must reach the rows they belong to.

Runs on CPU the tree's real InputBatch (hpu_input_batch.py: add_request, remove_request,
make_selective_sampling_metadata) with vLLM 0.26.0's real builtin logits processors
(MinTokensLogitsProcessor, LogitBiasLogitsProcessor, MinPLogitsProcessor, built on CPU as
build_logitsprocs() builds them), and feeds each call's SamplingMetadata to vLLM's real
Sampler.apply_logits_processors() and Sampler.sample(). Only the final top-k/top-p draw is a
stand-in: it records the logits it is given (the processed logits) and returns their argmax.

The HPU runner samples each forward pass separately: a call has only the rows of its requests, in
call order, padded with repeats of its first request.
A finished request's sampling parameters must be freed with it (the batch keeps nothing of it).
Beside the builtin processors runs a custom one (as --logits-processors adds) that keeps the rows
the BatchUpdates lay out and holds them to what vLLM's interface promises a processor.
"""

from __future__ import annotations

import ast
import functools
import gc
import math
import sys
import weakref
from types import SimpleNamespace
from typing import Any

import torch

from fixes._support.input_batch import VOCAB, SamplingParams, exec_file, load_input_batch, make_batch, make_request
from fixpack.proofkit import Trees, load_function, load_source, parse_file

NEG = -math.inf
BASE = [2.0, 1.5] + [0.0] * (VOCAB - 2)
EOS = 7


def load_sampler(trees: Trees) -> SimpleNamespace:
    """vLLM's real Sampler.apply_logits_processors() and Sampler.sample(), on a stand-in self."""
    assert trees.vllm is not None
    vllm = trees.vllm / "vllm"
    path = vllm / "v1/sample/sampler.py"
    eps = next(
        ast.literal_eval(node.value)
        for node in parse_file(path).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_SAMPLING_EPS"
    )
    bad_words = exec_file("vllm.v1.sample.ops.bad_words", vllm / "v1/sample/ops/bad_words.py")
    ns = {
        "torch": torch,
        "_SAMPLING_EPS": eps,
        "LogprobsMode": str,
        "apply_bad_words": bad_words.apply_bad_words,
        "SamplingMetadata": sys.modules["vllm.v1.sample.metadata"].SamplingMetadata,
    }
    seen: list[torch.Tensor] = []

    def topk_topp_sampler(logits: torch.Tensor, generators: Any, top_k: Any, top_p: Any) -> tuple[Any, None]:
        seen.append(logits.clone())
        return logits.argmax(dim=-1).view(-1), None

    self = SimpleNamespace(
        logprobs_mode="raw_logprobs",
        seen=seen,
        topk_topp_sampler=topk_topp_sampler,
        greedy_sample=load_function(path, "Sampler.greedy_sample", ns),
        apply_temperature=load_function(path, "Sampler.apply_temperature", ns),
        apply_penalties=lambda logits, metadata, output_token_ids: logits,
    )
    assert "def sample(" in load_source(path, "Sampler.sample")
    self.apply_logits_processors = functools.partial(load_function(path, "Sampler.apply_logits_processors", ns), self)
    self.sample = functools.partial(load_function(path, "Sampler.sample", ns), self)
    return self


def build_logitsprocs() -> Any:
    """What build_logitsprocs() builds without spec decode (BUILTIN_LOGITS_PROCESSORS), and a custom one."""
    lp = sys.modules["vllm.v1.sample.logits_processor"]
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=8))
    builtin = (lp.MinTokensLogitsProcessor, lp.LogitBiasLogitsProcessor, lp.MinPLogitsProcessor)
    return lp.LogitsProcessors([*(cls(config, torch.device("cpu"), False) for cls in builtin), LayoutRecorder()])


class LayoutRecorder:
    """A custom logits processor: the rows as its BatchUpdates lay them out, held to vLLM's contract.

    What a processor may rely on (vllm/v1/sample/logits_processor/interface.py and state.py):
    ``removed`` names rows of removed requests, in descending order (BatchUpdateBuilder.removed
    guarantees it, so that a processor can delete them from a list one by one); updates apply in
    the order removed, added, moved; an added row lies within batch_size. A processor that counts
    its requests miscounts on a removed row that held none, and one that deletes removed rows from
    a list deletes the wrong ones when they come in ascending order.
    """

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Any, list[int]]] = {}
        self.last_update: Any = "no update yet"  # only the last: the proof checks that finished requests are freed

    def is_argmax_invariant(self) -> bool:
        return True

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def update_state(self, batch_update: Any) -> None:
        self.last_update = batch_update
        if batch_update is None:
            return
        removed = list(batch_update.removed)
        assert removed == sorted(removed, reverse=True), (
            f"BatchUpdate.removed {removed} is not in descending order, as BatchUpdateBuilder gives it"
        )
        for index in removed:
            assert index in self.rows, (
                f"BatchUpdate.removed names row {index}, which holds no request (rows {sorted(self.rows)})"
            )
            del self.rows[index]
        for index, params, _, output_token_ids in batch_update.added:
            assert 0 <= index < batch_update.batch_size, f"row {index} added, batch_size {batch_update.batch_size}"
            self.rows[index] = (params, output_token_ids)
        for a, b, direction in batch_update.moved:
            entry_a, entry_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if entry_a is not None:
                self.rows[b] = entry_a
            if entry_b is not None and direction.name == "SWAP":
                self.rows[a] = entry_b


def _row(bias: dict[int, float] | None = None, banned: tuple[int, ...] = ()) -> list[float]:
    row = list(BASE)
    for tok, b in (bias or {}).items():
        row[tok] += b
    for tok in banned:
        row[tok] = NEG
    return row


EXPECTED = {
    "N": _row(),
    "B": _row(bias={5: 100.0}),
    "T": _row(banned=(EOS,)),
    "M": _row(banned=tuple(range(2, VOCAB))),  # min_p=0.5: only tokens 0 and 1 are within half of the top
}


def _sample(sampler: SimpleNamespace, batch: Any, reqs: dict[str, Any], rows: list[str]) -> list[list[float]]:
    md = batch.make_selective_sampling_metadata([(rid, reqs[rid].output_token_ids) for rid in rows], skip_copy=False)
    logits = torch.tensor([BASE] * len(rows))
    logits = sampler.apply_logits_processors(logits, md, False)
    sampler.seen.clear()
    sampler.sample(logits, md)
    processed = sampler.seen[0] if sampler.seen else logits
    return processed.tolist()


def _check(
    sampler: SimpleNamespace,
    batch: Any,
    reqs: dict[str, Any],
    rows: list[str],
    expect: dict[str, list[float]],
    what: str,
) -> None:
    got = _sample(sampler, batch, reqs, rows)
    for r, rid in enumerate(rows):
        # A padding row (a repeat of a request) gets no processor state: its sample is thrown away,
        # and a state left there from the call before would be a finished request's.
        padding = rows.index(rid) != r
        want = _row() if padding else expect[rid]
        if got[r] != want:
            diff = {t: (got[r][t], want[t]) for t in range(VOCAB) if got[r][t] != want[t]}
            raise AssertionError(
                f"{what}: call rows {rows}, row {r} ({rid}{', padding' if padding else ''}): "
                f"token: (got, expected) {diff}"
            )
    # The custom processor holds each request's own params and output list (the list it reads the
    # latest tokens from) in the request's first row, and nothing in padding rows or beyond.
    recorder = next((p for p in batch.logitsprocs.all if isinstance(p, LayoutRecorder)), None)
    if recorder is not None:
        want_rows = {
            r: (reqs[rid].sampling_params, reqs[rid].output_token_ids)
            for r, rid in enumerate(rows)
            if rows.index(rid) == r
        }
        got_rows = recorder.rows
        same = got_rows.keys() == want_rows.keys() and all(
            got_rows[r][0] is want_rows[r][0] and got_rows[r][1] is want_rows[r][1] for r in want_rows
        )
        assert same, (
            f"{what}: call rows {rows}: the custom processor holds requests in rows {sorted(got_rows)}, "
            f"expected {sorted(want_rows)} (or another request's state in one of them)"
        )


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)
    sampler = load_sampler(trees)
    batch = make_batch(ib, logitsprocs=build_logitsprocs())
    reqs = {
        "N": make_request(ib, "N", SamplingParams(temperature=0.0), [1, 2, 3], [4], num_computed=3),
        "B": make_request(ib, "B", SamplingParams(temperature=0.0, logit_bias={5: 100.0}), [1, 2, 3]),
        "T": make_request(ib, "T", SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=(EOS,)), [1, 2, 3]),
        "M": make_request(ib, "M", SamplingParams(temperature=1.0, min_p=0.5), [1, 2, 3]),
    }
    for rid in ("N", "B", "T", "M"):
        batch.add_request(reqs[rid])
    batch.refresh_sampling_metadata()

    _check(sampler, batch, reqs, ["B"], EXPECTED, "logit_bias, prefill call of B alone")
    _check(sampler, batch, reqs, ["T"], EXPECTED, "min_tokens, prefill call of T alone")
    _check(sampler, batch, reqs, ["M"], EXPECTED, "min_p, prefill call of M alone")
    # The decode call of all four, padded to a bucket of 6.
    _check(sampler, batch, reqs, ["N", "B", "T", "M", "N", "N"], EXPECTED, "decode call")
    # The next decode step: the same requests in the same rows, each one token longer. The batch
    # makeup did not change, so the processors get update_state(None) (interface.py: non-None iff
    # it changed), as upstream gives it them each step; re-adding the rows would rebuild every
    # processor's state on every call.
    for rid in ("N", "B", "T", "M"):
        reqs[rid].output_token_ids.append(9)
    _check(sampler, batch, reqs, ["N", "B", "T", "M", "N", "N"], EXPECTED, "the next decode step")
    recorder = next(p for p in batch.logitsprocs.all if isinstance(p, LayoutRecorder))
    assert recorder.last_update is None, (
        f"a decode step with the same rows as the step before gave the processors {recorder.last_update}, not None"
    )
    _check(sampler, batch, reqs, ["M", "T"], EXPECTED, "call with another row order")
    _check(sampler, batch, reqs, ["M", "T", "M"], EXPECTED, "same requests, padded to one more row")
    _check(sampler, batch, reqs, ["M", "M"], EXPECTED, "M alone, padded over the row T had")
    # T reaches min_tokens: EOS is allowed again.
    reqs["T"].output_token_ids.extend([8, 9, 10])
    _check(sampler, batch, reqs, ["T", "B"], {**EXPECTED, "T": _row()}, "min_tokens reached")
    # B finishes; a new request takes its index.
    batch.remove_request("B")
    reqs["C"] = make_request(ib, "C", SamplingParams(temperature=0.0), [1, 2])
    batch.add_request(reqs["C"], 1)
    _check(sampler, batch, reqs, ["C", "N", "M"], {**EXPECTED, "C": _row()}, "after B was replaced by C")
    # N is aborted and resubmitted under the same id, now with a logit_bias.
    index = batch.remove_request("N")
    reqs["N"] = make_request(ib, "N", SamplingParams(temperature=0.0, logit_bias={3: 50.0}), [1, 2, 3])
    batch.add_request(reqs["N"], index)
    _check(
        sampler,
        batch,
        reqs,
        ["C", "N", "M"],
        {**EXPECTED, "C": _row(), "N": _row(bias={3: 50.0})},
        "after N was resubmitted with a logit_bias",
    )
    # A model without logits processors: nothing is laid out, the calls sample as they are.
    plain = make_batch(ib)
    plain_reqs = {"P": make_request(ib, "P", SamplingParams(temperature=0.0), [1, 2, 3])}
    plain.add_request(plain_reqs["P"])
    plain.refresh_sampling_metadata()
    _check(sampler, plain, plain_reqs, ["P", "P"], {"P": _row()}, "a batch without logits processors")
    # A pooling model's request: HPUModelRunner.__init__ builds its InputBatch without
    # is_pooling_model, so remove_request() runs to the end for it too. It has no sampling params
    # and nothing was kept for it; removing it must not fail.
    pooled = ib.CachedRequestState(
        req_id="E",
        prompt_token_ids=[1, 2, 3],
        mm_features=[],
        sampling_params=None,
        generator=None,
        block_ids=[[1]],
        num_computed_tokens=0,
        output_token_ids=[],
        pooling_params=SimpleNamespace(requires_token_ids=False),
    )
    plain.add_request(pooled)
    plain.remove_request("E")
    # B finished two calls ago: the batch keeps nothing of it (a long-running server adds and
    # removes requests for ever), so its sampling parameters are freed with the request.
    finished = weakref.ref(reqs.pop("B").sampling_params)
    gc.collect()
    assert finished() is None, (
        "the batch still holds the sampling parameters of finished request B: every finished request's "
        "parameters and prompt stay in memory"
    )
