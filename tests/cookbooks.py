"""Packs and proofs that several engine test modules write into the test cookbook (``builders.Cookbook``)."""

from __future__ import annotations

from pathlib import Path

from builders import BATCH, RUNNER, SAMPLER, Cookbook, Site


def three_fixes(cookbook: Cookbook) -> None:
    """``one`` (two files, two distributions), ``two`` (chained on ``one`` in runner.py) and
    ``three`` (a new module and an edit), locked in profile v0.26.0."""
    first = RUNNER.replace("return 2\n", "return 20\n")
    cookbook.fix(
        "one", {"vllm_gaudi/runner.py": (RUNNER, first), "vllm/sampler.py": (SAMPLER, SAMPLER.replace("x\n", "-x\n"))}
    )
    cookbook.fix("two", {"vllm_gaudi/runner.py": (first, first.replace("return 7\n", "return 70\n"))})
    cookbook.fix(
        "three", {"vllm_gaudi/new_module.py": (None, "VALUE = 3\n"), "vllm_gaudi/batch.py": (BATCH, BATCH + "# 3\n")}
    )
    cookbook.profile(["one", "two", "three"])
    cookbook.lock()


def cst_only(cookbook: Cookbook) -> Path:
    """``cst-only``, whose one change is a libcst transform (runner.py's ``f7`` returns 777), not yet
    locked, alone in profile v0.26.0; its folder."""
    d = cookbook.root / "fixes" / "cst-only"
    d.mkdir(parents=True)
    (d / "fix.toml").write_text(
        'id = "cst-only"\ntitle = "t"\nwhy = "w"\n[upstream]\nstatus = "pending"\n[proof]\nlevel = "none"\n'
        'reason = "test"\n[release."v0.26.0"]\ntransforms = "v0.26.0_cst.py"\n'
    )
    (d / "v0.26.0_cst.py").write_text(
        "from fixpack.transforms import Transform, replace_body\n"
        "TRANSFORMS = [Transform('vllm_gaudi/runner.py', [replace_body('f7', 'return 777')])]\n"
    )
    cookbook.profile(["cst-only"])
    return d


def targets(site: Site) -> dict[str, bytes | None]:
    """The bytes of each file ``three_fixes`` changes, as ``site`` has it (None: absent)."""
    paths = ["vllm_gaudi/runner.py", "vllm/sampler.py", "vllm_gaudi/new_module.py", "vllm_gaudi/batch.py"]
    return {p: site.read(p) if site.file(p).exists() else None for p in paths}


def two_fixes(cookbook: Cookbook) -> None:
    """``runner`` and ``sampler``, one file each, locked in profile v0.26.0."""
    cookbook.fix("runner", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 30\n"))})
    cookbook.fix("sampler", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("x\n", "-x\n"))})
    cookbook.profile(["runner", "sampler"])
    cookbook.lock()


# A proof that runs the tree's real code: sample() must double its input once the fix is in.
DOUBLING_PROOF = """
from fixpack.proofkit import load_function


def check(trees) -> None:
    sample = load_function(trees.vllm / "vllm/sampler.py", "sample")
    assert sample(2) == 4, f"sample(2) returned {sample(2)}"
"""
F5_PROOF = """
from fixpack.proofkit import load_function


def check(trees) -> None:
    f5 = load_function(trees.vllm_gaudi / "vllm_gaudi/runner.py", "f5")
    assert f5() == 55, f"f5() returned {f5()}"
"""
SWAP_PROOF = """
from types import SimpleNamespace

from fixpack.proofkit import load_function


def check(trees) -> None:
    swap = load_function(trees.vllm_gaudi / "vllm_gaudi/batch.py", "Batch.swap")
    batch = SimpleNamespace(rows=[1, 2], swaps=0)
    swap(batch, 0, 1)
    assert batch.swaps == 1, "swap() does not count its swaps"
"""
