"""seeded-sampling: a seeded request must sample on the HPU without a per-request device generator.

Runs on a CPU-only torch, end to end through the tree's real code:
1. ``HPUModelRunner._update_states`` (the real method, with ``self.device = hpu``) adds new
   requests, seeded and unseeded, to the tree's real ``InputBatch``; the generators the sampler
   gets are the batch's ``generators`` dict.
2. ``vllm_gaudi/patches.py`` is executed as a module and its real ``apply()`` and the
   ``load_general_plugins`` hook it installs are run (each ``_patch_*`` installer tolerates the
   stand-in vLLM modules; a failing one just installs nothing); ``random_sample`` is then what
   ``topk_topp_sampler.random_sample`` is, vLLM's own (real noise helpers) unless the plugin
   replaced it.

The HPU is emulated. Tensors "on the HPU" are meta tensors (no values). ``torch.Generator(device=
hpu)`` gives an emulated HPU generator (a CPU generator the emulation knows). Under a
TorchFunctionMode, every op that is given a ``generator=`` fails, as on a Gaudi, when (a) the
generator is an HPU generator: the per-request in-place draw ``q[i].exponential_(generator=g)``
segfaults the worker in lazy mode (PT_HPU_LAZY_MODE=1), and any other use is treated the same; or
(b) a CPU generator draws into an HPU tensor: torch refuses a generator of another device type
("Expected a 'hpu' device type for generator"). Draws without a generator run (on meta).

Checked: sampling a batch with seeded rows on the emulated HPU does not fail, also with the HPU as
the default device (tensors made without a device land there); and on the CPU, with
the runner's generators, the noise rows and the samples are bit-identical to vLLM's stock CPU
``random_sample`` with CPU generators of the same seeds (seeded and unseeded rows, fp32 and fp64
noise), i.e. a seeded request draws exactly what vLLM on a CPU draws. The real segfault, and
whether the real HPU raises for (b), need a Gaudi.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from fixes._support.input_batch import SamplingParams, SamplingType, exec_file, load_input_batch, make_batch
from fixes._support.runner import runner_class
from fixpack.proofkit import Trees, load_function

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
PATCHES = "vllm_gaudi/patches.py"
TTS = "vllm/v1/sample/ops/topk_topp_sampler.py"
HPU = torch.device("hpu")
STAND_IN = "meta"  # tensors on the emulated HPU
_SEEDS: dict[int, int | None] = {0: None, 1: 1234, 2: None, 3: 42}
_ALL_SEEDS: dict[int, int | None] = {0: 7, 1: 1234, 2: 99, 3: 42}
_VOCAB = 151936

_HPU_GENERATORS: list[torch.Generator] = []  # the emulated HPU generators made so far


class _DeviceFailure(Exception):
    """What a Gaudi does instead of sampling (segfault in lazy mode, or a device-type error)."""


class _HpuTorch:
    """``torch`` for the runner: ``torch.Generator(device=hpu)`` makes an emulated HPU generator."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def Generator(device: Any = "cpu") -> torch.Generator:  # noqa: N802 - mirrors torch.Generator
        generator = torch.Generator()
        if torch.device(device).type == "hpu":
            _HPU_GENERATORS.append(generator)
        return generator


def _is_hpu_generator(generator: torch.Generator) -> bool:
    return any(generator is g for g in _HPU_GENERATORS)


class _EmulatedHpu(TorchFunctionMode):
    """Fails generator-driven draws the way a Gaudi does (see the module docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        generator = kwargs.get("generator")
        if isinstance(generator, torch.Generator):
            name = getattr(func, "__name__", str(func))
            if _is_hpu_generator(generator):
                raise _DeviceFailure(f"{name}(generator=<per-request HPU generator>): segfaults in lazy mode")
            on_device = [a for a in args if isinstance(a, torch.Tensor) and a.device.type == STAND_IN]
            if on_device:
                raise _DeviceFailure(
                    f"{name}(generator=<cpu generator>) on an HPU tensor: generator of another device type"
                )
        return func(*args, **kwargs)


def _package(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # type: ignore[attr-defined]
    sys.modules[name] = mod
    if "." in name:
        parent, child = name.rsplit(".", 1)
        setattr(sys.modules[parent], child, mod)
    return mod


def _sampler_module(trees: Trees, recorded: list[torch.Tensor]) -> types.ModuleType:
    """vllm.v1.sample.ops.topk_topp_sampler with the tree's real noise helpers and random_sample;
    the noise q that reaches sample_with_exponential_noise is recorded (on the CPU)."""
    assert trees.vllm is not None
    path = trees.vllm / TTS
    real_sample = load_function(path, "sample_with_exponential_noise", {"torch": torch})

    def sample_with_exponential_noise(probs: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        if q.device.type == "cpu":
            recorded.append(q.clone())
        return real_sample(probs, q)

    ns: dict[str, Any] = {"torch": torch, "sample_with_exponential_noise": sample_with_exponential_noise}
    ns["empty_exponential_noise_like"] = load_function(path, "empty_exponential_noise_like", ns)
    ns["random_sample"] = load_function(path, "random_sample", ns)
    for name in ("vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.ops"):
        _package(name)
    mod = _package("vllm.v1.sample.ops.topk_topp_sampler")
    for name in ("empty_exponential_noise_like", "sample_with_exponential_noise", "random_sample"):
        setattr(mod, name, ns[name])
    return mod


def _install_plugin_patches(trees: Trees) -> None:
    """Run patches.apply() and the load_general_plugins hook it installs, as vLLM does."""
    assert trees.vllm_gaudi is not None
    patches = exec_file("proof_vllm_gaudi_patches", trees.vllm_gaudi / PATCHES)
    failed: list[str] = []

    def tolerant(name: str, func: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - an installer for stand-in modules; see the docstring
                failed.append(f"{name}: {exc!r}")
                return None

        return run

    for name, value in list(vars(patches).items()):
        if name.startswith("_patch_") and callable(value):
            setattr(patches, name, tolerant(name, value))
    plugins = mock.MagicMock(name="vllm.plugins")
    sys.modules["vllm.plugins"] = plugins
    sys.modules["vllm"].plugins = plugins  # type: ignore[attr-defined]
    patches.apply()
    plugins.load_general_plugins()  # the hook apply() installed


def _runner_generators(ib: types.ModuleType, runner_cls: type, seeds: dict[int, int | None]) -> dict:
    """Add one new request per row through the runner's real _update_states; the batch's generators."""
    runner = runner_cls()
    runner.device = HPU
    runner.requests = {}
    runner.input_batch = make_batch(ib)
    runner.encoder_cache = {}
    runner._compact_gdn_group_ids = []
    runner.uses_mrope = False
    runner.use_async_scheduling = False
    new_reqs = []
    for row, seed in seeds.items():
        params = SamplingParams(temperature=1.0)
        if seed is not None:
            params.sampling_type, params.seed = SamplingType.RANDOM_SEED, seed
        new_reqs.append(
            SimpleNamespace(
                req_id=f"r{row}",
                prompt_token_ids=[1, 2, 3],
                mm_features=[],
                sampling_params=params,
                pooling_params=None,
                block_ids=[[row + 1]],
                num_computed_tokens=0,
                lora_request=None,
            )
        )
    sched = SimpleNamespace(
        finished_req_ids=set(),
        free_encoder_mm_hashes=[],
        num_scheduled_tokens={r.req_id: 3 for r in new_reqs},
        scheduled_new_reqs=new_reqs,
        scheduled_cached_reqs=SimpleNamespace(req_ids=[]),
        scheduled_spec_decode_tokens={},
    )
    runner._update_states(sched)
    batch = runner.input_batch
    assert batch.req_ids[: len(seeds)] == [f"r{row}" for row in seeds], f"rows {batch.req_ids}"
    return dict(batch.generators)


def _probs(rows: int, device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.rand((rows, _VOCAB), generator=gen).softmax(dim=-1).to(device)


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "needs the vllm-gaudi and vllm trees"
    ib = load_input_batch(trees)
    runner_cls = runner_class(
        trees.vllm_gaudi / RUNNER,
        ["_update_states"],
        {
            "torch": _HpuTorch(),
            "SamplingType": SamplingType,
            "CachedRequestState": ib.CachedRequestState,
            "get_pp_group": lambda: SimpleNamespace(is_last_rank=True),
            "cast": cast,
        },
    )
    recorded: list[torch.Tensor] = []
    tts = _sampler_module(trees, recorded)
    stock = tts.random_sample
    _install_plugin_patches(trees)
    sample = tts.random_sample  # what TopKTopPSampler.forward_native calls on HPU

    problems: list[str] = []
    gens = _runner_generators(ib, runner_cls, _SEEDS)
    assert sorted(gens) == [1, 3], f"the batch's generators are for rows {sorted(gens)}, expected [1, 3]"

    # a. The emulated HPU: a batch with seeded rows is sampled without failing.
    try:
        with _EmulatedHpu():
            out = sample(_probs(4, STAND_IN), gens)
        assert out.device.type == STAND_IN and tuple(out.shape) == (4,), "random_sample output shape/device"
    except _DeviceFailure as exc:
        problems.append(f"sampling seeded rows on the HPU fails: {exc}")
    # a2. The same with the HPU as the default device (a caller under ``with torch.device("hpu")``,
    #     or torch.set_default_device("hpu") in a script running the engine in its own process):
    #     the seeded rows must still be drawn on the CPU, where their generators are, not wherever
    #     a tensor made without a device lands.
    probs = _probs(4, STAND_IN)
    try:
        with _EmulatedHpu(), torch.device(STAND_IN):
            out = sample(probs, gens)
        assert out.device.type == STAND_IN and tuple(out.shape) == (4,), "random_sample output shape/device"
    except _DeviceFailure as exc:
        problems.append(f"sampling seeded rows on the HPU, with the HPU as the default device, fails: {exc}")

    # b. On the CPU, with the runner's generators: the same noise and samples as vLLM's stock CPU
    #    random_sample with CPU generators of the same seeds.
    #    fp64=None: the argument left out, as a caller relying on random_sample's default does.
    #    The global RNG must also be left as vLLM leaves it: with every row seeded, no unseeded
    #    draw is made (it would shift the noise of later unseeded requests under a global seed).
    for seeds in (_SEEDS, _ALL_SEEDS):
        for fp64 in (False, True, None):
            recorded.clear()
            extra = () if fp64 is None else (fp64,)
            cpu_gens = {r: torch.Generator().manual_seed(s) for r, s in seeds.items() if s is not None}
            torch.manual_seed(0)
            want = stock(_probs(4, "cpu"), cpu_gens, *extra)
            rng_want = torch.get_rng_state()
            gens = _runner_generators(ib, runner_cls, seeds)
            torch.manual_seed(0)
            try:
                with _EmulatedHpu():
                    got = sample(_probs(4, "cpu"), gens, *extra)
            except _DeviceFailure as exc:
                problems.append(f"seeds {seeds}, fp64={fp64}: sampling fails with the runner's generators: {exc}")
                continue
            q_want, q_got = recorded
            rows = [r for r in range(4) if not torch.equal(q_want[r], q_got[r])]
            if rows or not torch.equal(want, got) or q_want.dtype != q_got.dtype:
                problems.append(
                    f"seeds {seeds}, fp64={fp64}: noise differs from vLLM's CPU sampling in rows {rows} "
                    f"({q_got.dtype} vs {q_want.dtype}), samples {got.tolist()} != {want.tolist()}"
                )
            if not torch.equal(torch.get_rng_state(), rng_want):
                problems.append(
                    f"seeds {seeds}, fp64={fp64}: the global RNG advanced differently from vLLM's CPU "
                    "sampling (an unseeded draw vLLM does not make, or a missing one)"
                )

    if problems:
        raise AssertionError("seeded sampling on HPU:\n  " + "\n  ".join(dict.fromkeys(problems)))
