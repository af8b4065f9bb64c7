"""rope-cpu-cache: the RoPE cos/sin tables a model built for the HPU uses must be accurate.

vLLM builds the model under ``with torch.device(<device>)`` (model_loader/base_loader.py), so every
``_compute_cos_sin_cache`` runs its arange/einsum/cos/sin on the default device: on Gaudi the HPU,
whose fp32 cos/sin are wrong for large arguments (from about 1.5e5). This proof imports the tree's
real ``vllm.model_executor.layers.rotary_embedding`` package and the plugin's real
``vllm_gaudi/ops/hpu_rotary_embedding.py`` (only vLLM's ``CustomOp`` and unrelated imports are
stand-ins) and builds RoPE modules with an emulated HPU as the default device.

The emulated HPU (a CPU-only torch has none): ``_EmulatedHpu`` is a ``DeviceContext`` (what
``with torch.device(...)`` pushes) for ``hpu:0``, so ``torch.get_default_device()`` is ``hpu:0``;
factory functions it sees (no device, or an hpu device) and ``Tensor.to(hpu)`` make CPU tensors of
the subclass ``_OnHpu``, which stands for a tensor on the HPU; ops on them give ``_OnHpu`` tensors;
``.cpu()`` / ``.to("cpu")`` give plain CPU tensors. cos/sin of an ``_OnHpu`` tensor emulate Gaudi's
fp32 trig: where ``|x| >= 1.5e5`` the argument is reduced in fp32 (``x - round(x / 2pi) * 2pi``,
every step rounded to fp32, 2pi itself as an fp32 constant) and cos/sin of the reduced argument
are returned, so the error grows with ``|x|`` (about 1e-2 at 2.6e5); below that they are the CPU's
fp32 results. This is an emulation of the reported defect, not Gaudi's algorithm.

Checked, for what the model will use: every RoPE variant built on the emulated HPU has its table on
the HPU (``_OnHpu``) and equal (max abs difference <= 1e-6) to the same module built on the CPU,
the plain variants at 163,840 positions, and Phi3LongRoPE (not a RotaryEmbeddingBase, patched
on its own) with a 163,840-row long cache whose pair 0 angle is the position; and Qwen3.5's table
(interleaved mrope, rotary_dim 64 of head 256, theta 1e7, 4 * 65,536 rows) is within 1e-5 of an
fp64 reference for pair 0 (angle = the position) at positions 196,608-262,143, and within the fp32
angle-rounding bound elsewhere. Any fix that gives the HPU model a CPU-accurate table passes,
however it decides to compute on the CPU. Whether Gaudi's real fp32 trig is wrong exactly this way needs a Gaudi.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._device import DeviceContext, _device_constructors

from fixpack.proofkit import stub_modules

MAX_POSITION = 163840  # angles of the inv_freq == 1 pair reach 163,839 > 1.5e5
# Four pairs: pair 0 (inv_freq == 1, angle == position) is where the HPU trig goes wrong; more
# pairs would only multiply the work (tables of up to 491,520 rows).
ROTARY_DIM = 8
PAIRS = ROTARY_DIM // 2
HPU_TRIG_EXACT_BELOW = 1.5e5
_TWO_PI_FP32 = torch.tensor(2 * math.pi, dtype=torch.float32)
_TRIG = {torch.cos: "cos", torch.sin: "sin", torch.Tensor.cos: "cos", torch.Tensor.sin: "sin"}


def _hpu_fp32_trig(name: str, x: torch.Tensor) -> torch.Tensor:
    """Gaudi-like fp32 cos/sin: exact below the threshold, fp32 argument reduction above it."""
    exact = getattr(torch, name)(x)
    x32 = x.to(torch.float32)
    k = torch.round(x32 / _TWO_PI_FP32)
    reduced = x32 - k * _TWO_PI_FP32  # each op rounds to fp32: the reduction loses accuracy as |x| grows
    wrong = getattr(torch, name)(reduced.to(torch.float64)).to(x.dtype)
    return torch.where(x.abs() >= HPU_TRIG_EXACT_BELOW, wrong, exact)


class _OnHpu(torch.Tensor):
    """A CPU tensor standing for a tensor on the emulated HPU."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _TRIG:
            with torch._C.DisableTorchFunctionSubclass():
                return _hpu_fp32_trig(_TRIG[func], args[0]).as_subclass(cls)
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and _target_device(args[1:], kwargs) == "cpu"):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def _target_device(args: Any, kwargs: dict) -> str | None:
    for value in (*args, kwargs.get("device")):
        if isinstance(value, (str, torch.device)):
            return torch.device(value).type
    return None


class _EmulatedHpu(DeviceContext):
    """``with torch.device("hpu")`` on a CPU-only torch: see the module docstring."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.device = torch.device("hpu", 0)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in _device_constructors() and _target_device((), kwargs) in (None, "hpu"):
            kwargs["device"] = "cpu"
            return func(*args, **kwargs).as_subclass(_OnHpu)
        if func is torch.Tensor.to and _target_device(args[1:], kwargs) == "hpu":
            args = tuple("cpu" if _target_device((a,), {}) == "hpu" else a for a in args)
            if "device" in kwargs:
                kwargs["device"] = "cpu"
            return func(*args, **kwargs).as_subclass(_OnHpu)
        return func(*args, **kwargs)


def _custom_op_module() -> types.ModuleType:
    """A stand-in for vllm.model_executor.custom_op: a plain nn.Module base, never enabled."""

    class CustomOp(nn.Module):
        def __init__(self, *, enforce_enable: bool = False, compile_native: bool = False) -> None:
            super().__init__()

        def enabled(self) -> bool:
            return False

        @classmethod
        def register(cls, name: str) -> Any:
            return lambda op_cls: op_cls

        @classmethod
        def register_oot(cls, _decorated_layer_cls: Any = None, name: str | None = None) -> Any:
            if _decorated_layer_cls is None:
                return lambda op_cls: op_cls
            return _decorated_layer_cls

    mod = types.ModuleType("vllm.model_executor.custom_op")
    mod.CustomOp = CustomOp  # type: ignore[attr-defined]
    return mod


def _package(name: str, path: Path) -> None:
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)]  # type: ignore[attr-defined]
    sys.modules[name] = mod


def _import_trees(trees: Any) -> tuple[Any, Any]:
    vllm_root = trees.vllm / "vllm"
    _package("vllm", vllm_root)
    _package("vllm.model_executor", vllm_root / "model_executor")
    _package("vllm.model_executor.layers", vllm_root / "model_executor" / "layers")
    sys.modules["vllm.model_executor.custom_op"] = _custom_op_module()
    stub_modules(
        "vllm._aiter_ops",
        "vllm.config",
        "vllm.logger",
        "vllm.platforms",
        "vllm.distributed",
        "vllm.triton_utils",
        "vllm.utils.flashinfer",
        "vllm.utils.torch_utils",
    )
    platform = sys.modules["vllm.platforms"].current_platform
    platform.is_cpu.return_value = False
    platform.is_cuda.return_value = False
    sys.modules["vllm.utils.flashinfer"].has_flashinfer.return_value = False
    vllm_config = sys.modules["vllm.config"].get_current_vllm_config.return_value
    vllm_config.model_config.max_model_len = 8192
    rope = importlib.import_module("vllm.model_executor.layers.rotary_embedding")

    gaudi_root = trees.vllm_gaudi / "vllm_gaudi"
    _package("vllm_gaudi", gaudi_root)
    _package("vllm_gaudi.ops", gaudi_root / "ops")
    hpu_rope = importlib.import_module("vllm_gaudi.ops.hpu_rotary_embedding")
    return rope, hpu_rope


def _variants(rope: Any, hpu: Any) -> dict[str, Any]:
    """Instances of every RoPE class the HPU plugin can be given by get_rope(), fp32 tables (the
    model casts them to its dtype afterwards); the plain ones reach angles past the HPU threshold."""
    bf16 = torch.float32  # the table dtype
    a = (64, ROTARY_DIM, MAX_POSITION, 10000.0, True)  # head_size, rotary_dim, max_position, base, neox
    return {
        "HPURotaryEmbedding": lambda: hpu.HPURotaryEmbedding(*a, bf16),
        "HPULinearScalingRotaryEmbedding": lambda: hpu.HPULinearScalingRotaryEmbedding(*a, [1.0, 2.0], bf16),
        "HPUDynamicNTKScalingRotaryEmbedding": lambda: hpu.HPUDynamicNTKScalingRotaryEmbedding(
            64, 32, 4096, 2048, 10000.0, True, 2.0, bf16
        ),
        "HPUYaRNScalingRotaryEmbedding": lambda: hpu.HPUYaRNScalingRotaryEmbedding(*a, 2.0, bf16),
        "HPUDeepseekScalingRotaryEmbedding": lambda: hpu.HPUDeepseekScalingRotaryEmbedding(*a, 2.0, bf16),
        "HPULlama3RotaryEmbedding": lambda: hpu.HPULlama3RotaryEmbedding(*a, bf16, 8.0, 1.0, 4.0, 2048),
        # Phi3LongRoPE is not a RotaryEmbeddingBase: its table is the short cache (4096 rows) and then
        # the long cache (max_position rows, long_factor[0] == 1.0 as in Phi-3's configs, so pair 0's
        # angle is the position), which reaches past the HPU threshold as the plain variants do.
        "HPUPhi3LongRoPEScaledRotaryEmbedding": lambda: hpu.HPUPhi3LongRoPEScaledRotaryEmbedding(
            64, ROTARY_DIM, MAX_POSITION, 4096, 10000.0, True, bf16, [1.0] * PAIRS, [1.0] + [2.0] * (PAIRS - 1)
        ),
        "HPULlama4VisionRotaryEmbedding": lambda: hpu.HPULlama4VisionRotaryEmbedding(88, 88, 576, 10000.0, False, bf16),
        # mrope caches 4 * max_position rows (angles up to that, pair 0), yarn twice that: a quarter
        # of MAX_POSITION still reaches past the threshold, with a quarter of the table to build.
        "HPUMRotaryEmbedding(yarn)": lambda: hpu.HPUMRotaryEmbedding(
            64, ROTARY_DIM, MAX_POSITION // 4, 10000.0, True, bf16, mrope_section=[2, 1, 1], scaling_factor=2.0
        ),
        # Gemma4's table is head_size wide (it rotates every dimension): a small head keeps pair 0.
        "Gemma4RotaryEmbedding": lambda: rope.Gemma4RotaryEmbedding(16, ROTARY_DIM, MAX_POSITION, 10000.0, True, bf16),
        # NTK divides inv_freq by 2 ** (2 / rotary_dim): its pair 0 passes 1.5e5 only after 178,380 positions.
        "NTKScalingRotaryEmbedding": lambda: rope.NTKScalingRotaryEmbedding(
            64, ROTARY_DIM, 196608, 10000.0, True, 2.0, bf16
        ),
        "DynamicNTKAlphaRotaryEmbedding": lambda: rope.DynamicNTKAlphaRotaryEmbedding(*a, 2.0, bf16),
        "XDRotaryEmbedding": lambda: rope.XDRotaryEmbedding(*a, 2.0, bf16, xdrope_section=[1, 1, 1, 1]),
        "TeleChat3RoPEScaledRotaryEmbedding": lambda: rope.TeleChat3RoPEScaledRotaryEmbedding(*a, 2.0, bf16),
        "DeepseekV4ScalingRotaryEmbedding": lambda: rope.DeepseekV4ScalingRotaryEmbedding(*a, 2.0, bf16),
        "MRotaryEmbeddingInterleaved": lambda: rope.MRotaryEmbeddingInterleaved(
            64, ROTARY_DIM, MAX_POSITION // 4, 10000.0, True, bf16, mrope_section=[2, 1, 1]
        ),
    }


def _tables(module: nn.Module) -> list[torch.Tensor]:
    return [b for n, b in module.named_buffers() if n in ("cos_sin_cache", "long_short_cos_sin_cache")]


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor)


def _fp64_reference(rotary_dim: int, base: float, positions: torch.Tensor) -> torch.Tensor:
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def check(trees: Any) -> None:
    rope, hpu = _import_trees(trees)
    problems: list[str] = []

    # 1. Every variant: the table built with the HPU as default device is on the HPU and equals the
    #    table of the same module built on the CPU.
    for name, build in _variants(rope, hpu).items():
        with _EmulatedHpu():
            module = build()
        cpu_module = build()
        for table, cpu_table in zip(_tables(module), _tables(cpu_module), strict=True):
            if not isinstance(table, _OnHpu):
                problems.append(f"{name}: table left on the CPU, not on the default device (the HPU)")
                continue
            diff = (_plain(table).double() - cpu_table.double()).abs()
            if diff.max().item() > 1e-6:
                rows = diff.amax(dim=-1).nonzero().flatten()
                problems.append(
                    f"{name}: the HPU model's table is off from the CPU table by up to "
                    f"{diff.max().item():.3e} (rows {rows.min().item()} to {rows.max().item()})"
                )

    # 2. Qwen3.5 (interleaved mrope, partial rotary 0.25 of head 256, theta 1e7) against fp64, at
    #    positions past 196K. mrope caches 4 * max_position rows.
    kwargs: dict[str, Any] = {"mrope_section": [11, 11, 10], "mrope_interleaved": True}
    with _EmulatedHpu():
        module = hpu.HPUMRotaryEmbedding(256, 64, 65536, 1e7, True, torch.float32, **kwargs)
    rows = 4 * 65536
    table = _plain(module.cos_sin_cache)
    assert tuple(table.shape) == (rows, 64), f"Qwen3.5 table shape {tuple(table.shape)}"
    positions = torch.arange(196608, rows)
    err = (table[positions].to(torch.float64) - _fp64_reference(64, 1e7, positions)).abs()
    # Pair 0 has inv_freq == 1, so its angle is the exact position: only the trig itself can be off.
    exact = max(err[:, 0].max().item(), err[:, 32].max().item())
    if exact > 1e-5:
        problems.append(f"Qwen3.5 table, pair 0, positions >= 196608: cos/sin off from fp64 by {exact:.3e}")
    # The other pairs carry fp32 rounding of inv_freq and of t * inv_freq (2**-24 relative each),
    # so their angle is off by at most about t * 2**-23 (inherent to the fp32 HF/vLLM table).
    bound = rows * 2.0**-23
    worst = err.max().item()
    if worst > bound:
        problems.append(f"Qwen3.5 table, positions >= 196608: off from fp64 by {worst:.3e} > {bound:.3e}")

    # 3. The method keeps its signature: Phi3LongRoPE's _compute_cos_sin_cache(max_position_embeddings,
    #    rescale_factors, mscale) called with keywords, as a subclass or a model may call it, builds the
    #    same table as called with positions.
    #    Both with the HPU and with the CPU as the default device.
    for where, mode in (("HPU", _EmulatedHpu), ("CPU", contextlib.nullcontext)):
        with mode():
            phi3 = _variants(rope, hpu)["HPUPhi3LongRoPEScaledRotaryEmbedding"]()
            by_position = phi3._compute_cos_sin_cache(4096, [1.0] * PAIRS, 1.5)
            try:
                by_keyword = phi3._compute_cos_sin_cache(
                    max_position_embeddings=4096, rescale_factors=[1.0] * PAIRS, mscale=1.5
                )
            except TypeError as exc:
                problems.append(
                    f"{where} default device: Phi3LongRoPE _compute_cos_sin_cache called with keyword "
                    f"arguments fails: {exc}"
                )
                continue
        if not torch.equal(_plain(by_keyword), _plain(by_position)):
            problems.append(
                f"{where} default device: Phi3LongRoPE _compute_cos_sin_cache gives another table "
                "with keyword arguments"
            )

    if problems:
        raise AssertionError("RoPE tables of a model built on the HPU are not accurate:\n  " + "\n  ".join(problems))
