"""What port asks git of the upstream trees: the name of the release a tree is at, a file as the
old release's pinned commit has it, and a three-way merge (``git merge-file``) of a change that
no longer applies onto the new file."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...models import Pin

__all__ = ["Merged", "head", "merge", "pinned_file", "release_name"]

# The labels of git merge-file's conflict markers, in its order: current, base, other.
LABELS = ("the new tree", "{release} (pristine)", "{fix}")


def _git(tree: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode("utf-8", "replace").strip() if out.returncode == 0 else None


def release_name(tree: Path) -> str | None:
    """The release a git tree is at: its tag, else ``<branch>-<8 hex>`` (``main-091bbadd``, the name
    a hand port of main is given), else ``commit-<8 hex>``; None when it is not a git tree."""
    tag = _git(tree, "describe", "--tags", "--exact-match", "HEAD")
    if tag:
        return tag
    sha = _git(tree, "rev-parse", "--short=8", "HEAD")
    if not sha:
        return None
    refs = _git(tree, "for-each-ref", "--points-at", "HEAD", "--format=%(refname:lstrip=-1)", "refs/heads",
                "refs/remotes")
    branch = next((r for r in (refs or "").splitlines() if r and r != "HEAD"), "")
    return f"{branch or 'commit'}-{sha}"


def head(tree: Path) -> str | None:
    """The commit a git tree is at (None: not a git tree)."""
    return _git(tree, "rev-parse", "HEAD")


def pinned_file(tree: Path, pin: Pin, path: str) -> bytes | None:
    """``path`` as one of the pin's commits has it, read from the new tree's git history (None when
    the tree has none of those commits, or the file is not there)."""
    for commit in pin.commits:
        try:
            out = subprocess.run(["git", "-C", str(tree), "show", f"{commit}:{path}"], capture_output=True,
                                 check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode == 0:
            return out.stdout
    return None


@dataclass(frozen=True, slots=True)
class Merged:
    content: bytes  # the merge, with conflict markers where ``conflicts`` > 0
    conflicts: int


def merge(current: bytes, base: bytes, fixed: bytes, release: str, fix: str) -> Merged | None:
    """``git merge-file``: the change from ``base`` to ``fixed`` (the fix on the old release) made on
    ``current`` (the new tree's file). None when git cannot run."""
    labels = [label.format(release=release, fix=fix) for label in LABELS]
    with tempfile.TemporaryDirectory(prefix="fixpack-merge-") as tmp:
        files = []
        for name, content in (("current", current), ("base", base), ("fixed", fixed)):
            (Path(tmp) / name).write_bytes(content)
            files.append(str(Path(tmp) / name))
        args = ["git", "merge-file", "-p", *(a for label in labels for a in ("-L", label)), *files]
        try:
            out = subprocess.run(args, capture_output=True, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if out.returncode < 0 or out.returncode > 127:  # git's own failure, not a count of conflicts
        return None
    return Merged(out.stdout, out.returncode)
