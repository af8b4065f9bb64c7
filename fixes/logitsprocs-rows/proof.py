"""logitsprocs-rows: logit_bias, min_tokens and min_p must reach the rows they belong to.

Runs on CPU the tree's real InputBatch (hpu_input_batch.py: add_request, remove_request,
make_selective_sampling_metadata) with vLLM 0.26.0's real builtin logits processors
(MinTokensLogitsProcessor, LogitBiasLogitsProcessor, MinPLogitsProcessor, built on CPU as
build_logitsprocs() builds them), and feeds each call's SamplingMetadata to vLLM's real
Sampler.apply_logits_processors() and Sampler.sample(). Only the final top-k/top-p draw is a
stand-in: it records the logits it is given (the processed logits) and returns their argmax.

The HPU runner samples each forward pass separately: a call has only the rows of its requests, in
call order, padded with repeats of its first request.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib.abc
import importlib.util
import math
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import torch

from fixpack.proofkit import HABANA_MODULES, Trees, load_function, load_source, stub_modules

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


NEG = -math.inf
BASE = [2.0, 1.5] + [0.0] * (VOCAB - 2)
EOS = 7


def load_sampler(trees: Trees) -> SimpleNamespace:
    """vLLM's real Sampler.apply_logits_processors() and Sampler.sample(), on a stand-in self."""
    assert trees.vllm is not None
    vllm = trees.vllm / "vllm"
    path = vllm / "v1/sample/sampler.py"
    eps = next(ast.literal_eval(node.value) for node in ast.parse(path.read_text(encoding="utf-8")).body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_SAMPLING_EPS")
    bad_words = _exec_file("vllm.v1.sample.ops.bad_words", vllm / "v1/sample/ops/bad_words.py")
    ns = {"torch": torch, "_SAMPLING_EPS": eps, "LogprobsMode": str, "apply_bad_words": bad_words.apply_bad_words,
          "SamplingMetadata": sys.modules["vllm.v1.sample.metadata"].SamplingMetadata}
    seen: list[torch.Tensor] = []

    def topk_topp_sampler(logits: torch.Tensor, generators: Any, top_k: Any, top_p: Any) -> tuple[Any, None]:
        seen.append(logits.clone())
        return logits.argmax(dim=-1).view(-1), None

    self = SimpleNamespace(
        logprobs_mode="raw_logprobs", seen=seen, topk_topp_sampler=topk_topp_sampler,
        greedy_sample=load_function(path, "Sampler.greedy_sample", ns),
        apply_temperature=load_function(path, "Sampler.apply_temperature", ns),
        apply_penalties=lambda logits, metadata, output_token_ids: logits)
    assert "def sample(" in load_source(path, "Sampler.sample")
    self.apply_logits_processors = functools.partial(load_function(path, "Sampler.apply_logits_processors", ns),
                                                     self)
    self.sample = functools.partial(load_function(path, "Sampler.sample", ns), self)
    return self


def build_logitsprocs() -> Any:
    """What build_logitsprocs() builds without spec decode or custom processors (BUILTIN_LOGITS_PROCESSORS)."""
    lp = sys.modules["vllm.v1.sample.logits_processor"]
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=8))
    builtin = (lp.MinTokensLogitsProcessor, lp.LogitBiasLogitsProcessor, lp.MinPLogitsProcessor)
    return lp.LogitsProcessors(cls(config, torch.device("cpu"), False) for cls in builtin)


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
    md = batch.make_selective_sampling_metadata([(rid, reqs[rid].output_token_ids) for rid in rows],
                                                skip_copy=False)
    logits = torch.tensor([BASE] * len(rows))
    logits = sampler.apply_logits_processors(logits, md, False)
    sampler.seen.clear()
    sampler.sample(logits, md)
    processed = sampler.seen[0] if sampler.seen else logits
    return processed.tolist()


def _check(sampler: SimpleNamespace, batch: Any, reqs: dict[str, Any], rows: list[str], expect: dict[str, list[float]],
           what: str) -> None:
    got = _sample(sampler, batch, reqs, rows)
    for r, rid in enumerate(rows):
        want = expect[rid] if rows.index(rid) == r else None  # padding rows: not checked
        if want is not None and got[r] != want:
            diff = {t: (got[r][t], want[t]) for t in range(VOCAB) if got[r][t] != want[t]}
            raise AssertionError(f"{what}: call rows {rows}, row {r} ({rid}): token: (got, expected) {diff}")


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)
    sampler = load_sampler(trees)
    batch = make_batch(ib, logitsprocs=build_logitsprocs())
    reqs = {
        "N": make_request(ib, "N", SamplingParams(temperature=0.0), [1, 2, 3], [4], num_computed=3),
        "B": make_request(ib, "B", SamplingParams(temperature=0.0, logit_bias={5: 100.0}), [1, 2, 3]),
        "T": make_request(ib, "T", SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=(EOS, )),
                          [1, 2, 3]),
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
    _check(sampler, batch, reqs, ["M", "T"], EXPECTED, "call with another row order")
    _check(sampler, batch, reqs, ["M", "T", "M"], EXPECTED, "same requests, padded to one more row")
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
    _check(sampler, batch, reqs, ["C", "N", "M"], {**EXPECTED, "C": _row(), "N": _row(bias={3: 50.0})},
           "after N was resubmitted with a logit_bias")
