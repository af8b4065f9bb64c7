"""``fixpack build-site``: lay out a site directory the way the Gaudi image installs v0.26.0.

vLLM comes from its wheel (downloaded from the package index, or a file given), vllm-gaudi from a
git clone (of a URL or a local checkout) at the pinned commit; both are installed with
``pip install --no-deps --no-build-isolation --target SITE``, which leaves the dist-info, RECORD
and ``_version.py`` an image has. Nothing is imported.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import EnvironmentProblem, UsageError
from ..models import Profile


def _run(args: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(args, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise EnvironmentProblem(f"{what} failed (exit {done.returncode}): {' '.join(args)}", details=tail)


def _pin(profile: Profile, dist: str) -> tuple[str, str]:
    for p in profile.pins:
        if p.dist == dist:
            return p.version, p.commits[0] if p.commits else ""
    raise UsageError(f"profile {profile.name} has no pin for {dist}")


def build(
    profile: Profile, site: Path, vllm_gaudi: str, vllm_wheel: Path | None = None, tag: str | None = None
) -> list[str]:
    """Install both distributions into ``site``; returns what was done, for the report."""
    if site.exists() and any(site.iterdir()):
        raise UsageError(f"{site} exists and is not empty; give a new folder")
    site.mkdir(parents=True, exist_ok=True)
    done: list[str] = []
    vllm_version, _ = _pin(profile, "vllm")
    _, gaudi_commit = _pin(profile, "vllm-gaudi")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix="fixpack-site-") as tmp:
        work = Path(tmp)
        if vllm_wheel is None:
            _run([*pip, "download", "--no-deps", "-d", str(work), f"vllm=={vllm_version}"], "downloading vLLM")
            wheels = sorted(work.glob("vllm-*.whl"))
            if not wheels:
                raise EnvironmentProblem(f"pip download gave no vllm wheel in {work}")
            vllm_wheel = wheels[0]
            done.append(f"downloaded {vllm_wheel.name}")
        _run([*pip, "install", "--no-deps", "--target", str(site), str(vllm_wheel)], "installing vLLM")
        done.append(f"installed {vllm_wheel.name}")

        checkout = work / "vllm-gaudi"
        # A clone, of a URL or a local checkout alike: the build never writes into the maintainer's
        # checkout, and the tags that setuptools-scm reads the version from come along.
        _run(["git", "clone", "--quiet", "--no-checkout", vllm_gaudi, str(checkout)], "cloning vllm-gaudi")
        ref = tag or gaudi_commit or profile.release
        _run(["git", "-c", "advice.detachedHead=false", "checkout", "--quiet", ref], f"checking out {ref}", checkout)
        _run(
            [*pip, "install", "--no-deps", "--no-build-isolation", "--target", str(site), str(checkout)],
            "installing vllm-gaudi (needs setuptools and setuptools-scm)",
        )
        done.append(f"installed vllm-gaudi from {vllm_gaudi} at {ref}")
    return done
