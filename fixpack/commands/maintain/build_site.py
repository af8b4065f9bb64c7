"""``fixpack build-site``: lay out a site directory the way the Gaudi image installs v0.26.0.

vLLM comes from its wheel (downloaded from the package index, or a file given), vllm-gaudi from a
git clone (of a URL or a local checkout) at the pinned commit; both are installed with
``pip install --no-deps --no-build-isolation --target SITE``, which leaves the dist-info, RECORD
and ``_version.py`` an image has. Nothing is imported.

The recipe, cheapest and likeliest to fail first:

1. check every input before anything is downloaded: SITE (absent or an empty folder, its parent
   writable), git and pip, ``--vllm-wheel`` (a wheel of the pinned vLLM version), ``--vllm-gaudi``
   (a git repository, reachable, that has the ref);
2. clone vllm-gaudi and check the ref out;
3. read the build requirements vllm-gaudi declares (``[build-system] requires`` of its
   pyproject.toml); when this interpreter does not satisfy all of them, ``pip install --target``
   them into a private folder that the build sees first on ``PYTHONPATH`` (so nothing is
   installed into the user's environment and an old setuptools there is shadowed);
4. build and install vllm-gaudi, then get and install the vLLM wheel;
5. rename the finished site into place.

Everything is built in one temporary folder beside SITE (``.SITE.fixpack-build-XXXX``), removed
at the end whatever happens (failure, Ctrl-C), so that a retry into the same SITE works.

``build`` is a generator of progress lines: the caller prints each as it comes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ...cookbook.tomlfile import tomllib
from ...errors import EnvironmentProblem, UsageError
from ...installation.inplace import InPlaceAt
from ...models import Profile
from ..install.pins import installed, mismatches
from . import history
from .site_inputs import check_repo, check_target, check_tools, check_wheel, why

# PEP 518: a project without a [build-system] table is built with setuptools (pip's default).
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)


def _run(args: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run one step; its output, or EnvironmentProblem with the lines that say why in ``details``."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env)
    except OSError as exc:
        raise EnvironmentProblem(f"{what} failed: cannot run {args[0]}: {exc}") from None
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise EnvironmentProblem(f"{what} failed (exit {done.returncode}): {shlex.join(args)}", details=why(output))
    return output


def _git_step(args: list[str], what: str, cwd: Path | None = None) -> str:
    """One git step of the build, as ``_run`` runs the others."""
    done = history.git(args, cwd)
    output = (done.stdout + done.stderr).decode(errors="replace")
    if done.returncode != 0:
        raise EnvironmentProblem(f"{what} failed (exit {done.returncode}): git {shlex.join(args)}", details=why(output))
    return output


def _pin(profile: Profile, dist: str) -> tuple[str, str]:
    for p in profile.pins:
        if p.dist == dist:
            return p.version, p.commits[0] if p.commits else ""
    raise UsageError(f"profile {profile.name} has no pin for {dist}")


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.0f} MB"


def _since(start: float) -> str:
    return f"{time.monotonic() - start:.0f} s"


# --- the build requirements vllm-gaudi declares ----------------------------------------------


def build_requires(checkout: Path) -> list[str]:
    """``[build-system] requires`` of the checkout's pyproject.toml (PEP 518), markers applied."""
    pyproject = checkout / "pyproject.toml"
    declared: object = list(DEFAULT_REQUIRES)
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"vllm-gaudi's pyproject.toml cannot be read: {exc}") from None
        if "build-system" in data:
            declared = data["build-system"].get("requires", [])
    if not isinstance(declared, list) or not all(isinstance(r, str) for r in declared):
        raise UsageError("vllm-gaudi's pyproject.toml: [build-system] requires is not a list of strings")
    out = []
    for text in declared:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise UsageError(f"vllm-gaudi's pyproject.toml: bad build requirement {text!r}: {exc}") from None
        if req.marker is None or req.marker.evaluate():
            out.append(text)
    return out


def unsatisfied(requirements: list[str]) -> list[str]:
    """Why each requirement this interpreter does not satisfy is not, e.g. 'setuptools>=77 (65.5.0 here)'."""
    missing = []
    for text in requirements:
        req = Requirement(text)
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{text} (not installed here)")
            continue
        if not req.specifier.contains(have, prereleases=True):
            missing.append(f"{text} ({req.name} {have} here)")
    return missing


# --- the build ---------------------------------------------------------------------------------


def build(
    profile: Profile, site: Path, vllm_gaudi: str, vllm_wheel: Path | None = None, tag: str | None = None
) -> Iterator[str]:
    """Install both distributions into ``site``, yielding a line for each step as it starts or ends:
    check the inputs, then in a folder beside ``site`` clone vllm-gaudi, build it with its own build
    requirements, fetch and install vLLM, and rename the result into place."""
    vllm_version, _ = _pin(profile, "vllm")
    gaudi_version, gaudi_commit = _pin(profile, "vllm-gaudi")
    ref = tag or gaudi_commit or profile.release
    site = Path(os.path.abspath(site.expanduser()))

    check_target(site)
    check_tools()
    if vllm_wheel is not None:
        check_wheel(vllm_wheel, vllm_version)
    yield f"checking vllm-gaudi {vllm_gaudi} at {ref}"
    yield check_repo(vllm_gaudi, ref)

    created = _missing_parents(site)  # removed again on failure
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{site.name}.fixpack-build-", dir=site.parent))
    ready = False
    try:
        staging = tmp / "site"
        staging.mkdir()
        yield f"building in {tmp} (removed at the end, whatever happens)"
        head = yield from _clone(vllm_gaudi, ref, tmp / "vllm-gaudi")
        env = yield from _build_requirements(tmp / "vllm-gaudi", tmp / "buildenv")
        gaudi_version = yield from _install_gaudi(tmp / "vllm-gaudi", staging, ref, env)
        if vllm_wheel is None:
            vllm_wheel = yield from _download_vllm(vllm_version, tmp / "download")
        yield from _install_vllm(vllm_wheel, staging)
        _place(staging, site)
        ready = True
        yield f"built {site}: vllm {vllm_version} and vllm-gaudi {gaudi_version} at {head[:12]}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not ready:
            for folder in created:  # deepest first
                try:
                    folder.rmdir()
                except OSError:
                    break


_PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def _missing_parents(site: Path) -> list[Path]:
    """The folders above ``site`` that do not exist yet, deepest first."""
    created = []
    parent = site.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    return created


def _clone(vllm_gaudi: str, ref: str, checkout: Path) -> Generator[str, None, str]:
    """Clone vllm-gaudi and check out ``ref``; the commit checked out."""
    # A clone, of a URL or a local checkout alike: the build never writes into the maintainer's
    # checkout, and the tags that setuptools-scm reads the version from come along.
    start = time.monotonic()
    yield f"cloning vllm-gaudi from {vllm_gaudi}"
    _git_step(["clone", "--quiet", "--no-checkout", vllm_gaudi, str(checkout)], "cloning vllm-gaudi")
    try:
        _git_step(["-c", "advice.detachedHead=false", "checkout", "--quiet", ref], f"checking out {ref}", checkout)
    except EnvironmentProblem as exc:
        raise UsageError(f"--vllm-gaudi {vllm_gaudi} has no commit {ref} (give --ref)", details=exc.details) from None
    head = _git_step(["rev-parse", "HEAD"], "reading the checked-out commit", checkout).strip()
    yield f"cloned and checked out {ref} ({head[:12]}) in {_since(start)}"
    return head


def _build_requirements(checkout: Path, buildenv: Path) -> Generator[str, None, dict[str, str] | None]:
    """vllm-gaudi's build requirements, installed into ``buildenv`` when this interpreter lacks one:
    the environment the build then runs in (None: this one's)."""
    requires = build_requires(checkout)
    missing = unsatisfied(requires)
    if not missing:
        yield f"vllm-gaudi's build requirements are satisfied by {sys.executable}: {', '.join(requires) or 'none'}"
        return None
    start = time.monotonic()
    yield (
        f"installing vllm-gaudi's build requirements ([build-system] requires of its pyproject.toml: "
        f"{', '.join(requires)}) into a private folder, {buildenv}, not into this environment; "
        f"not satisfied here: {', '.join(missing)}"
    )
    _run([*_PIP, "install", "--target", str(buildenv), *requires], "installing vllm-gaudi's build requirements")
    yield f"installed the build requirements in {_since(start)}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(buildenv), env.get("PYTHONPATH", "")) if p)
    return env


def _install_gaudi(checkout: Path, staging: Path, ref: str, env: dict[str, str] | None) -> Generator[str, None, str]:
    """Build and install vllm-gaudi; the version it installed (its ref's, not the profile's pin)."""
    start = time.monotonic()
    yield (
        f"building vllm-gaudi at {ref} (pip install --no-deps --no-build-isolation --target"
        + (", the build requirements first on PYTHONPATH)" if env else ")")
    )
    _run(
        [*_PIP, "install", "--no-deps", "--no-build-isolation", "--target", str(staging), str(checkout)],
        "building and installing vllm-gaudi",
        env=env,
    )
    found = [
        d for d in importlib.metadata.distributions(path=[str(staging)]) if canonicalize_name(d.name) == "vllm-gaudi"
    ]
    version = found[0].version if found else "(version unknown)"
    yield f"installed vllm-gaudi {version} in {_since(start)}"
    return version


def _download_vllm(version: str, download: Path) -> Generator[str, None, Path]:
    start = time.monotonic()
    yield f"downloading vllm=={version} from the package index (a ~300 MB wheel; no progress shown)"
    _run([*_PIP, "download", "--no-deps", "-d", str(download), f"vllm=={version}"], "downloading vLLM")
    wheels = sorted(download.glob("vllm-*.whl"))
    if not wheels:
        raise EnvironmentProblem(f"pip download vllm=={version} gave no wheel (only an sdist?)")
    yield f"downloaded {wheels[0].name} ({_mb(wheels[0])}) in {_since(start)}"
    return wheels[0]


def _install_vllm(wheel: Path, staging: Path) -> Generator[str, None, None]:
    start = time.monotonic()
    yield f"installing {wheel.name} ({_mb(wheel)}) (pip install --no-deps --target)"
    _run([*_PIP, "install", "--no-deps", "--target", str(staging), str(wheel)], "installing vLLM")
    yield f"installed vLLM in {_since(start)}"


def _place(staging: Path, site: Path) -> None:
    try:
        if site.is_dir():
            site.rmdir()  # the empty folder checked at the start
        staging.rename(site)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot move the built site into place at {site}: {exc}") from None


def unpinned(profile: Profile, site: Path) -> str | None:
    """Why the apply would refuse the site built (its versions or commits are not the profile's
    pins: another --ref), as the apply says it; None when they are."""
    found = mismatches(profile, installed(profile, InPlaceAt(site))[1])
    return found[0] if found else None


def next_step(profile: Profile, site: Path, cookbook: Path, allow_unpinned: bool = False) -> str:
    """The apply command to run next, as one that works from here: this Python, this cookbook."""
    python = shutil.which("python3")
    same = python is not None and Path(python).absolute().parent == Path(sys.executable).absolute().parent
    script = cookbook / "fixes" / "apply_all.py"
    try:
        script = script.relative_to(Path.cwd())
    except ValueError:
        pass
    command = ["python3" if same else sys.executable, str(script), "--profile", profile.name]
    return shlex.join([*command, "--site", os.path.abspath(site), *(["--allow-unpinned"] if allow_unpinned else [])])
