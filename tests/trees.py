"""Source trees the tests write (plain folders, and git histories committed file by file), the
``--source`` arguments that name them, and a folder's files read back to compare."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builders import Cookbook


def write_tree(root: Path, files: dict[str, dict[str, str]]) -> dict[str, Path]:
    """Each distribution's ``files`` under ``root / dist``; returns each distribution's tree."""
    out = {}
    for dist, dist_files in files.items():
        for rel, text in dist_files.items():
            (root / dist / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / dist / rel).write_text(text)
        out[dist] = root / dist
    return out


def port_args(sources: dict[str, Path]) -> list[str]:
    return [a for dist, root in sources.items() for a in ("--source", f"{dist}={root}")]


def sources_args(cookbook: Cookbook) -> list[str]:
    """``--source`` for each pristine tree the cookbook was locked against."""
    return [f"--source={dist}={root}" for dist, root in cookbook.sources.items()]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its path from it: the bytes only, mtimes aside."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def git(repo: Path, *args: str) -> str:
    """``git ARGS`` in ``repo``, which must succeed; its output, stripped. Commits take the suite's
    own identity (conftest.py's git_identity)."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    """Write ``files`` into ``repo`` and commit them all; the new commit's id."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def git_tree(root: Path, files: dict[str, str], *later: dict[str, str], tag: str = "") -> Path:
    """A vllm-gaudi git tree: ``files`` committed (the old release's pin commit is that commit's id
    only if the caller pins it), then each of ``later`` committed on top; HEAD tagged ``tag``."""
    tree = write_tree(root, {"vllm-gaudi": files})["vllm-gaudi"]
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "old")
    for files_now in later:
        write_tree(root, {"vllm-gaudi": files_now})
        git(tree, "commit", "-qam", "new")
    if tag:
        git(tree, "tag", tag)
    return tree
