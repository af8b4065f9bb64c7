"""Reads the commit an installed distribution was built from, without importing it.

Sources, best first: ``<pkg>/_version.py`` (``__commit_id__``, parsed with ``ast``), a ``+g<sha>``
local version label, ``direct_url.json``'s ``vcs_info.commit_id``, the git checkout of an editable
install. Each answer says where it came from.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LOCAL_SHA = re.compile(r"(?:^|[.+])g([0-9a-f]{7,40})(?:\.|$)")


@dataclass(frozen=True, slots=True)
class Commit:
    id: str | None  # lower-case hex, possibly abbreviated; None when it could not be read
    source: str  # where it came from, for messages: "_version.py", "local version label", ...


def from_version_py(path: Path) -> str | None:
    """The commit ``_version.py`` records; None when there is no such file or it records none.
    Raises ValueError when the file is there but cannot be parsed."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{exc.__class__.__name__}: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if names & {"__commit_id__", "commit_id"} and isinstance(node.value.value, str):
                value = node.value.value.lower()
                return value[1:] if value.startswith("g") else value
    return None


def from_local_version(version: str) -> str | None:
    _, _, local = version.partition("+")
    match = _LOCAL_SHA.search(local) if local else None
    return match.group(1) if match else None


def direct_url(text: str | None) -> dict[str, Any]:
    """pip's ``direct_url.json`` (PEP 610) as a dict: its one reader; {} when absent or not an object."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def from_direct_url(text: str | None) -> str | None:
    vcs = direct_url(text).get("vcs_info")
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return commit.lower() if isinstance(commit, str) else None


def from_git_checkout(root: Path) -> str | None:
    """HEAD of the git checkout at or above ``root``, read from the files (no git process)."""
    for top in (root, *root.parents):
        dot_git = top / ".git"
        if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = dot_git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = (top / text.split(":", 1)[1].strip()).resolve()
        elif dot_git.is_dir():
            git_dir = dot_git
        else:
            continue
        return _resolve_head(git_dir)
    return None


def _resolve_head(git_dir: Path) -> str | None:
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head.lower() or None
    ref = head.split(":", 1)[1].strip()
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.exists():
        common = (git_dir / commondir.read_text(encoding="utf-8").strip()).resolve()
    for base in (git_dir, common):
        loose = base / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip().lower()
    packed = common / "packed-refs"
    if packed.exists():
        for line in packed.read_text(encoding="utf-8").splitlines():
            parts = line.split(" ", 1)
            if len(parts) == 2 and parts[1] == ref:
                return parts[0].lower()
    return None


SHORTEST = 7  # git's shortest abbreviation: fewer hex digits could name many commits


def matches(found: str, accepted: str) -> bool:
    """Abbreviated ids (``_version.py`` has 9 hex) match as a prefix of the pinned full id."""
    short, long_ = sorted((found.lower(), accepted.lower()), key=len)
    return len(short) >= SHORTEST and long_.startswith(short)
