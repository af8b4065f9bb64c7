"""rope-cpu-cache: RoPE cos/sin tables must be computed on the CPU, then moved to the device.

vLLM builds the model under ``with torch.device(<device>)`` (model_loader/base_loader.py), so every
``_compute_cos_sin_cache`` runs its arange/einsum/cos/sin on the default device: on Gaudi the HPU,
whose fp32 trig is wrong for large arguments. This proof imports the tree's real
``vllm.model_executor.layers.rotary_embedding`` package and the plugin's real
``vllm_gaudi/ops/hpu_rotary_embedding.py`` (only vLLM's ``CustomOp`` and unrelated imports are
stand-ins), then builds RoPE modules under ``torch.device("meta")``, the stand-in for
``torch.device("hpu")``: a CPU-only torch has no HPU, and a meta tensor holds no values, so any
trig evaluated there is visibly not CPU-computed. It checks that every RoPE variant evaluates its
cos/sin on the CPU, that the table ends up on the default device, and that the table moved there
(Qwen3.5's interleaved mrope, rotary_dim 64 of head 256, theta 1e7, 262,144 rows) equals a CPU
build bit for bit and an fp64 reference at positions 196,608-262,143 to fp32 accuracy.
The inaccuracy of Gaudi's own fp32 cos/sin cannot be shown without a Gaudi.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from fixpack.proofkit import stub_modules

_TRIG = {torch.cos, torch.sin, torch.Tensor.cos, torch.Tensor.sin}


class _Recorder(TorchFunctionMode):
    """Records where cos/sin run and which CPU tensors are moved onto the meta device."""

    def __init__(self) -> None:
        super().__init__()
        self.trig_devices: list[str] = []
        self.moved: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _TRIG and isinstance(out, torch.Tensor):
            self.trig_devices.append(out.device.type)
        if (
            func is torch.Tensor.to
            and isinstance(out, torch.Tensor)
            and out.device.type == "meta"
            and args[0].device.type == "cpu"
        ):
            self.moved.append(args[0])
        return out


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
    """Small instances of every RoPE class the HPU plugin can be given by get_rope()."""
    bf16 = torch.bfloat16
    a = (64, 32, 4096, 10000.0, True)  # head_size, rotary_dim, max_position, base, neox
    return {
        "HPURotaryEmbedding": lambda: hpu.HPURotaryEmbedding(*a, bf16),
        "HPULinearScalingRotaryEmbedding": lambda: hpu.HPULinearScalingRotaryEmbedding(*a, [1.0, 2.0], bf16),
        "HPUDynamicNTKScalingRotaryEmbedding": lambda: hpu.HPUDynamicNTKScalingRotaryEmbedding(
            64, 32, 4096, 2048, 10000.0, True, 2.0, bf16
        ),
        "HPUYaRNScalingRotaryEmbedding": lambda: hpu.HPUYaRNScalingRotaryEmbedding(*a, 2.0, bf16),
        "HPUDeepseekScalingRotaryEmbedding": lambda: hpu.HPUDeepseekScalingRotaryEmbedding(*a, 2.0, bf16),
        "HPULlama3RotaryEmbedding": lambda: hpu.HPULlama3RotaryEmbedding(*a, bf16, 8.0, 1.0, 4.0, 2048),
        "HPUPhi3LongRoPEScaledRotaryEmbedding": lambda: hpu.HPUPhi3LongRoPEScaledRotaryEmbedding(
            64, 32, 8192, 4096, 10000.0, True, bf16, [1.0] * 16, [2.0] * 16
        ),
        "HPULlama4VisionRotaryEmbedding": lambda: hpu.HPULlama4VisionRotaryEmbedding(
            88, 88, 576, 10000.0, False, bf16
        ),
        "HPUMRotaryEmbedding(yarn)": lambda: hpu.HPUMRotaryEmbedding(
            *a, bf16, mrope_section=[6, 5, 5], scaling_factor=2.0
        ),
        "Gemma4RotaryEmbedding": lambda: rope.Gemma4RotaryEmbedding(*a, bf16),
        "NTKScalingRotaryEmbedding": lambda: rope.NTKScalingRotaryEmbedding(*a, 2.0, bf16),
        "DynamicNTKAlphaRotaryEmbedding": lambda: rope.DynamicNTKAlphaRotaryEmbedding(*a, 2.0, bf16),
        "XDRotaryEmbedding": lambda: rope.XDRotaryEmbedding(*a, 2.0, bf16, xdrope_section=[4, 4, 4, 4]),
        "TeleChat3RoPEScaledRotaryEmbedding": lambda: rope.TeleChat3RoPEScaledRotaryEmbedding(*a, 2.0, bf16),
        "DeepseekV4ScalingRotaryEmbedding": lambda: rope.DeepseekV4ScalingRotaryEmbedding(*a, 2.0, bf16),
        "MRotaryEmbeddingInterleaved": lambda: rope.MRotaryEmbeddingInterleaved(
            *a, bf16, mrope_section=[6, 5, 5]
        ),
    }


def _tables(module: nn.Module) -> list[torch.Tensor]:
    return [b for n, b in module.named_buffers() if n in ("cos_sin_cache", "long_short_cos_sin_cache")]


def _fp64_reference(rotary_dim: int, base: float, positions: torch.Tensor) -> torch.Tensor:
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def check(trees: Any) -> None:
    rope, hpu = _import_trees(trees)
    problems: list[str] = []

    # 1. Every variant: cos/sin evaluated on the CPU, table left on the default device.
    for name, build in _variants(rope, hpu).items():
        with torch.device("meta"), _Recorder() as rec:
            module = build()
        where = sorted(set(rec.trig_devices))
        if where != ["cpu"]:
            problems.append(f"{name}: cos/sin evaluated on {where} (the model-load default device), not the CPU")
        devices = sorted({t.device.type for t in _tables(module)})
        if devices != ["meta"]:
            problems.append(f"{name}: table on {devices}, expected on the default device (meta)")
    if problems:
        head = "RoPE tables are not computed on the CPU and moved to the default device:"
        raise AssertionError(head + "\n  " + "\n  ".join(problems))

    # 2. Qwen3.5 (interleaved mrope, partial rotary 0.25 of head 256, theta 1e7): the table that is
    # moved onto the device, at positions past 196K. mrope caches 4 * max_position rows.
    kwargs: dict[str, Any] = {"mrope_section": [11, 11, 10], "mrope_interleaved": True}
    args = (256, 64, 65536, 1e7, True, torch.bfloat16)
    with torch.device("meta"), _Recorder() as rec:
        module = hpu.HPUMRotaryEmbedding(*args, **kwargs)
    rows = 4 * 65536
    assert module.cos_sin_cache.device.type == "meta" and tuple(module.cos_sin_cache.shape) == (rows, 64)
    moved = [t for t in rec.moved if tuple(t.shape) == (rows, 64)]
    assert moved, "Qwen3.5 mrope: no CPU-computed table was moved onto the device"
    table = moved[0]
    cpu_build = hpu.HPUMRotaryEmbedding(*args, **kwargs)  # the same code with the CPU as default device
    assert torch.equal(table.to(torch.bfloat16), cpu_build.cos_sin_cache), "table differs from a CPU build"
    positions = torch.arange(196608, rows)
    ref = _fp64_reference(64, 1e7, positions)
    err = (table[positions].to(torch.float64) - ref).abs()
    # Pair 0 has inv_freq == 1, so its angle is the exact position: only the trig itself can be off
    # (the device defect would show here first).
    exact = max(err[:, 0].max().item(), err[:, 32].max().item())
    assert exact <= 1e-6, f"Qwen3.5 table, pair 0, positions >= 196608: cos/sin off from fp64 by {exact:.3e}"
    # The other pairs carry fp32 rounding of inv_freq and of t * inv_freq (2**-24 relative each),
    # so their angle is off by at most about t * 2**-23 (inherent to the fp32 HF/vLLM table).
    bound = rows * 2.0**-23
    worst = err.max().item()
    assert worst <= bound, f"Qwen3.5 table, positions >= 196608: off from fp64 by {worst:.3e} > {bound:.3e}"
