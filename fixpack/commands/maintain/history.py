"""What an upstream tree's git history says, for ``upstream``, verify's check of the recorded
``[upstream]`` fields and ``record --from-commit``: read with git's own commands (``rev-parse``,
``merge-base``, ``rev-list``, ``patch-id``, ``archive``), never written. A tree that is not a git
work tree has no ``Repo``."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import EnvironmentProblem

__all__ = ["Repo", "patch_id", "pr_number"]

_PR = re.compile(r"(?:[\w.-]+/[\w.-]+#|https?://\S+/pull/)([0-9]+)/?\Z")
_SHA = re.compile(r"(?:[\w.-]+/[\w.-]+@|https?://\S+/commit/)?([0-9a-f]{7,40})\Z")


def pr_number(ref: str) -> str | None:
    """The PR number a recorded ref (``owner/repo#N`` or a pull URL) names, else None."""
    found = _PR.match(ref.strip())
    return found.group(1) if found else None


def _git(args: list[str], cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed: it reads the upstream tree's history") from None


def patch_id(diff_text: str, cwd: Path) -> str | None:
    """``git patch-id --stable`` of a diff: the same for two diffs of the same change, whatever
    their line numbers and whitespace."""
    done = _git(["patch-id", "--stable"], cwd, diff_text.encode("utf-8", "surrogateescape"))
    out = done.stdout.decode().split()
    return out[0] if done.returncode == 0 and out else None


@dataclass(frozen=True, slots=True)
class Repo:
    """A git work tree whose top is an upstream tree (repository layout)."""

    root: Path

    @staticmethod
    def of(tree: Path) -> Repo | None:
        """The repository ``tree`` is the top of, or None when it is not one."""
        done = _git(["rev-parse", "--show-toplevel"], tree)
        if done.returncode != 0:
            return None
        top = Path(done.stdout.decode().strip())
        return Repo(tree) if top.resolve() == tree.resolve() else None

    @staticmethod
    def at(path: Path) -> Repo | None:
        """Any git repository at ``path``: a work tree, or a bare clone such as a mirror."""
        return Repo(path) if _git(["rev-parse", "--git-dir"], path).returncode == 0 else None

    def show(self, rev: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``rev``, None where it has no such file."""
        done = _git(["show", f"{rev}:{path}"], self.root)
        return done.stdout if done.returncode == 0 else None

    def parent(self, rev: str) -> str | None:
        """A commit's first parent: for a merge, the main line it was merged into."""
        return self.commit(f"{rev}^1")

    def _out(self, *args: str) -> str | None:
        done = _git(list(args), self.root)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def commit(self, rev: str) -> str | None:
        """The full id of the commit ``rev`` names in this repository, or None."""
        return self._out("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")

    def resolve(self, ref: str) -> str | None:
        """The commit a recorded ref names here: a commit id (bare, ``owner/repo@``, a commit URL),
        a PR (its ``refs/pull/N/head``), or a tag or branch."""
        ref = ref.strip()
        number = pr_number(ref)
        if number:
            return self.commit(f"refs/pull/{number}/head")
        sha = _SHA.match(ref)
        return self.commit(sha.group(1) if sha else ref)

    def head(self) -> str | None:
        return self.commit("HEAD")

    def is_ancestor(self, older: str, newer: str) -> bool:
        return _git(["merge-base", "--is-ancestor", older, newer], self.root).returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        return self._out("merge-base", a, b)

    def dirty(self, paths: Sequence[str]) -> bool:
        """The work tree differs from HEAD under ``paths``."""
        return bool(self._out("status", "--porcelain", "--", *paths))

    def first_parents(self, base: str, tip: str, paths: Sequence[str] = ()) -> list[str]:
        """The commits of ``base..tip`` along first parents (the main line: each a merged PR),
        oldest first; with ``paths``, those that change one of them."""
        out = self._out("rev-list", "--first-parent", "--reverse", f"{base}..{tip}", "--", *paths)
        return out.split() if out else []

    def patch_ids(self, rev_range: str, paths: Sequence[str]) -> dict[str, str]:
        """patch id -> commit, of each commit of ``rev_range`` (a range, or one commit and its
        ancestry) restricted to ``paths``: what a fix of those files would be if it came as one."""
        log = _git(["log", "-p", "--no-merges", "--format=commit %H", rev_range, "--", *paths], self.root)
        if log.returncode != 0:
            return {}
        done = _git(["patch-id", "--stable"], self.root, log.stdout)
        ids: dict[str, str] = {}
        for line in done.stdout.decode().splitlines():
            pid, _, commit = line.partition(" ")
            ids.setdefault(pid, commit)  # newest first: keep the first commit that has it
        return ids

    def changed(self, base: str, tip: str) -> list[str]:
        out = self._out("diff", "--name-only", "--no-renames", base, tip)
        return out.splitlines() if out else []

    def message(self, rev: str) -> tuple[str, str]:
        """The subject and body of a commit's message."""
        subject = self._out("log", "-1", "--format=%s", rev) or ""
        body = self._out("log", "-1", "--format=%b", rev) or ""
        return subject, body

    def export(self, rev: str, path: str, dest: Path) -> None:
        """The folder ``path`` as commit ``rev`` has it, written under ``dest`` (``git archive``)."""
        done = _git(["archive", "--format=tar", rev, "--", path], self.root)
        if done.returncode != 0:
            raise EnvironmentProblem(f"git archive {rev} -- {path} failed: {done.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            if hasattr(tarfile, "data_filter"):  # no links or paths out of ``dest``
                tar.extractall(dest, filter="data")
            else:  # a Python before 3.10.12: git archive's own output, of a commit's paths only
                tar.extractall(dest)
