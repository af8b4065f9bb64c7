"""What ``fixpack build-site`` checks before anything is downloaded (SITE, git and pip, the vLLM
wheel, the vllm-gaudi repository and its ref), and the lines of a failed step's output that say
why, which every step's error shows."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ...errors import EnvironmentProblem, UsageError
from . import history

__all__ = ["check_target", "check_tools", "check_wheel", "check_repo", "why"]

LS_REMOTE_TIMEOUT = 120  # seconds for `git ls-remote` of a URL
WHY_MAX_LINES = 40

# A line that says why a pip or git step failed: pip's ERROR:/error:/×/╰─>/note:/hint: summary, a
# subprocess's "configuration error: ..." or "ValueError: ...", git's "fatal: ...".
_WHY = re.compile(r"error|fatal:|^\s*(×|╰─>|note:|hint:)", re.IGNORECASE)
_HEX = re.compile(r"[0-9a-fA-F]{7,40}")


def why(output: str) -> str:
    """The lines of a failed step's output that say why, not its last lines (often a schema dump).

    Every line that mentions an error (pip's ``ERROR:``, ``error:``, ``×``, ``╰─>``, ``note:`` and
    ``hint:`` summary, a build backend's ``configuration error: ...`` or ``ValueError: ...``, git's
    ``fatal: ...``), in order, once each, skipping a traceback's source lines; then the last line.
    Output with no such line: its last 15 lines.
    """
    lines = [line.rstrip() for line in output.splitlines()]
    picked: list[str] = []
    seen: set[str] = set()
    after_file = False
    for line in lines:
        stripped = line.strip()
        in_traceback_source = after_file
        after_file = stripped.startswith('File "')
        if after_file or in_traceback_source or not _WHY.search(line) or stripped in seen:
            continue
        seen.add(stripped)
        picked.append(line)
    nonblank = [line for line in lines if line.strip()]
    if not picked:
        return "\n".join(nonblank[-15:])
    if len(picked) > WHY_MAX_LINES:
        cut = len(picked) - WHY_MAX_LINES
        picked = [*picked[: WHY_MAX_LINES // 2], f"  ... ({cut} more lines)", *picked[-WHY_MAX_LINES // 2 :]]
    if nonblank and nonblank[-1].strip() not in seen:
        picked.append(nonblank[-1])
    return "\n".join(picked)


# --- the checks, before anything is downloaded ------------------------------------------------


def check_target(site: Path) -> None:
    """SITE is absent or an empty folder, and the folder it goes in can be written."""
    if site.exists() or site.is_symlink():
        if not site.is_dir():
            raise UsageError(f"{site} exists and is not a folder; give a new folder")
        if any(site.iterdir()):
            raise UsageError(f"{site} exists and is not empty; give a new folder")
    ancestor = site.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{site}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise EnvironmentProblem(f"{ancestor} is not writable: cannot build {site} there")


def check_tools() -> None:
    if shutil.which("git") is None:
        raise EnvironmentProblem("git is not on PATH: build-site clones vllm-gaudi with it; install git")
    if importlib.util.find_spec("pip") is None:
        raise EnvironmentProblem(f"pip is not installed for {sys.executable}: run {sys.executable} -m ensurepip")


def check_wheel(wheel: Path, version: str) -> None:
    """``--vllm-wheel`` is a wheel file of vllm at the pinned version."""
    if not wheel.is_file():
        raise UsageError(f"--vllm-wheel {wheel}: no such file")
    try:
        name, wheel_version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        raise UsageError(f"--vllm-wheel {wheel}: not a wheel file name (vllm-{version}-...whl)") from None
    if name != canonicalize_name("vllm") or wheel_version != Version(version):
        raise UsageError(f"--vllm-wheel {wheel.name} is {name} {wheel_version}; the profile pins vllm {version}")
    if not zipfile.is_zipfile(wheel):
        raise UsageError(f"--vllm-wheel {wheel}: not a zip file (an incomplete download?)")


def _is_url(source: str) -> bool:
    return "://" in source or re.match(r"^[\w.-]+@[\w.-]+:", source) is not None


def check_repo(source: str, ref: str) -> str:
    """``--vllm-gaudi`` is a git repository that can be reached and has ``ref``.

    A local folder: a repository (bare or the top of a checkout) in which ``ref`` names a commit.
    A URL or a git bundle (as ``VLLM_GAUDI_GIT`` takes): ``git ls-remote`` answers, and lists
    ``ref`` as a tag or branch; a commit id that it does not list (one below a tag) is checked right
    after the clone, still before any download. Returns a line for the progress output.
    """
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # a wrong URL fails instead of asking for a password
    local = Path(source).expanduser()
    if local.is_dir():
        bare = history.git(["-C", str(local), "rev-parse", "--is-bare-repository"], env=env)
        top = history.git(["-C", str(local), "rev-parse", "--show-toplevel"], env=env)
        is_repo = bare.returncode == 0 and (
            bare.stdout.strip() == b"true"
            or (top.returncode == 0 and Path(os.fsdecode(top.stdout.strip())).resolve() == local.resolve())
        )
        if not is_repo:
            raise UsageError(f"--vllm-gaudi {source} is not a git repository (a clone or checkout of vllm-gaudi)")
        found = history.git(["-C", str(local), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], env=env)
        if found.returncode != 0:
            raise UsageError(f"--vllm-gaudi {source} has no commit {ref} (fetch it, or give --ref)")
        return f"vllm-gaudi: {source} has {ref} ({found.stdout.decode().strip()[:12]})"
    if not (_is_url(source) or local.is_file()):  # a file: a git bundle, which git reads as a remote
        raise UsageError(f"--vllm-gaudi {source}: no such folder or git bundle, and not a git URL")
    try:
        listed = history.git(["ls-remote", source], env=env, timeout=LS_REMOTE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"--vllm-gaudi {source}: git ls-remote got no answer in {LS_REMOTE_TIMEOUT} s"
        ) from None
    if listed.returncode != 0:
        raise EnvironmentProblem(
            f"--vllm-gaudi {source} cannot be reached (git ls-remote exit {listed.returncode})",
            details=why((listed.stdout + listed.stderr).decode(errors="replace")),
        )
    refs = [line.split("\t", 1) for line in listed.stdout.decode(errors="replace").splitlines() if "\t" in line]
    names = {name.removesuffix("^{}") for _, name in refs}
    if {ref, f"refs/tags/{ref}", f"refs/heads/{ref}"} & names:
        return f"vllm-gaudi: {source} has {ref}"
    if _HEX.fullmatch(ref):
        if any(sha.startswith(ref.lower()) for sha, _ in refs):
            return f"vllm-gaudi: {source} has {ref}"
        return f"vllm-gaudi: {source} answers; commit {ref} is checked after the clone"
    raise UsageError(f"--vllm-gaudi {source} has no tag or branch {ref}")
