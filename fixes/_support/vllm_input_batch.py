"""CPU harness for proofs that run vLLM's own ``vllm/v1/worker/gpu_input_batch.py`` under the runner.

``load_runner(trees)`` gives a runner class with the tree's real ``GPUModelRunner._update_states``
and ``_may_reorder_batch`` (the methods vLLM's CPUModelRunner inherits), on the tree's real
``InputBatch`` and with the real ``reorder_batch_to_split_decodes_and_prefills``; vLLM 0.26.0's
logits_processor state, SamplingMetadata and small utilities are the real sources, the block table
is a stand-in (``BlockTable``) and every other global the methods read is a MagicMock.
``load(trees)`` gives that class and vLLM's real ``Sampler.apply_logits_processors`` (from
``fixes._support.input_batch``), loaded in the order they need. ``Engine`` drives such a runner
one scheduler step at a time (new, running, resumed and finished requests, each new one with its
allowed_token_ids) and checks, after a step, that each request can sample exactly its allowed
tokens; a proof asserts on ``Engine.problems`` with its own message.

Used by the proofs of input-batch-condense-mask and input-batch-swap-mask. Proofs import it as
``fixes._support.vllm_input_batch`` (the cookbook root is on ``sys.path``). vllm-gaudi's own
InputBatch copy has its harness in ``fixes._support.input_batch``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any, TypeVar, cast

import numpy as np
import torch

from fixes._support.input_batch import SamplingParams as GaudiSamplingParams
from fixes._support.input_batch import SamplingType, exec_file, load_apply_logits_processors
from fixes._support.runner import RunnerStandIn, load_mocked
from fixpack.proofkit import Trees, load_function, stub_modules

BATCH = "vllm/v1/worker/gpu_input_batch.py"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
VOCAB = 32  # the vocab size of the batch; small, so that a row's sampleable tokens read as a short list
EVERY_TOKEN = list(range(VOCAB))  # what a request without allowed_token_ids may sample
PROMPT = [1, 2, 3, 4]  # every request's prompt: its length is what the scheduler schedules for a prefill

# vLLM's Sampler.apply_logits_processors(logits, sampling_metadata, predict_bonus_token), bound to a
# stand-in sampler (see fixes._support.input_batch.load_apply_logits_processors).
ApplyLogitsProcessors = Callable[[torch.Tensor, Any, bool], torch.Tensor]


class SamplingParams(GaudiSamplingParams):
    """Stand-in for vllm.SamplingParams: the attributes vLLM's InputBatch and the runner read."""

    def __init__(self, allowed_token_ids: list[int] | None) -> None:
        # Greedy, so that allowed_token_ids is the only thing that restricts what a row can sample.
        super().__init__(temperature=0.0, allowed_token_ids=allowed_token_ids)
        # vLLM's add_request() reads it; the Gaudi stand-in this builds on has no such attribute.
        self.logprob_token_ids = None


class BlockTable:
    """Stand-in for vLLM's MultiGroupBlockTable (one KV cache group): not what these fixes are about."""

    def __init__(self, max_num_reqs: int, **_: Any) -> None:
        self.rows: list[list[int]] = [[] for _ in range(max_num_reqs)]

    def add_row(self, block_ids: tuple[list[int], ...], row: int) -> None:
        self.rows[row] = list(block_ids[0])

    def append_row(self, block_ids: tuple[list[int], ...], row: int) -> None:
        self.rows[row] += block_ids[0]

    def clear_row(self, row: int) -> None:
        self.rows[row] = []

    def move_row(self, src: int, tgt: int) -> None:
        self.rows[tgt] = list(self.rows[src])

    def swap_row(self, src: int, tgt: int) -> None:
        self.rows[src], self.rows[tgt] = self.rows[tgt], self.rows[src]


def load_runner(trees: Trees) -> type[RunnerStandIn]:
    """A stand-in runner class with the tree's real GPUModelRunner._update_states and
    _may_reorder_batch, on the tree's real InputBatch (``runner.make_batch()``).

    ``load`` calls it before ``load_apply_logits_processors``, which reads the SamplingMetadata
    module this one puts in ``sys.modules``.
    """
    assert trees.vllm is not None, "needs the vllm tree"
    vllm = trees.vllm / "vllm"
    lp = "vllm.v1.sample.logits_processor"
    # Empty packages in sys.modules, so that the real submodules below import each other without
    # running the packages' __init__ (which imports the whole of vLLM).
    for stub in stub_modules(lp, "vllm.v1.sample.thinking_budget_state").values():
        stub.__path__ = []
        stub.__spec__ = None
    interface = exec_file(f"{lp}.interface", vllm / "v1/sample/logits_processor/interface.py")
    state = exec_file(f"{lp}.state", vllm / "v1/sample/logits_processor/state.py")
    sys.modules[lp].LogitsProcessors = state.LogitsProcessors
    metadata = exec_file("vllm.v1.sample.metadata", vllm / "v1/sample/metadata.py")
    # The globals InputBatch and the two runner methods use for what these proofs check: the real
    # functions where they move rows or build the sampling metadata, stand-ins for the rest.
    given: dict[str, Any] = {
        "np": np,
        "torch": torch,
        "cast": cast,
        "SamplingType": SamplingType,
        "PIN_MEMORY": False,
        "BatchUpdateBuilder": state.BatchUpdateBuilder,
        "LogitsProcessors": state.LogitsProcessors,
        "MoveDirectionality": interface.MoveDirectionality,
        "SamplingMetadata": metadata.SamplingMetadata,
        "MultiGroupBlockTable": BlockTable,
        "length_from_prompt_token_ids_or_embeds": load_function(
            vllm / "utils/__init__.py", "length_from_prompt_token_ids_or_embeds"
        ),
        "swap_dict_values": load_function(
            vllm / "utils/collection_utils.py", "swap_dict_values", {"_K": TypeVar("_K"), "_V": TypeVar("_V")}
        ),
        "copy_slice": load_function(vllm / "v1/utils.py", "copy_slice"),
        "maybe_create_thinking_budget_state_holder": load_function(
            vllm / "v1/sample/thinking_budget_state.py", "maybe_create_thinking_budget_state_holder"
        ),
        "get_pp_group": lambda: SimpleNamespace(is_last_rank=True),
        "reorder_batch_to_split_decodes_and_prefills": load_function(
            vllm / "v1/attention/backends/utils.py", "reorder_batch_to_split_decodes_and_prefills", {"np": np}
        ),
    }
    given.update(PoolingMetadata=None, PoolingStates=None)  # pooling models only
    input_batch = load_function(trees.vllm / BATCH, "InputBatch", given)
    request_state = load_function(trees.vllm / BATCH, "CachedRequestState", given)
    request_state.__module__ = "vllm.v1.worker.gpu_input_batch"  # @dataclass looks its module up
    sys.modules.setdefault(request_state.__module__, ModuleType(request_state.__module__))
    given["CachedRequestState"] = dataclasses.dataclass(request_state)
    methods = {
        name: load_mocked(trees.vllm / RUNNER, f"GPUModelRunner.{name}", given)
        for name in ("_update_states", "_may_reorder_batch")
    }

    def make_batch(self: Any) -> Any:
        return input_batch(
            max_num_reqs=8,
            max_model_len=64,
            max_num_batched_tokens=64,
            device=torch.device("cpu"),
            vocab_size=VOCAB,
            block_sizes=[16],
            kernel_block_sizes=[16],
            max_num_blocks_per_req=[4],
        )

    return type("Runner", (RunnerStandIn,), {**methods, "make_batch": make_batch})


def load(trees: Trees) -> tuple[type[RunnerStandIn], ApplyLogitsProcessors]:
    """The runner class of ``load_runner`` and vLLM's real ``Sampler.apply_logits_processors``: what
    ``Engine`` takes. Loaded in this order so that the batch and the sampler share one
    SamplingMetadata class (the sampler's is the module ``load_runner`` executes)."""
    runner_cls = load_runner(trees)
    return runner_cls, load_apply_logits_processors(trees)


def _show(tokens: list[int]) -> str:
    return "every token" if tokens == EVERY_TOKEN else str(tokens)


class Engine:
    """A stand-in runner with the tree's real _update_states, driven one scheduler step at a time.

    ``problems`` collects, step by step, every request whose row lets it sample other tokens than
    its allowed_token_ids; a proof asserts it is empty with its own message.
    """

    def __init__(
        self, runner_cls: type[RunnerStandIn], apply: ApplyLogitsProcessors, reorder_batch_threshold: int | None
    ) -> None:
        self.apply = apply
        self.runner = runner = cast(Any, runner_cls())
        # The runner attributes _update_states and _may_reorder_batch read, set to a plain decoder
        # model with one attention KV cache group: no spec decode, async scheduling, pooling or
        # M-RoPE (left to RunnerStandIn, they would be truthy MagicMocks and take other branches).
        runner.device = torch.device("cpu")
        runner.requests, runner.num_prompt_logprobs, runner.encoder_cache = {}, {}, {}
        runner.speculative_config = None
        runner.use_async_scheduling = runner.use_async_spec_decode = runner.is_pooling_model = False
        runner.uses_mrope, runner.uses_xdrope_dim = False, 0
        runner.kv_cache_config = SimpleNamespace(kv_cache_groups=["attention"])
        # None: the batch is never reordered (the CPU attention backend); 1: decodes are moved in
        # front of prefills with swap_states() (FlashInfer, MLA, the hybrid models' builders).
        runner.reorder_batch_threshold = reorder_batch_threshold
        runner.input_batch = runner.make_batch()
        self.allowed: dict[str, list[int] | None] = {}  # req_id -> its allowed_token_ids
        self.blocks = 0
        self.problems: list[str] = []

    @property
    def batch(self) -> Any:
        return self.runner.input_batch

    def _block(self) -> list[int]:
        # A fresh block id for every allocation, so that the block table stand-in never aliases rows.
        self.blocks += 1
        return [self.blocks]

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
            new_reqs.append(
                SimpleNamespace(
                    req_id=rid,
                    prompt_token_ids=list(PROMPT),
                    prompt_embeds=None,
                    prompt_is_token_ids=None,
                    mm_features=[],
                    sampling_params=SamplingParams(allowed),
                    pooling_params=None,
                    block_ids=(self._block(),),
                    num_computed_tokens=0,
                    lora_request=None,
                )
            )
        cached = [*running, *resumed]
        # The fields of SchedulerOutput and CachedRequestData that _update_states reads.
        self.runner._update_states(
            SimpleNamespace(
                finished_req_ids=set(finished),
                new_block_ids_to_zero=None,
                kv_cache_block_copies=None,
                free_encoder_mm_hashes=[],
                scheduled_new_reqs=new_reqs,
                scheduled_spec_decode_tokens={},
                num_scheduled_tokens={**{rid: len(PROMPT) for rid in [*new, *resumed]}, **{rid: 1 for rid in running}},
                scheduled_cached_reqs=SimpleNamespace(
                    req_ids=cached,
                    resumed_req_ids=set(resumed),
                    num_output_tokens=[0] * len(cached),
                    num_computed_tokens=[len(PROMPT)] * len(running) + [0] * len(resumed),
                    new_block_ids=[None] * len(running) + [(self._block(),) for _ in resumed],
                    new_token_ids=[],
                    all_token_ids={},
                ),
            )
        )

    def check(self, what: str, rows: list[str]) -> None:
        """The batch is ``rows``; each request can sample exactly its allowed_token_ids in the
        sampling call of the step."""
        # The scene names rows by request: were the order other than it means, the rows read below
        # would belong to other requests than the message says.
        assert self.batch.req_ids == rows, f"{what}: the batch is {self.batch.req_ids}, the scene needs {rows}"
        # All-zero logits: a token is sampleable exactly when the mask leaves its logit finite.
        logits = self.apply(torch.zeros((len(rows), VOCAB)), self.batch.sampling_metadata, False)
        wrong = []
        for r, (rid, row) in enumerate(zip(rows, logits)):
            toks = torch.nonzero(torch.isfinite(row)).flatten().tolist()
            want = self.allowed[rid] or EVERY_TOKEN
            if toks != want:
                wrong.append(f"{rid} (row {r}) can sample {_show(toks)}, its allowed_token_ids give {_show(want)}")
        if wrong:
            self.problems.append(f"{what} (batch {rows}): " + "; ".join(wrong))
