"""allowed-token-ids-reuse: a request must never get the allowed_token_ids mask of a row's former owner.

Runs on CPU the tree's real HPUModelRunner._update_states (hpu_model_runner.py) on the tree's real
InputBatch (hpu_input_batch.py: add_request, remove_request, condense and
make_selective_sampling_metadata), one scheduler step at a time, and feeds each sampling call's
SamplingMetadata to vLLM 0.26.0's real Sampler.apply_logits_processors(), which masks the logits
with allowed_token_ids_mask. The tokens left finite in a request's row are the tokens it may sample.

Every way a row is given to a request in _update_states is covered: a new request and a resumed
one appended behind the batch (onto rows condense() vacated in an earlier step), and a new request
put into the hole a finished request left in the same step (remove_request() cleared that row).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import torch

from fixes._support.input_batch import (
    VOCAB,
    SamplingParams,
    SamplingType,
    load_apply_logits_processors,
    load_input_batch,
    make_batch,
    sampleable,
)
from fixes._support.runner import runner_class
from fixpack.proofkit import Trees

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
EVERY_TOKEN = list(range(VOCAB))
PROMPT = [1, 2, 3, 4]


def _show(tokens: list[int]) -> str:
    return "every token" if tokens == EVERY_TOKEN else str(tokens)


class Engine:
    """A stand-in runner with the tree's real _update_states, driven one scheduler step at a time."""

    def __init__(self, ib: Any, runner_cls: type, apply: Any) -> None:
        self.apply = apply
        self.runner = runner_cls()
        self.runner.device = torch.device("cpu")
        self.runner.requests = {}
        self.runner.input_batch = make_batch(ib)
        self.runner.encoder_cache = {}
        self.runner._compact_gdn_group_ids = []
        self.runner.uses_mrope = False
        self.runner.use_async_scheduling = False
        self.allowed: dict[str, list[int] | None] = {}  # req_id -> its allowed_token_ids
        self.blocks = 0
        self.problems: list[str] = []

    @property
    def batch(self) -> Any:
        return self.runner.input_batch

    def step(
        self,
        new: dict[str, list[int] | None],
        running: list[str],
        finished: tuple[str, ...] = (),
        resumed: tuple[str, ...] = (),
    ) -> None:
        """One _update_states call: ``new`` requests (req_id -> allowed_token_ids) arrive, ``running``
        (decodes of 1 token) and ``resumed`` (preempted earlier, prefill again) are scheduled, and
        ``finished`` end. A request in the batch that is in none of them is unscheduled (preempted)."""
        new_reqs = []
        for rid, allowed in new.items():
            self.allowed[rid] = allowed
            self.blocks += 1
            params = SamplingParams(temperature=0.0, allowed_token_ids=allowed)
            new_reqs.append(
                SimpleNamespace(
                    req_id=rid,
                    prompt_token_ids=list(PROMPT),
                    mm_features=[],
                    sampling_params=params,
                    pooling_params=None,
                    block_ids=[[self.blocks]],
                    num_computed_tokens=0,
                    lora_request=None,
                )
            )
        cached = [*running, *resumed]
        computed = [len(self.runner.requests[rid].prompt_token_ids) for rid in running] + [0] * len(resumed)
        sched = SimpleNamespace(
            finished_req_ids=set(finished),
            free_encoder_mm_hashes=[],
            num_scheduled_tokens={
                **{rid: len(PROMPT) for rid in new},
                **{rid: 1 for rid in running},
                **{rid: len(PROMPT) for rid in resumed},
            },
            scheduled_new_reqs=new_reqs,
            scheduled_spec_decode_tokens={},
            scheduled_cached_reqs=SimpleNamespace(
                req_ids=cached,
                num_computed_tokens=computed,
                new_block_ids=[None] * len(running) + [[[self.blocks + 1 + i]] for i in range(len(resumed))],
                resumed_req_ids=set(resumed),
                num_output_tokens=[0] * len(cached),
                all_token_ids={},
            ),
        )
        self.blocks += len(resumed)
        self.runner._update_states(sched)

    def check(self, what: str, rows: list[str]) -> None:
        """The batch is ``rows``; each request can sample exactly its allowed_token_ids, in a call
        for the whole batch and in a call of its own (the runner samples per forward pass)."""
        assert self.batch.req_ids == rows, f"{what}: the batch is {self.batch.req_ids}, the scene needs {rows}"
        wrong = []
        for call in [rows, *([rid] for rid in rows)]:
            outputs = [(rid, self.runner.requests[rid].output_token_ids) for rid in call]
            for r, (rid, toks) in enumerate(zip(call, sampleable(self.batch, self.apply, outputs))):
                want = self.allowed[rid] or EVERY_TOKEN
                if toks != want:
                    wrong.append(
                        f"{rid} (row {r} of call {call}) can sample {_show(toks)}, its allowed_token_ids "
                        f"give {_show(want)}"
                    )
        if wrong:
            self.problems.append(f"{what} (batch {rows}): " + "; ".join(wrong))


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "needs the vllm-gaudi and vllm trees"
    ib = load_input_batch(trees)
    apply = load_apply_logits_processors(trees)
    runner_cls = runner_class(
        trees.vllm_gaudi / RUNNER,
        ["_update_states"],
        {
            "torch": torch,
            "SamplingType": SamplingType,
            "CachedRequestState": ib.CachedRequestState,
            "get_pp_group": lambda: SimpleNamespace(is_last_rank=True),
            "cast": cast,
        },
    )

    # Finished requests, condense(), then new requests behind the batch. A and B come first, before
    # the mask exists (it is allocated with the first request that has allowed_token_ids).
    eng = Engine(ib, runner_cls, apply)
    eng.step({"A": None, "B": None, "C": [3, 4], "E": [8]}, [])
    eng.check("four new requests", ["A", "B", "C", "E"])
    eng.step({}, ["C", "E"], finished=("A", "B"))
    # condense() moved E from row 3 to 0 and C from 2 to 1: rows 2 and 3 are free and still hold
    # C's and E's masks. D (no allowed_token_ids) takes row 2, G (its own) row 3.
    eng.check("A and B finished (condense)", ["E", "C"])
    eng.step({"D": None, "G": [9]}, ["E", "C"])
    eng.check("D and G added behind the condensed batch", ["E", "C", "D", "G"])
    # The same step that frees a row fills it: remove_request() cleared C's row, H takes it.
    eng.step({"H": None}, ["E", "D", "G"], finished=("C",))
    eng.check("C finished and H took its row", ["E", "H", "D", "G"])

    problems = eng.problems

    # A preempted request, condense(), and the request resumed behind the batch.
    eng = Engine(ib, runner_cls, apply)
    eng.step({"P": None, "Q": None, "R": [5, 6]}, [])
    eng.step({}, ["Q", "R"])  # P is not scheduled: removed from the batch; R moves to row 0
    eng.check("P preempted (condense)", ["R", "Q"])
    eng.step({}, ["R", "Q"], resumed=("P",))  # P comes back to row 2, which held R's mask
    eng.check("P resumed behind the condensed batch", ["R", "Q", "P"])
    problems += eng.problems

    assert not problems, (
        "a request took a row of allowed_token_ids_mask_cpu_tensor that still held the mask of "
        "the request that had the row before (condense() copies a moved request's row and leaves "
        "the old one as it was):\n  " + "\n  ".join(problems)
    )
