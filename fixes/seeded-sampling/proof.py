"""seeded-sampling: seeded rows must be drawn with CPU generators, not per-row on the device.

Runs on a CPU-only torch:
1. The statement of ``HPUModelRunner._update_states`` that creates a seeded request's generator
   (located by its ``SamplingType.RANDOM_SEED`` test), executed with ``self.device = hpu``: it must
   create a CPU generator seeded with the request's seed.
2. The ``random_sample`` that the HPU sampler (``TopKTopPSampler.forward_native``) calls: vLLM's own
   from ``topk_topp_sampler.py``, unless ``vllm_gaudi/patches.py`` installs a replacement (its real
   installer is run against a stand-in module). With probs on ``meta`` (the stand-in for the HPU), no
   generator may be used to draw in place on a device tensor (upstream's
   ``q[i].exponential_(generator=g)``, the lazy-mode segfault path). On the CPU, with the runner's
   generators, its noise and samples must equal vLLM's stock ``random_sample`` on the CPU bit for
   bit, for seeded and unseeded rows, in fp32 and fp64.
The segfault itself needs a Gaudi in lazy mode.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from fixpack.proofkit import load_function, load_source

_SEEDS = {1: 1234, 3: 42}
_ALL_SEEDS = {0: 7, 1: 1234, 2: 99, 3: 42}
_VOCAB = 151936


class _DeviceDraws(TorchFunctionMode):
    """Records in-place draws with an explicit generator on a non-CPU tensor (and skips them)."""

    def __init__(self) -> None:
        super().__init__()
        self.device_draws: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.exponential_ and kwargs.get("generator") is not None:
            if args[0].device.type != "cpu":
                self.device_draws.append(
                    f"exponential_(generator=<{kwargs['generator'].device}>) on a {args[0].device} tensor"
                )
                return args[0]
        return func(*args, **kwargs)


class _TorchForRunner:
    """torch for the runner's statement; a non-CPU torch.Generator cannot be made on this host."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def Generator(device: Any = "cpu") -> torch.Generator:  # noqa: N802 - mirrors torch.Generator
        dev = torch.device(device)
        if dev.type != "cpu":
            raise _DeviceGenerator(str(dev))
        return torch.Generator(device=dev)


class _DeviceGenerator(Exception):
    pass


def _runner_generator_statement(path: Path) -> ast.Module:
    source = load_source(path, "HPUModelRunner._update_states")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.If) or "SamplingType.RANDOM_SEED" not in ast.unparse(node.test):
            continue
        names = {t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
        if "generator" in names:
            return ast.Module(body=[node], type_ignores=[])
    raise LookupError("_update_states: no `if ... SamplingType.RANDOM_SEED:` that assigns `generator`")


def _runner_generator(statement: ast.Module, seed: int) -> torch.Generator:
    random_seed = object()
    ns: dict[str, Any] = {
        "torch": _TorchForRunner(),
        "SamplingType": types.SimpleNamespace(RANDOM_SEED=random_seed),
        "sampling_params": types.SimpleNamespace(sampling_type=random_seed, seed=seed),
        "self": types.SimpleNamespace(device=torch.device("hpu")),
    }
    exec(compile(statement, "hpu_model_runner.py:_update_states", "exec"), ns)
    return ns["generator"]


def _stock_module(vllm_tree: Path, recorded: list[torch.Tensor]) -> types.ModuleType:
    """vllm.v1.sample.ops.topk_topp_sampler with the tree's real noise helpers and random_sample."""
    path = vllm_tree / "vllm/v1/sample/ops/topk_topp_sampler.py"
    real_sample = load_function(path, "sample_with_exponential_noise", {"torch": torch})

    def sample_with_exponential_noise(probs: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        recorded.append(q.clone())
        return real_sample(probs, q)

    ns: dict[str, Any] = {"torch": torch, "sample_with_exponential_noise": sample_with_exponential_noise}
    ns["empty_exponential_noise_like"] = load_function(path, "empty_exponential_noise_like", ns)
    ns["random_sample"] = load_function(path, "random_sample", ns)
    mod = types.ModuleType("vllm.v1.sample.ops.topk_topp_sampler")
    for name in ("empty_exponential_noise_like", "sample_with_exponential_noise", "random_sample"):
        setattr(mod, name, ns[name])
    parent: types.ModuleType | None = None
    for name in ("vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.ops"):
        sys.modules[name] = types.ModuleType(name)
        if parent is not None:
            setattr(parent, name.rsplit(".", 1)[1], sys.modules[name])
        parent = sys.modules[name]
    sys.modules[mod.__name__] = mod
    assert parent is not None
    parent.topk_topp_sampler = mod  # type: ignore[attr-defined]
    return mod


def _hpu_random_sample(patches: Path, tts: types.ModuleType) -> Any:
    """What topk_topp_sampler.random_sample is once the plugin's patches are installed."""
    tree = ast.parse(patches.read_text(encoding="utf-8"))
    for func in tree.body:
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Attribute) and t.attr == "random_sample" for t in node.targets)
                and isinstance(node.value, ast.Name)
            ):
                ns: dict[str, Any] = {"torch": torch}
                ns[node.value.id] = load_function(patches, node.value.id, ns)
                load_function(patches, func.name, ns)()  # the plugin's installer
                apply = ast.unparse(ast.parse(load_source(patches, "apply")))
                assert f"{func.name}()" in apply, f"patches.apply() never calls {func.name}"
                return tts.random_sample
    return tts.random_sample


def _probs(rows: int, device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.rand((rows, _VOCAB), generator=gen).softmax(dim=-1).to(device)


def check(trees: Any) -> None:
    problems: list[str] = []
    runner = trees.vllm_gaudi / "vllm_gaudi/v1/worker/hpu_model_runner.py"
    statement = _runner_generator_statement(runner)

    def generators(seeds: dict[int, int]) -> dict[int, torch.Generator]:
        out = {}
        for row, seed in seeds.items():
            try:
                out[row] = _runner_generator(statement, seed)
            except _DeviceGenerator as exc:
                problems.append(f"_update_states creates the seeded request's generator on {exc}, not the CPU")
                out[row] = torch.Generator().manual_seed(seed)  # go on with CPU generators
        return out

    gens = generators({5: 31337})
    gen = gens[5]
    if gen.device.type != "cpu" or gen.initial_seed() != 31337:
        problems.append(f"runner generator: device {gen.device}, seed {gen.initial_seed()} (expected cpu, 31337)")

    recorded: list[torch.Tensor] = []
    tts = _stock_module(trees.vllm, recorded)
    stock = tts.random_sample
    hpu = _hpu_random_sample(trees.vllm_gaudi / "vllm_gaudi/patches.py", tts)

    # a. On the device (meta stand-in): no in-place draw with a generator on the device tensor.
    with _DeviceDraws() as mode:
        out = hpu(_probs(4, "meta"), generators(_SEEDS))
    problems += [f"random_sample draws a seeded row in place on the device: {d}" for d in mode.device_draws]
    assert out.device.type == "meta" and tuple(out.shape) == (4,), "random_sample output shape/device"

    # b. On the CPU: bit-identical to vLLM's stock random_sample, seeded rows from the runner's generators.
    for seeds in (_SEEDS, _ALL_SEEDS):
        for fp64 in (False, True):
            recorded.clear()
            torch.manual_seed(0)
            want = stock(_probs(4, "cpu"), {r: torch.Generator().manual_seed(s) for r, s in seeds.items()}, fp64)
            torch.manual_seed(0)
            got = hpu(_probs(4, "cpu"), generators(seeds), fp64)
            q_want, q_got = recorded
            if not (torch.equal(q_want, q_got) and torch.equal(want, got)):
                rows = [r for r in range(4) if not torch.equal(q_want[r], q_got[r])]
                problems.append(f"seeds {seeds}, fp64={fp64}: noise differs from stock CPU in rows {rows}")

    if problems:
        raise AssertionError("seeded sampling uses device generators:\n  " + "\n  ".join(dict.fromkeys(problems)))
