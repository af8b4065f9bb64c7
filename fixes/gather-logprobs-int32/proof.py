"""gather-logprobs-int32: the logprob token ids must be concatenated as int32, not as int64.

Runs the tree's real ``_hpu_gather_logprobs`` (patches.py, installed as Sampler.gather_logprobs) and
``HPUModelRunner._gather_prompt_logprobs_hpu`` on CPU torch, with vLLM's real ``LogprobsTensors``
and vllm-gaudi's real ``_hpu_batched_count_greater_than``, under a TorchDispatchMode that records
every aten op that runs, with the dtypes of its tensor operands and results. What is observed is
the operation torch executes, not the Python name the code calls: ``torch.cat``, ``torch.concat``,
``torch.hstack``, ``torch.column_stack`` all reach ``aten.cat`` (``torch.stack`` reaches
``aten.stack``). The ids must be assembled on int32: no concatenation op may take an int64 operand,
and no op may produce the gathered ids (shape [rows, 1 + num_logprobs], integer) as int64. That
int64 concatenation is what HPU lazy mode corrupts; the corruption itself cannot be run here, so on
CPU the pristine results are still correct. A Qwen-size vocabulary puts ids above the
int16/uint16 range, and the ids, logprobs and ranks must equal a reference exactly (ids as int32).
"""

from __future__ import annotations

import sys
import types
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fixpack.proofkit import Trees, load_function

PATCHES = "vllm_gaudi/patches.py"
RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
OUTPUTS = "vllm/v1/outputs.py"
VOCAB = 151936  # Qwen3 / Qwen3.5 vocabulary
NUM_LOGPROBS = 5


# aten ops that concatenate their operands (torch.cat/concat/concatenate/hstack/vstack/column_stack
# and torch.stack decompose into these before a backend kernel runs).
_CONCAT_OPS = {"cat", "_cat", "stack", "_stack", "concat", "concatenate", "hstack", "vstack", "column_stack"}


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _AtenOps(TorchDispatchMode):
    """Records every aten op that runs: its name, operand dtypes and result dtypes and shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[torch.dtype], list[tuple[torch.dtype, tuple[int, ...]]]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = [t.dtype for t in _tensors((args, kwargs or {}))]
        outputs = [(t.dtype, tuple(t.shape)) for t in _tensors(out)]
        self.ops.append((func._schema.name.split("::")[-1], inputs, outputs))
        return out


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
    tensors_cls = load_function(
        trees.vllm / OUTPUTS,
        "LogprobsTensors",
        {
            "NamedTuple": __import__("typing").NamedTuple,
            "torch": torch,
            "LogprobsLists": mock.MagicMock(name="LogprobsLists"),
        },
    )
    count_fn = load_function(trees.vllm_gaudi / PATCHES, "_hpu_batched_count_greater_than", {"torch": torch})
    _install_vllm_modules(tensors_cls, count_fn)
    gather = load_function(trees.vllm_gaudi / PATCHES, "_hpu_gather_logprobs", {"torch": torch})
    gather_prompt = load_function(
        trees.vllm_gaudi / RUNNER,
        "HPUModelRunner._gather_prompt_logprobs_hpu",
        {
            "torch": torch,
            "LogprobsTensors": tensors_cls,
        },
    )

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, VOCAB, generator=gen)
    logits[0, VOCAB - 1] = 30.0  # top-1 ids far above 2**16
    logits[1, 70000] = 30.0
    logprobs = logits.log_softmax(dim=-1)
    token_ids = torch.tensor([VOCAB - 1, 70000, 40000, 3], dtype=torch.int64)
    ref_ids, ref_logprobs, ref_ranks = _reference(logprobs, token_ids)

    ids_shape = (token_ids.shape[0], 1 + NUM_LOGPROBS)
    problems = []
    for name, run in (
        ("_hpu_gather_logprobs (patches.py)", lambda: gather(logprobs, NUM_LOGPROBS, token_ids)),
        ("HPUModelRunner._gather_prompt_logprobs_hpu", lambda: gather_prompt(None, logprobs, NUM_LOGPROBS, token_ids)),
    ):
        mode = _AtenOps()
        with mode:
            out = run()
        assert out.logprob_token_ids.dtype == torch.int32, (
            f"{name}: ids dtype {out.logprob_token_ids.dtype}, expected int32"
        )
        assert torch.equal(out.logprob_token_ids, ref_ids), (
            f"{name}: ids differ from the reference: {out.logprob_token_ids.tolist()} != {ref_ids.tolist()}"
        )
        assert torch.equal(out.logprobs, ref_logprobs), f"{name}: logprobs differ from the reference"
        assert torch.equal(out.selected_token_ranks, ref_ranks), (
            f"{name}: ranks differ from the reference: {out.selected_token_ranks.tolist()} != {ref_ranks.tolist()}"
        )
        int64_concats = [(op, ins) for op, ins, _ in mode.ops if op in _CONCAT_OPS and torch.int64 in ins]
        int64_ids = [op for op, _, outs in mode.ops if (torch.int64, ids_shape) in outs]
        if int64_concats:
            problems.append(f"{name} runs aten concatenations on int64 operands {int64_concats}")
        if int64_ids:
            problems.append(
                f"{name} assembles the {list(ids_shape)} token ids as int64 (by aten {int64_ids}) and "
                "narrows them to int32 only afterwards"
            )
    assert not problems, "; ".join(problems) + " (the int64 concatenation whose ids HPU lazy mode corrupts)"
