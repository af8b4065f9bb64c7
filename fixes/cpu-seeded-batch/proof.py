"""cpu-seeded-batch: a seeded request samples the same on vLLM's CPU build whatever its batch holds.

Runs the tree's real ``TopKTopPSampler.forward_cpu`` (vllm/v1/sample/ops/topk_topp_sampler.py), the
method vLLM's CPU platform (except RISC-V and POWER) binds as the sampler's forward, with the file's
real ``compiled_random_sample`` (its ``@torch.compile`` decorator dropped: the same ops, run
eagerly), ``empty_exponential_noise_like``, ``sample_with_exponential_noise`` and
``apply_top_k_top_p``, and real ``torch.Generator``s standing for the per-request generators that
``InputBatch`` keeps for requests with ``SamplingParams.seed`` (the ``generators`` dict: batch row
-> generator).

The logits are near-uniform over many tokens, so which token a row samples is decided by its noise.
A batch of three rows (seeded, unseeded, seeded) is sampled for a few decode steps, with the same
generators carried from step to step as the runner does, under several global RNG seeds and with two
different unseeded neighbours. Each seeded row must sample, at every step, exactly what the same
request samples alone (a one-row batch whose every row is seeded, the path vLLM 0.26.0 already
honours) with a fresh generator of the same seed. A batch without seeded rows must still take the
fast ``compiled_random_sample`` path.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from fixpack.proofkit import Trees, load_function

TTS = "vllm/v1/sample/ops/topk_topp_sampler.py"
VOCAB = 4096
STEPS = 4
GLOBAL_SEEDS = (0, 1, 2, 3, 4, 5)
SEEDS = {0: 1234, 2: 42}  # batch row -> SamplingParams.seed; row 1 has no seed


def _sampler(trees: Trees, fast_calls: list[int]) -> tuple[Any, Any]:
    """forward_cpu and a sampler ``self`` for it; ``fast_calls`` records each compiled_random_sample call."""
    assert trees.vllm is not None, "this proof needs the vllm tree"
    path = trees.vllm / TTS
    ns: dict[str, Any] = {"torch": torch, "current_platform": SimpleNamespace(is_cpu=lambda: True)}
    for name in ("empty_exponential_noise_like", "sample_with_exponential_noise", "apply_top_k_top_p"):
        ns[name] = load_function(path, name, ns)
    real_fast = load_function(path, "compiled_random_sample", ns)

    def compiled_random_sample(logits: torch.Tensor) -> torch.Tensor:
        fast_calls.append(logits.shape[0])
        return real_fast(logits)

    ns["compiled_random_sample"] = compiled_random_sample
    forward_cpu = load_function(path, "TopKTopPSampler.forward_cpu", ns)
    sampler = SimpleNamespace(logprobs_mode="raw_logprobs", use_fp64_gumbel=False)
    return forward_cpu, sampler


def _row(seed: int, scale: float) -> torch.Tensor:
    """Near-uniform logits over VOCAB tokens (every token within a few percent of 1/VOCAB)."""
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def _steps(forward_cpu: Any, sampler: Any, rows: list[torch.Tensor], seeds: dict[int, int]) -> list[list[int]]:
    """Sample the batch STEPS times, the seeded rows' generators carried over as the runner does."""
    generators = {i: torch.Generator().manual_seed(s) for i, s in seeds.items()}
    out = []
    for _ in range(STEPS):
        logits = torch.stack(rows)  # forward_cpu may update the logits in place
        sampled, _ = forward_cpu(sampler, logits, generators, None, None)
        out.append(sampled.tolist())
    return out


def check(trees: Trees) -> None:
    fast_calls: list[int] = []
    forward_cpu, sampler = _sampler(trees, fast_calls)
    request = _row(7, 0.05)
    neighbours = {"a near-uniform neighbour": _row(8, 0.05), "a peaked neighbour": _row(9, 4.0)}

    # Each seeded request alone: a one-row batch, every row seeded.
    alone = {
        row: [step[0] for step in _steps(forward_cpu, sampler, [request], {0: seed})] for row, seed in SEEDS.items()
    }
    # The noise decides the draw: the seeded requests' own tokens vary from step to step.
    for row, tokens in alone.items():
        assert len(set(tokens)) == STEPS, f"seed {SEEDS[row]} alone sampled {tokens}: the logits do not test the noise"

    problems: list[str] = []
    unseeded: set[int] = set()
    for what, neighbour in neighbours.items():
        for global_seed in GLOBAL_SEEDS:
            torch.manual_seed(global_seed)
            steps = _steps(forward_cpu, sampler, [request, neighbour, request], SEEDS)
            unseeded.update(step[1] for step in steps)
            for row, seed in SEEDS.items():
                got = [step[row] for step in steps]
                if got != alone[row]:
                    problems.append(
                        f"row {row} (seed {seed}) beside {what}, global seed {global_seed}: sampled {got}, "
                        f"alone {alone[row]}"
                    )
    # The unseeded row is drawn from the global RNG: it follows the global seed.
    assert len(unseeded) > 1, f"the unseeded row sampled {unseeded} under every global seed"

    # A batch without seeded rows keeps the fast path.
    fast_calls.clear()
    torch.manual_seed(0)
    _steps(forward_cpu, sampler, [request, request], {})
    assert fast_calls == [2] * STEPS, f"an unseeded batch called compiled_random_sample {fast_calls}"

    if problems:
        more = f"\n  ... and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise AssertionError(
            "a seeded request's sample depends on its batch (forward_cpu takes compiled_random_sample, which "
            "draws every row from the global RNG, when any row is unseeded):\n  " + "\n  ".join(problems[:4]) + more
        )
