"""Scratch copies of the upstream trees, and what proofs are run on: verify, its mutants and port
share these so that a proof always sees a tree laid out the same way."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...models import Profile
from ...proofkit import Trees

__all__ = ["copy_trees", "link_trees", "put", "proof_trees", "tail"]


def copy_trees(sources: dict[str, Path], profile: Profile, dest: Path) -> dict[str, Path]:
    """Copy each pinned package out of its source tree (repository layout) into ``dest``."""
    roots = {}
    for pin in profile.pins:
        if pin.dist not in sources:
            continue
        root = dest / pin.dist
        src = sources[pin.dist] / pin.package
        shutil.copytree(src, root / pin.package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        roots[pin.dist] = root
    return roots


def link_trees(roots: dict[str, Path], dest: Path) -> dict[str, Path]:
    """Copies of scratch trees made of hard links: cheap, and safe as long as a file is replaced
    (unlinked, then written), never written in place."""
    out = {}
    for dist, root in roots.items():
        shutil.copytree(root, dest / dist, copy_function=os.link)
        out[dist] = dest / dist
    return out


def put(target: Path, content: bytes | None) -> None:
    """Replace a scratch file (None: remove it), never writing in place: it may be a hard link."""
    target.unlink(missing_ok=True)
    if content is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def proof_trees(profile: Profile, roots: dict[str, Path]) -> Trees:
    by_package = {p.package: roots.get(p.dist) for p in profile.pins}
    return Trees(vllm_gaudi=by_package.get("vllm_gaudi"), vllm=by_package.get("vllm"))


def tail(text: str, lines: int = 6) -> str:
    """The last lines of a proof's output, on one line."""
    return " | ".join(text.strip().splitlines()[-lines:])
