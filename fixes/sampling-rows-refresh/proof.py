"""sampling-rows-refresh: device sampling rows must follow InputBatch.swap_states().

Runs the tree's real InputBatch (hpu_input_batch.py) on CPU: add_request, refresh_sampling_metadata,
swap_states and make_selective_sampling_metadata, with vLLM 0.26.0's real SamplingMetadata and
vllm_gaudi.utils' real async_h2d_copy/async_h2d_update (device="cpu").

P is a chunked prompt and Q a decode; HPUModelRunner._ensure_decodes_first() swaps them with
swap_states(0, 1) to put the decode first. Case 1: a step with no added or removed request, so the
runner passes skip_copy=True. Case 2: a step that did add requests (skip_copy=False): only the rows
sampled in that call are copied, and the next step (skip_copy=True) samples the other one.
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

VOCAB = 32


# --- CPU harness: the tree's real hpu_input_batch.py, with vLLM's light modules or stand-ins ---


def _exec_file(name: str, path: Path) -> types.ModuleType:
    """Execute a source file as module ``name`` (no bytecode is written into the tree)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


class SamplingType(enum.IntEnum):
    GREEDY = 0
    RANDOM = 1
    RANDOM_SEED = 2


class SamplingParams:
    """Stand-in for vllm.SamplingParams: the attributes InputBatch and the logits processors read."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, logit_bias: dict[int, float] | None = None,
                 min_tokens: int = 0, stop_token_ids: tuple[int, ...] = (),
                 bad_words_token_ids: list[list[int]] | None = None) -> None:
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
        self.allowed_token_ids = None
        self.seed = None
        self.extra_args = None


class _BlockTable:
    def __init__(self, max_num_reqs: int, max_num_blocks: int) -> None:
        self.table = torch.zeros((max_num_reqs, max_num_blocks), dtype=torch.int32)

    def add_row(self, block_ids: list[int], row: int) -> None:
        self.table[row].zero_()
        self.table[row, :len(block_ids)] = torch.tensor(block_ids, dtype=torch.int32)

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
    stubs = stub_modules("vllm.lora.request", "vllm.multimodal.inputs", "vllm.pooling_params", "vllm.sampling_params",
                 "vllm.utils.collection_utils", "vllm.utils.math_utils", "vllm.utils.torch_utils", "vllm.v1.outputs",
                 "vllm.v1.pool.metadata", "vllm.v1.worker.block_table", "vllm.v1.sample.thinking_budget_state",
                 lp, "vllm_gaudi.utils", *HABANA_MODULES)
    for stub in stubs.values():  # packages, for imports of modules not stubbed here
        stub.__path__ = []
        stub.__spec__ = None
    sys.modules["vllm"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingType = SamplingType
    sys.modules["vllm.utils.collection_utils"].swap_dict_values = load_function(
        vllm / "utils/collection_utils.py", "swap_dict_values", {"_K": TypeVar("_K"), "_V": TypeVar("_V")})
    sys.modules["vllm.utils.math_utils"].cdiv = load_function(vllm / "utils/math_utils.py", "cdiv")
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(
        vllm / "utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False})
    sys.modules["vllm.v1.worker.block_table"].MultiGroupBlockTable = MultiGroupBlockTable
    package = sys.modules[lp]
    for sub in ("interface", "state", "builtin"):
        real = _exec_file(f"{lp}.{sub}", vllm / f"v1/sample/logits_processor/{sub}.py")
        for name, value in vars(real).items():
            if not name.startswith("__"):
                setattr(package, name, value)
    _exec_file("vllm.v1.sample.metadata", vllm / "v1/sample/metadata.py")
    utils = trees.vllm_gaudi / "vllm_gaudi/utils.py"
    gaudi_utils = sys.modules["vllm_gaudi.utils"]
    for name in ("async_h2d_copy", "async_h2d_update"):
        setattr(gaudi_utils, name, functools.partial(load_function(utils, name, {"torch": torch}), device="cpu"))
    return _exec_file("proof_hpu_input_batch", trees.vllm_gaudi / "vllm_gaudi/v1/worker/hpu_input_batch.py")


def make_batch(ib: types.ModuleType, logitsprocs: Any = None, max_num_reqs: int = 8) -> Any:
    return ib.InputBatch(max_num_reqs=max_num_reqs, max_model_len=64, max_num_batched_tokens=64,
                         device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB, block_sizes=[16],
                         kernel_block_sizes=[16], logitsprocs=logitsprocs)


def make_request(ib: types.ModuleType, req_id: str, params: SamplingParams, prompt: list[int],
                 output: list[int] | None = None, num_computed: int = 0, blocks: list[int] | None = None) -> Any:
    return ib.CachedRequestState(req_id=req_id, prompt_token_ids=prompt, mm_features=[], sampling_params=params,
                                 generator=None, block_ids=[blocks or [1]], num_computed_tokens=num_computed,
                                 output_token_ids=list(output or []))


# --- end of harness ---


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
    want = {"temperature": params["temperature"], "top_p": params["top_p"], "top_k": params["top_k"],
            "frequency_penalty": params.get("frequency_penalty", 0.0),
            "presence_penalty": params.get("presence_penalty", 0.0)}
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
