"""CPU harness for proofs that run the tree's real ``vllm_gaudi/v1/worker/hpu_input_batch.py``.

``load_input_batch(trees)`` executes the tree's InputBatch module on CPU, with vLLM 0.26.0's real
light modules (the logits_processor package, SamplingMetadata, swap_dict_values, cdiv,
async_tensor_h2d) and vllm_gaudi.utils' real async_h2d_copy/async_h2d_update bound to
device="cpu"; the heavy imports (block table, LoRA, multimodal, habana_frameworks, ...) are
stand-ins or MagicMocks. ``make_batch`` and ``make_request`` build an InputBatch and a
CachedRequestState from it. ``SamplingParams`` stands in for vllm.SamplingParams.

Used by the proofs of bad-words-index, logitsprocs-rows, prompt-order and sampling-rows-refresh.
Proofs import it as ``fixes._support.input_batch`` (the cookbook root is on ``sys.path``).
"""

from __future__ import annotations

import enum
import functools
import importlib.abc
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import torch

from fixpack.proofkit import HABANA_MODULES, Trees, load_function, stub_modules

VOCAB = 32  # the vocab size of the batches make_batch builds


def exec_file(name: str, path: Path) -> types.ModuleType:
    """Execute a source file as module ``name`` (no bytecode is written into the tree)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


class SamplingType(enum.IntEnum):
    """Stand-in for vllm.sampling_params.SamplingType."""

    GREEDY = 0
    RANDOM = 1
    RANDOM_SEED = 2


class SamplingParams:
    """Stand-in for vllm.SamplingParams: the attributes InputBatch and the logits processors read."""

    def __init__(
        self,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        logit_bias: dict[int, float] | None = None,
        min_tokens: int = 0,
        stop_token_ids: tuple[int, ...] = (),
        bad_words_token_ids: list[list[int]] | None = None,
        allowed_token_ids: list[int] | None = None,
    ) -> None:
        self.temperature = temperature
        self.sampling_type = SamplingType.GREEDY if temperature < 1e-5 else SamplingType.RANDOM
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.repetition_penalty = repetition_penalty
        self.logit_bias = logit_bias
        self.min_tokens = min_tokens
        self.all_stop_token_ids = set(stop_token_ids)
        self.bad_words_token_ids = bad_words_token_ids
        self.logprobs = None
        self.prompt_logprobs = None
        self.allowed_token_ids = allowed_token_ids
        self.seed = None
        self.extra_args = None
        self.structured_outputs = None  # min-tokens-grammar's MinTokensLogitsProcessor reads it


class _BlockTable:
    """One KV cache group's block table rows, on CPU."""

    def __init__(self, max_num_reqs: int, max_num_blocks: int) -> None:
        self.table = torch.zeros((max_num_reqs, max_num_blocks), dtype=torch.int32)

    def add_row(self, block_ids: list[int], row: int) -> None:
        self.table[row].zero_()
        self.table[row, : len(block_ids)] = torch.tensor(block_ids, dtype=torch.int32)

    def swap_row(self, a: int, b: int) -> None:
        self.table[[a, b]] = self.table[[b, a]]

    def move_row(self, src: int, dst: int) -> None:
        self.table[dst] = self.table[src]

    def get_cpu_tensor(self) -> torch.Tensor:
        return self.table


class MultiGroupBlockTable:
    """Stand-in for vllm's block table (not what these fixes are about)."""

    def __init__(self, max_num_reqs: int, max_num_blocks: list[int], **_: Any) -> None:
        self.tables = [_BlockTable(max_num_reqs, n) for n in max_num_blocks]

    def add_row(self, block_ids: list[list[int]], row: int) -> None:
        for table, ids in zip(self.tables, block_ids, strict=True):
            table.add_row(ids, row)

    def swap_row(self, a: int, b: int) -> None:
        for table in self.tables:
            table.swap_row(a, b)

    def move_row(self, src: int, dst: int) -> None:
        for table in self.tables:
            table.move_row(src, dst)

    def __getitem__(self, group: int) -> _BlockTable:
        return self.tables[group]


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any other vllm / vllm_gaudi / habana module (e.g. one another fix imports) is a MagicMock."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in ("vllm", "vllm_gaudi", "habana_frameworks"):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> Any:
        module = mock.MagicMock(name=spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        pass


def load_input_batch(trees: Trees) -> types.ModuleType:
    """The tree's hpu_input_batch module, run on CPU.

    vLLM's logits_processor package (interface, state, builtin) and SamplingMetadata are the real
    vLLM 0.26.0 sources; vllm_gaudi.utils' async_h2d_copy/async_h2d_update are the real functions
    with device="cpu" bound (their default is "hpu").
    """
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "need both trees"
    vllm = trees.vllm / "vllm"
    lp = "vllm.v1.sample.logits_processor"
    sys.meta_path.insert(0, _StubFinder())
    stubs = stub_modules(
        "vllm.lora.request",
        "vllm.multimodal.inputs",
        "vllm.pooling_params",
        "vllm.sampling_params",
        "vllm.utils.collection_utils",
        "vllm.utils.math_utils",
        "vllm.utils.torch_utils",
        "vllm.v1.outputs",
        "vllm.v1.pool.metadata",
        "vllm.v1.worker.block_table",
        "vllm.v1.sample.thinking_budget_state",
        lp,
        "vllm_gaudi.utils",
        *HABANA_MODULES,
    )
    for stub in stubs.values():  # packages, for imports of modules not stubbed here
        stub.__path__ = []
        stub.__spec__ = None
    sys.modules["vllm"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingType = SamplingType
    sys.modules["vllm.utils.collection_utils"].swap_dict_values = load_function(
        vllm / "utils/collection_utils.py", "swap_dict_values", {"_K": TypeVar("_K"), "_V": TypeVar("_V")}
    )
    sys.modules["vllm.utils.math_utils"].cdiv = load_function(vllm / "utils/math_utils.py", "cdiv")
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(
        vllm / "utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False}
    )
    sys.modules["vllm.v1.worker.block_table"].MultiGroupBlockTable = MultiGroupBlockTable
    package = sys.modules[lp]
    for sub in ("interface", "state", "builtin"):
        real = exec_file(f"{lp}.{sub}", vllm / f"v1/sample/logits_processor/{sub}.py")
        for name, value in vars(real).items():
            if not name.startswith("__"):
                setattr(package, name, value)
    exec_file("vllm.v1.sample.metadata", vllm / "v1/sample/metadata.py")
    utils = trees.vllm_gaudi / "vllm_gaudi/utils.py"
    gaudi_utils = sys.modules["vllm_gaudi.utils"]
    for name in ("async_h2d_copy", "async_h2d_update"):
        setattr(gaudi_utils, name, functools.partial(load_function(utils, name, {"torch": torch}), device="cpu"))
    return exec_file("proof_hpu_input_batch", trees.vllm_gaudi / "vllm_gaudi/v1/worker/hpu_input_batch.py")


def make_batch(ib: types.ModuleType, logitsprocs: Any = None, max_num_reqs: int = 8) -> Any:
    """An InputBatch of ``ib`` on CPU: vocab ``VOCAB``, one KV cache group of 16-token blocks."""
    return ib.InputBatch(
        max_num_reqs=max_num_reqs,
        max_model_len=64,
        max_num_batched_tokens=64,
        device=torch.device("cpu"),
        pin_memory=False,
        vocab_size=VOCAB,
        block_sizes=[16],
        kernel_block_sizes=[16],
        logitsprocs=logitsprocs,
    )


def make_request(
    ib: types.ModuleType,
    req_id: str,
    params: SamplingParams,
    prompt: list[int],
    output: list[int] | None = None,
    num_computed: int = 0,
    blocks: list[int] | None = None,
) -> Any:
    """A CachedRequestState of ``ib`` (one KV cache group, ``blocks`` or ``[1]``)."""
    return ib.CachedRequestState(
        req_id=req_id,
        prompt_token_ids=prompt,
        mm_features=[],
        sampling_params=params,
        generator=None,
        block_ids=[blocks or [1]],
        num_computed_tokens=num_computed,
        output_token_ids=list(output or []),
    )


def load_apply_logits_processors(trees: Trees) -> Any:
    """vLLM's real ``Sampler.apply_logits_processors`` (the allowed-token mask, bad words, the
    processors), bound to a stand-in sampler whose penalties are off (no_penalties=True returns the
    logits as they are)."""
    assert trees.vllm is not None
    vllm = trees.vllm / "vllm"
    bad_words = exec_file("vllm.v1.sample.ops.bad_words", vllm / "v1/sample/ops/bad_words.py")
    fn = load_function(
        vllm / "v1/sample/sampler.py",
        "Sampler.apply_logits_processors",
        {
            "torch": torch,
            "apply_bad_words": bad_words.apply_bad_words,
            "SamplingMetadata": sys.modules["vllm.v1.sample.metadata"].SamplingMetadata,
        },
    )
    sampler = types.SimpleNamespace(apply_penalties=lambda logits, metadata, output_token_ids: logits)
    return functools.partial(fn, sampler)


def sampleable(batch: Any, apply: Any, rows: list[tuple[str, list[int]]]) -> list[list[int]]:
    """The tokens each row of one sampling call (req_id, output token ids) can still sample after
    ``apply`` (:func:`load_apply_logits_processors`): those whose logit it left finite."""
    md = batch.make_selective_sampling_metadata(rows, skip_copy=False)
    logits = apply(torch.zeros((len(rows), VOCAB)), md, False)
    return [torch.nonzero(torch.isfinite(row)).flatten().tolist() for row in logits]
