"""gather-logprobs-int32: the logprob token ids must be concatenated as int32, not as int64.

Runs the tree's real ``_hpu_gather_logprobs`` (patches.py, installed as Sampler.gather_logprobs) and
``HPUModelRunner._gather_prompt_logprobs_hpu`` on CPU torch, with vLLM's real ``LogprobsTensors``
and vllm-gaudi's real ``_hpu_batched_count_greater_than``, under a TorchFunctionMode that records
the dtypes of every torch.cat. A Qwen-size vocabulary puts ids above the int16/uint16 range. The
results must equal a reference exactly (ids as int32), and no integer cat may take int64 operands:
that int64 cat is what HPU lazy mode corrupts, and it cannot itself be run here.
"""

from __future__ import annotations

import sys
import types
from typing import Any
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from fixpack.proofkit import Trees, load_function

PATCHES = "vllm_gaudi/patches.py"
RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
OUTPUTS = "vllm/v1/outputs.py"
VOCAB = 151936  # Qwen3 / Qwen3.5 vocabulary
NUM_LOGPROBS = 5


class _CatDtypes(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.cats: list[list[torch.dtype]] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.cat:
            tensors = args[0] if args else kwargs["tensors"]
            self.cats.append([t.dtype for t in tensors])
        return func(*args, **kwargs)


def _reference(logprobs: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    topk_logprobs, topk_indices = torch.topk(logprobs, NUM_LOGPROBS, dim=-1)
    token_logprobs = logprobs.gather(-1, token_ids.unsqueeze(-1))
    ids = [[int(t)] + [int(i) for i in row] for t, row in zip(token_ids, topk_indices, strict=True)]
    ranks = (logprobs >= token_logprobs).sum(-1)
    return torch.tensor(ids, dtype=torch.int32), torch.cat((token_logprobs, topk_logprobs), dim=1), ranks


def _install_vllm_modules(tensors_cls: Any, count_fn: Any) -> None:
    """Light modules for the two imports _hpu_gather_logprobs makes inside its body."""
    names = ("vllm", "vllm.v1", "vllm.v1.outputs", "vllm.v1.sample", "vllm.v1.sample.sampler")
    mods = {name: types.ModuleType(name) for name in names}
    mods["vllm.v1.outputs"].LogprobsTensors = tensors_cls
    mods["vllm.v1.sample.sampler"].batched_count_greater_than = count_fn
    for name, mod in mods.items():
        sys.modules[name] = mod
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(mods[parent], child, mod)


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "needs the vllm-gaudi and vllm trees"
    tensors_cls = load_function(trees.vllm / OUTPUTS, "LogprobsTensors", {
        "NamedTuple": __import__("typing").NamedTuple,
        "torch": torch,
        "LogprobsLists": mock.MagicMock(name="LogprobsLists"),
    })
    count_fn = load_function(trees.vllm_gaudi / PATCHES, "_hpu_batched_count_greater_than", {"torch": torch})
    _install_vllm_modules(tensors_cls, count_fn)
    gather = load_function(trees.vllm_gaudi / PATCHES, "_hpu_gather_logprobs", {"torch": torch})
    gather_prompt = load_function(trees.vllm_gaudi / RUNNER, "HPUModelRunner._gather_prompt_logprobs_hpu", {
        "torch": torch,
        "LogprobsTensors": tensors_cls,
    })

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, VOCAB, generator=gen)
    logits[0, VOCAB - 1] = 30.0  # top-1 ids far above 2**16
    logits[1, 70000] = 30.0
    logprobs = logits.log_softmax(dim=-1)
    token_ids = torch.tensor([VOCAB - 1, 70000, 40000, 3], dtype=torch.int64)
    ref_ids, ref_logprobs, ref_ranks = _reference(logprobs, token_ids)

    problems = []
    for name, run in (("_hpu_gather_logprobs (patches.py)", lambda: gather(logprobs, NUM_LOGPROBS, token_ids)),
                      ("HPUModelRunner._gather_prompt_logprobs_hpu",
                       lambda: gather_prompt(None, logprobs, NUM_LOGPROBS, token_ids))):
        mode = _CatDtypes()
        with mode:
            out = run()
        if out.logprob_token_ids.dtype != torch.int32:
            raise RuntimeError(f"{name}: ids dtype {out.logprob_token_ids.dtype}, expected int32")
        if not (torch.equal(out.logprob_token_ids, ref_ids) and torch.equal(out.logprobs, ref_logprobs)
                and torch.equal(out.selected_token_ranks, ref_ranks)):
            raise RuntimeError(f"{name}: results differ from the reference: {out.logprob_token_ids.tolist()}")
        int64_cats = [d for d in mode.cats if torch.int64 in d]
        if int64_cats:
            problems.append(f"{name} concatenates the token ids as int64 ({int64_cats}) and narrows to int32 only "
                            "afterwards")
    assert not problems, "; ".join(problems) + " (the int64 cat whose ids HPU lazy mode corrupts)"
