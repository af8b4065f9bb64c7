"""fp8-moe-gather: the gathered-expert FP8 MoE path of HPUFp8MoEMethod.apply_monolithic.

Imports the tree's real vllm_gaudi/envs.py, vllm_gaudi/ops/hpu_fp8.py and (when present)
vllm_gaudi/ops/hpu_moe_combine.py, with vLLM and the Habana-only modules replaced by automatic
stubs, and the two Habana ops the path calls emulated in plain torch on the CPU:

- hpu::cast_to_fp8_v2(input, scale, ...) -> (clamp(input * scale, +-448) as float8_e4m3fn, amax)
- hpu::fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv, B_scale_inv, bias,
  accumulate): (A * A_scale_inv) @ op(B) * B_scale_inv per output column, in float64. The schema
  has exactly the arguments that v0.26.0's own apply_fp8_linear_hpu passes, so a call with any
  other argument (such as B_scale_shape) fails here.

dynamic_quant is the tree's real one
(vllm_gaudi/extension/ops.py), init_logger is vLLM's real one (vllm/logger.py). The stock fused op
is a recording stand-in that returns the dense reference; it takes the weights as [out, in]
(permuted_weights=True) only. Sizes are non-square (H 40, 2I 24, I 12) so that no axis stands in
for another. Shown:

1. VLLM_HPU_MOE_GATHER=1, default ratio 1.0, 64 local experts (EP rank 1 of 4 over 256), top-8:
   1..8 decode tokens take the gathered path and match a dense per-(token, slot) float64
   reference within 1e-4 of max|reference| (float32 input) or 1e-2 (bfloat16 input); 9 and 16
   tokens run the stock op. VLLM_HPU_MOE_GATHER_RATIO=0.5 moves the cut to 4/5 tokens; 2.0 with
   16 local experts gathers all of them (g clamped to E_local) and still matches. Top-1 routing
   gathers from one token; an empty batch runs the stock op; "true" turns the path on like "1".
   The output keeps x's dtype (bfloat16 in, bfloat16 out) and shape.
2. With the env unset (or VLLM_HPU_MOE_GATHER=0), every call runs the stock op, VERIFY included.
3. Layouts the path does not read are refused: per-tensor scales (w13_weight_scale), block scales,
   the block op, a static input scale, a non-silu activation.
4. VLLM_HPU_MOE_GATHER_VERIFY=1 runs both paths, returns the gathered result and logs the error
   (once per new worst difference: the same call again logs nothing). The logged numbers are the
   token count, max |gathered - stock| and that over max |stock|. "1" and "true" both turn it on.
5. The comparison catches wrong expert orderings: experts of w13 rolled by one, gate/up halves
   swapped, and a GEMM whose output columns come back expert-interleaved all exceed the tolerance.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import logging
import math
import os
import sys
import types
from enum import Enum
from pathlib import Path
from types import MethodType
from typing import Any, cast
from unittest import mock

import torch

from fixpack.proofkit import Trees, load_function, parse_file

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
TOL_FP32 = 1e-4
TOL_BF16 = 1e-2
# Hidden size, intermediate size: no two of H, 2I and I are equal, so w13 [E, 2I, H], w2 [E, H, I] and the
# GEMM output [T, g*2I] are non-square, and a dimension read from the wrong axis changes shapes or numbers.
HIDDEN, INTER = 40, 12
ENV_NAMES = ("VLLM_HPU_MOE_GATHER", "VLLM_HPU_MOE_GATHER_RATIO", "VLLM_HPU_MOE_GATHER_VERIFY")
STUBBED = ("vllm", "habana_frameworks", "vllm_gaudi.extension", "vllm_gaudi.v1", "vllm_gaudi.ops.hpu_fused_moe")

# ---------------------------------------------------------------- Habana op stand-ins (CPU)
_GEMM = {"interleave_columns": False}  # set True to emulate a GEMM that reads B in a wrong order
_LIB = torch.library.Library("hpu", "DEF")
_LIB.define(
    "cast_to_fp8_v2(Tensor input, Tensor? scale, bool stochastic_rounding, bool is_amax, "
    "ScalarType dtype) -> (Tensor, Tensor)"
)
_LIB.define(
    "fp8_gemm_v2(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
    "Tensor? A_scale_inv=None, Tensor? B_scale_inv=None, Tensor? bias=None, bool accumulate=False) -> Tensor"
)


def _cast_to_fp8_v2(
    inp: torch.Tensor, scale: torch.Tensor | None, stochastic_rounding: bool, is_amax: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    scaled = inp.float() * (scale.float() if scale is not None else 1.0)
    amax = inp.float().abs().max() if inp.numel() else torch.zeros(())  # an empty batch has no max
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(dtype), amax


def _fp8_gemm_v2(
    a: torch.Tensor,
    trans_a: bool,
    b: torch.Tensor,
    trans_b: bool,
    d: torch.Tensor | None,
    out_dtype: torch.dtype,
    a_scale_inv: torch.Tensor | None = None,
    b_scale_inv: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    accumulate: bool = False,
) -> torch.Tensor:
    assert d is None and bias is None and not accumulate, "stand-in covers D=None, bias=None only"
    a64 = a.double().t() if trans_a else a.double()
    b64 = b.double().t() if trans_b else b.double()  # [K, N]
    if a_scale_inv is not None:
        a64 = a64 * a_scale_inv.double()
    if b_scale_inv is not None:
        s = b_scale_inv.double()
        b64 = b64 * (s.reshape(1, -1) if s.numel() > 1 else s)
    out = a64 @ b64
    if _GEMM["interleave_columns"]:
        # Columns read as [2I, g] instead of [g, 2I]: experts interleaved (the permute(1,0,2) bug).
        out = out.reshape(out.shape[0], -1, 2 * _GEMM["inter"]).transpose(1, 2).reshape(out.shape[0], -1)
    return out.to(out_dtype)


_LIB.impl("cast_to_fp8_v2", _cast_to_fp8_v2, "CPU")
_LIB.impl("fp8_gemm_v2", _fp8_gemm_v2, "CPU")


# ---------------------------------------------------------------- module stubs
class _AutoMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=f"{cls.__name__}.{name}")


class _AutoModule(types.ModuleType):
    """A module whose capitalized names are classes (subclassable) and others MagicMocks."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value: Any
        if name.startswith("_POSSIBLE"):
            value = {}
        elif name[:1].isupper():
            value = _AutoMeta(name, (), {})
        else:
            value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if any(fullname == p or fullname.startswith(p + ".") for p in STUBBED):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AutoModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


_FINDER = _StubFinder()
sys.meta_path.insert(0, _FINDER)


def _module_constant(path: Path, name: str) -> Any:
    for node in parse_file(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path}: no module constant {name}")


class Loaded:
    def __init__(self, tree: Path, vllm_tree: Path, env: dict[str, str]) -> None:
        sys.dont_write_bytecode = True  # never leave __pycache__ in the trees
        for name in list(sys.modules):
            if name.split(".")[0] in ("vllm", "vllm_gaudi", "habana_frameworks"):
                del sys.modules[name]
        for name in ENV_NAMES:
            os.environ.pop(name, None)
        os.environ.update(env)
        root = tree / "vllm_gaudi"
        for pkg, where in (("vllm_gaudi", root), ("vllm_gaudi.ops", root / "ops")):
            module = types.ModuleType(pkg)
            module.__path__ = [str(where)]
            sys.modules[pkg] = module
        # vLLM's own init_logger (vllm/logger.py), so hpu_fp8.py's module-level call must match its
        # signature. _METHODS_TO_PATCH only adds the *_once helpers, which the path does not use.
        vllm_logger = importlib.import_module("vllm.logger")
        vllm_logger.init_logger = load_function(
            vllm_tree / "vllm/logger.py",
            "init_logger",
            {
                "logging": logging,
                "MethodType": MethodType,
                "cast": cast,
                "_VllmLogger": logging.Logger,
                "_METHODS_TO_PATCH": {},
            },
        )
        self.ext_ops = importlib.import_module("vllm_gaudi.extension.ops")
        self.dynamic_quant = load_function(
            root / "extension/ops.py", "dynamic_quant", {"torch": torch, "FP8_MAX": FP8_MAX}
        )
        self.ext_ops.dynamic_quant = self.dynamic_quant
        fused = importlib.import_module("vllm_gaudi.ops.hpu_fused_moe")
        fused._normalize_moe_activation = load_function(
            root / "ops/hpu_fused_moe.py",
            "_normalize_moe_activation",
            {
                "Enum": Enum,
                "_MOE_ACTIVATION_ALIASES": _module_constant(root / "ops/hpu_fused_moe.py", "_MOE_ACTIVATION_ALIASES"),
            },
        )
        self.fp8 = importlib.import_module("vllm_gaudi.ops.hpu_fp8")
        self.combine = sys.modules.get("vllm_gaudi.ops.hpu_moe_combine")
        self.method = object.__new__(self.fp8.HPUFp8MoEMethod)
        self.method.has_moe_quant_config = False
        self.method.use_dispatch_fn = False


# ---------------------------------------------------------------- layers and the reference
def _quant_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = w.abs().amax(dim=-1) / FP8_MAX
    return (w / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale.float()


class StockOp:
    """Stands in for the fused op: records calls and returns the dense reference."""

    def __init__(self, layer: Any, experts_min: int, experts_max: int, dq: Any) -> None:
        self.layer, self.experts_min, self.experts_max, self.dq = layer, experts_min, experts_max, dq
        self.w13_input_scale = None
        self.calls = 0
        self.returns_reference = True
        self.output_scale = 1.0  # != 1: a stock result that differs from the gathered one (VERIFY's numbers)

    def __call__(
        self,
        x: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        permuted_weights: bool,
        activation: str,
    ) -> torch.Tensor:
        self.calls += 1
        # HPUFp8MoEMethod hands the fused op each expert's weights as [out, in] (w13 [2I, H], w2 [H, I]);
        # permuted_weights=True tells mixture_of_experts so (v0.26.0's apply_monolithic passes it). With
        # False the op reads the same memory in the other layout, which this stand-in does not model.
        if permuted_weights is not True:
            raise ValueError(f"stock MoE op called with permuted_weights={permuted_weights!r} for [out, in] weights")
        if not self.returns_reference:
            return torch.zeros_like(x)
        ref = reference(self.layer, x, topk_ids, topk_weights, self.dq) * self.output_scale
        return ref.to(x.dtype)


def make_layer(
    ld: Loaded,
    e_local: int,
    hidden: int,
    inter: int,
    top_k: int,
    ep_rank: int,
    seed: int,
    op_class: str = "VllmMixtureOfExpertsOpFP8PerChannel",
) -> Any:
    gen = torch.Generator().manual_seed(seed)
    w13, s13 = _quant_rows(torch.randn(e_local, 2 * inter, hidden, generator=gen) * 0.2)
    w2, s2 = _quant_rows(torch.randn(e_local, hidden, inter, generator=gen) * 0.2)
    layer = types.SimpleNamespace(
        w13_weight=w13,
        w2_weight=w2,
        w13_weight_scale_inv=s13,
        w2_weight_scale_inv=s2,
        top_k=top_k,
        activation="silu",
        use_grouped_topk=False,
        custom_routing_function=None,
        local_num_experts=e_local,
        moe_config=types.SimpleNamespace(is_sequence_parallel=False, dp_size=1, ep_rank=ep_rank),
    )
    op_type = type("RecordingStockOp", (StockOp, getattr(ld.ext_ops, op_class)), {})
    layer.moe_op = op_type(layer, ep_rank * e_local, ep_rank * e_local + e_local - 1, ld.dynamic_quant)
    return layer


def reference(layer: Any, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, dq: Any) -> torch.Tensor:
    """Dense MoE, one (token, slot) at a time, float64, dequantized weights."""
    x_fp8, x_scale = dq(x)
    xd = x_fp8.double() * x_scale.double()
    w13 = layer.w13_weight.double() * layer.w13_weight_scale_inv.double().unsqueeze(-1)
    w2 = layer.w2_weight.double() * layer.w2_weight_scale_inv.double().unsqueeze(-1)
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(topk_ids.shape[1]):
            e = int(topk_ids[t, k]) - layer.moe_op.experts_min
            if 0 <= e < w13.shape[0]:
                h = w13[e] @ xd[t]
                act = torch.nn.functional.silu(h[:inter]) * h[inter:]
                out[t] += float(topk_weights[t, k]) * (w2[e] @ act)
    return out


def routing(logits: torch.Tensor, top_k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.softmax(logits, dim=1, dtype=torch.float32)
    w, ids = torch.topk(w, top_k, dim=-1)
    return ids, (w / w.sum(dim=-1, keepdim=True)).to(dtype)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|; when every routed expert is on another EP rank the reference is
    exactly zero, and so must the output be (the absolute error is returned)."""
    scale = float(ref.abs().max())
    return float((out.double() - ref).abs().max()) / (scale if scale > 0 else 1.0)


def run_apply(
    ld: Loaded, layer: Any, tokens: int, num_global: int, seed: int, dtype: torch.dtype = torch.float32
) -> tuple[bool, float]:
    """(gathered?, error vs reference) for one apply_monolithic call through the real dispatch."""
    gen = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(tokens, layer.w13_weight.shape[2], generator=gen).to(dtype)
    logits = torch.randn(tokens, num_global, generator=gen)
    ids, w = routing(logits, layer.top_k, dtype)
    calls = layer.moe_op.calls
    out = ld.method.apply_monolithic(layer, x, logits)
    gathered = layer.moe_op.calls == calls
    # The MoE output goes back into the model's residual stream: it keeps x's dtype and shape.
    assert out.dtype == dtype and out.shape == x.shape, f"MoE output {out.dtype} {tuple(out.shape)} for x {dtype}"
    return gathered, rel_error(out, reference(layer, x, ids, w, ld.dynamic_quant))


# ---------------------------------------------------------------- the checks
def _verify_logs(info: mock.MagicMock) -> list[tuple]:
    return [c.args for c in info.call_args_list if "MoE gather verify" in str(c.args[0])]


def check_verify(ld: Loaded, e_local: int, k: int, n_global: int, info: mock.MagicMock) -> None:
    """VLLM_HPU_MOE_GATHER_VERIFY: both paths run, the gathered result comes back, the log says what it says."""
    layer = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    x = torch.randn(2, HIDDEN)
    logits = torch.randn(2, n_global)
    out = ld.method.apply_monolithic(layer, x, logits)
    direct = ld.combine.gather_silu_fp8_moe(layer, x, *routing(logits, k, x.dtype))
    assert layer.moe_op.calls == 1, "VERIFY must also run the stock op"
    assert torch.equal(out, direct), "VERIFY must return the gathered result"
    logged = _verify_logs(info)
    assert len(logged) == 1 and logged[0][1] == 2 and logged[0][3] <= TOL_FP32, f"VERIFY log: {logged}"
    # Only a new worst difference per token count is logged: the same call again logs nothing.
    ld.method.apply_monolithic(layer, x, logits)
    assert _verify_logs(info) == logged, f"VERIFY logged a difference no worse than the last one again: {info}"
    # A stock result twice the gathered one, at 3 tokens: the log gives the token count, the largest
    # |gathered - stock| and that error as a fraction of max |stock| (about 0.5 here, against about
    # 1.0 had it been divided by max |gathered|).
    layer.moe_op.output_scale = 2.0
    x = torch.randn(3, HIDDEN)
    logits = torch.randn(3, n_global)
    gathered = ld.method.apply_monolithic(layer, x, logits)
    stock = 2.0 * reference(layer, x, *routing(logits, k, x.dtype), ld.dynamic_quant)
    stock = stock.to(x.dtype).float()
    error = float((gathered.float() - stock).abs().max())
    relative = error / float(stock.abs().max())
    entry = _verify_logs(info)[-1]
    assert entry[1] == 3 and math.isclose(entry[2], error, rel_tol=1e-6), f"VERIFY log {entry}, error {error:.3e}"
    assert math.isclose(entry[3], relative, rel_tol=1e-6), f"VERIFY log {entry}: relative should be {relative:.3e}"


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None, "needs --vllm-gaudi"
    assert trees.vllm is not None, "needs --vllm (vllm/logger.py)"
    tree, vllm_tree = trees.vllm_gaudi, trees.vllm
    e_local, k, n_global = 64, 8, 256  # EP 4: 64 of the 256 experts on this card, top-8

    # 1. The gathered path exists and the ratio rule cuts at 8/9 tokens for ratio 1.0.
    ld = Loaded(tree, vllm_tree, {"VLLM_HPU_MOE_GATHER": "1"})
    layer = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    gathered, err = run_apply(ld, layer, 1, n_global, seed=1)
    assert gathered, (
        "feature absent: with VLLM_HPU_MOE_GATHER=1, HPUFp8MoEMethod.apply_monolithic ran the stock "
        "fused MoE op for 1 decode token (top-8, 64 local experts); there is no gathered-expert path "
        "(vllm_gaudi/ops/hpu_moe_combine.py does not exist in this tree)"
    )
    assert ld.combine is not None, "vllm_gaudi/ops/hpu_moe_combine.py was not imported"
    for tokens in range(1, 9):
        gathered, err = run_apply(ld, layer, tokens, n_global, seed=tokens)
        assert gathered, f"ratio 1.0: {tokens} tokens x top-{k} <= 64 local experts should gather"
        assert err <= TOL_FP32, f"gathered MoE differs from the dense reference at {tokens} tokens: {err:.2e}"
    for tokens in (9, 16):
        gathered, err = run_apply(ld, layer, tokens, n_global, seed=tokens)
        assert not gathered, f"ratio 1.0: {tokens} tokens x top-{k} > 64 local experts must run the stock op"
        assert err <= TOL_FP32
    for ep_rank in (0, 3):
        other = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=ep_rank, seed=10 + ep_rank)
        for tokens in (1, 5, 8):
            gathered, err = run_apply(ld, other, tokens, n_global, seed=20 + tokens)
            assert gathered and err <= TOL_FP32, f"EP rank {ep_rank}, {tokens} tokens: {gathered} {err:.2e}"
    for tokens in (1, 8):
        gathered, err = run_apply(ld, layer, tokens, n_global, seed=40 + tokens, dtype=torch.bfloat16)
        assert gathered and err <= TOL_BF16, f"bf16 input, {tokens} tokens: {gathered} {err:.2e}"
    # Top-1 routing (one expert per token): 1 token x 1 <= 64 gathers like any other count. Routed over
    # 64 experts on EP rank 0, so every token's expert is local and the reference is not all zero.
    top1 = make_layer(ld, e_local, HIDDEN, INTER, 1, ep_rank=0, seed=5)
    for tokens in (1, 3):
        gathered, err = run_apply(ld, top1, tokens, e_local, seed=50 + tokens)
        assert gathered and err <= TOL_FP32, f"top-1, {tokens} tokens: {gathered} {err:.2e}"
    # An empty batch stays on the stock op: the gathered path would build a zero-size topk, GEMM and
    # bmm (g = 0) that have never run on a Gaudi.
    calls = layer.moe_op.calls
    out = ld.method.apply_monolithic(layer, torch.randn(0, HIDDEN), torch.randn(0, n_global))
    assert layer.moe_op.calls == calls + 1, "0 tokens: the stock op must run, not the gathered path"
    assert out.shape == (0, HIDDEN)

    # "true" (any case) turns the path on like "1", as envs.py reads its other boolean switches.
    ld = Loaded(tree, vllm_tree, {"VLLM_HPU_MOE_GATHER": "true", "VLLM_HPU_MOE_GATHER_RATIO": "0.5"})
    layer = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    assert run_apply(ld, layer, 4, n_global, seed=4)[0], "ratio 0.5: 4 tokens x 8 <= 32 should gather"
    assert not run_apply(ld, layer, 5, n_global, seed=5)[0], "ratio 0.5: 5 tokens x 8 > 32 must run the stock op"
    ld = Loaded(tree, vllm_tree, {"VLLM_HPU_MOE_GATHER": "1", "VLLM_HPU_MOE_GATHER_RATIO": "2.0"})
    small = make_layer(ld, 16, HIDDEN, INTER, 4, ep_rank=0, seed=3)
    gathered, err = run_apply(ld, small, 8, 16, seed=8)  # 8 x 4 = 32 > 16 local: g = all 16 experts
    assert gathered and err <= TOL_FP32, f"ratio 2.0, g clamped to E_local: {gathered} {err:.2e}"

    # 2. Default off: with the env unset (or 0) every call runs the stock op.
    for env in ({}, {"VLLM_HPU_MOE_GATHER": "0"}, {"VLLM_HPU_MOE_GATHER_VERIFY": "1"}):
        ld = Loaded(tree, vllm_tree, env)
        layer = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
        for tokens in (1, 8):
            gathered, err = run_apply(ld, layer, tokens, n_global, seed=tokens)
            assert not gathered and err <= TOL_FP32, f"env {env}: {tokens} tokens did not run the stock op"
        assert layer.moe_op.calls == 2

    # 3. Layouts the gathered path does not read fall back to the stock op.
    ld = Loaded(tree, vllm_tree, {"VLLM_HPU_MOE_GATHER": "1"})
    refused = {}
    per_tensor = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    per_tensor.w13_weight_scale = per_tensor.w13_weight_scale_inv[:, :2]
    per_tensor.w2_weight_scale = per_tensor.w2_weight_scale_inv[:, :1]
    del per_tensor.w13_weight_scale_inv, per_tensor.w2_weight_scale_inv
    refused["per-tensor scales (w13_weight_scale)"] = per_tensor
    block = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    block.w13_weight_scale_inv = torch.ones(e_local, 2, 2)
    block.w2_weight_scale_inv = torch.ones(e_local, 2, 1)
    refused["block scales"] = block
    block_op = "VllmMixtureOfExpertsOpFP8"
    refused["block op"] = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0, op_class=block_op)
    static = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    static.moe_op.w13_input_scale = torch.tensor(0.05)
    refused["static input scale"] = static
    gelu = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    gelu.activation = "gelu"
    refused["gelu activation"] = gelu
    for what, bad in refused.items():
        bad.moe_op.returns_reference = False
        calls = bad.moe_op.calls
        x = torch.randn(1, HIDDEN)
        ld.method.apply_monolithic(bad, x, torch.randn(1, n_global))
        assert bad.moe_op.calls == calls + 1, f"{what}: the gathered path must not run, the stock op must"

    # 4. VERIFY runs both and logs the difference; the gathered result is returned. Both spellings.
    for on in (
        {"VLLM_HPU_MOE_GATHER": "1", "VLLM_HPU_MOE_GATHER_VERIFY": "1"},
        {"VLLM_HPU_MOE_GATHER": "True", "VLLM_HPU_MOE_GATHER_VERIFY": "true"},
    ):
        ld = Loaded(tree, vllm_tree, on)
        with mock.patch.object(ld.fp8.logger, "info") as info:
            check_verify(ld, e_local, k, n_global, info)

    # 5. The comparison detects wrong expert orderings (O(1) error, far above the tolerance).
    ld = Loaded(tree, vllm_tree, {"VLLM_HPU_MOE_GATHER": "1"})
    layer = make_layer(ld, e_local, HIDDEN, INTER, k, ep_rank=1, seed=0)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, HIDDEN, generator=gen)
    ids, w = routing(torch.randn(4, n_global, generator=gen), k, x.dtype)
    ids[:, 0] = 64 + torch.tensor([3, 3, 9, 40])  # make sure several local experts are hit
    ref = reference(layer, x, ids, w, ld.dynamic_quant)
    good = rel_error(ld.combine.gather_silu_fp8_moe(layer, x, ids, w), ref)
    assert good <= TOL_FP32, f"gathered MoE differs from the dense reference: {good:.2e}"
    wrong = {}
    rolled = types.SimpleNamespace(**vars(layer))
    rolled.w13_weight = layer.w13_weight.roll(1, dims=0)
    rolled.w13_weight_scale_inv = layer.w13_weight_scale_inv.roll(1, dims=0)
    wrong["w13 experts rolled by one"] = rel_error(ld.combine.gather_silu_fp8_moe(rolled, x, ids, w), ref)
    swapped = types.SimpleNamespace(**vars(layer))
    swapped.w13_weight = layer.w13_weight.roll(INTER, dims=1)
    swapped.w13_weight_scale_inv = layer.w13_weight_scale_inv.roll(INTER, dims=1)
    wrong["gate/up halves swapped"] = rel_error(ld.combine.gather_silu_fp8_moe(swapped, x, ids, w), ref)
    _GEMM.update(interleave_columns=True, inter=INTER)
    try:
        wrong["GEMM columns expert-interleaved"] = rel_error(ld.combine.gather_silu_fp8_moe(layer, x, ids, w), ref)
    finally:
        _GEMM["interleave_columns"] = False
    for what, err in wrong.items():
        if not err > 100 * TOL_FP32:
            raise RuntimeError(f"proof cannot discriminate: {what} gives only {err:.2e} error")
