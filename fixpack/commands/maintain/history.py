"""What an upstream tree's git history says, for ``upstream``, verify's check of the recorded
``[upstream]`` fields, ``record --from-commit`` and ``port`` (the release a tree is at, a file as
the old release's pinned commit has it, and ``git merge-file`` of a change that no longer applies):
read with git's own commands (``rev-parse``, ``merge-base``, ``rev-list``, ``patch-id``,
``archive``, ``merge-file``), never written. A tree that is not a git work tree has no ``Repo``."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import EnvironmentProblem
from ...models import Pin

__all__ = ["Merged", "Repo", "git", "merge", "patch_id", "pinned_file", "pr_number", "release_name", "tree_head"]

_PR = re.compile(r"(?:[\w.-]+/[\w.-]+#|https?://\S+/pull/)([0-9]+)/?\Z")
_SHA = re.compile(r"(?:[\w.-]+/[\w.-]+@|https?://\S+/commit/)?([0-9a-f]{7,40})\Z")


def pr_number(ref: str) -> str | None:
    """The PR number a recorded ref (``owner/repo#N`` or a pull URL) names, else None."""
    found = _PR.match(ref.strip())
    return found.group(1) if found else None


def git(
    args: list[str],
    cwd: Path | None = None,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` in ``cwd``: the one place the maintainer's commands run git. A timeout is the
    caller's to handle (``subprocess.TimeoutExpired``)."""
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, input=stdin, capture_output=True, check=False, env=env, timeout=timeout
        )
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run git: {exc}") from None


def patch_id(diff_text: str, cwd: Path) -> str | None:
    """``git patch-id --stable`` of a diff: the same for two diffs of the same change, whatever
    their line numbers and whitespace."""
    done = git(["patch-id", "--stable"], cwd, diff_text.encode("utf-8", "surrogateescape"))
    out = done.stdout.decode().split()
    return out[0] if done.returncode == 0 and out else None


@dataclass(frozen=True, slots=True)
class Repo:
    """A git work tree whose top is an upstream tree (repository layout)."""

    root: Path

    @staticmethod
    def of(tree: Path) -> Repo | None:
        """The repository ``tree`` is the top of, or None when it is not one."""
        done = git(["rev-parse", "--show-toplevel"], tree)
        if done.returncode != 0:
            return None
        top = Path(done.stdout.decode().strip())
        return Repo(tree) if top.resolve() == tree.resolve() else None

    @staticmethod
    def at(path: Path) -> Repo | None:
        """Any git repository at ``path``: a work tree, or a bare clone such as a mirror."""
        return Repo(path) if git(["rev-parse", "--git-dir"], path).returncode == 0 else None

    def show(self, rev: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``rev``, None where it has no such file."""
        done = git(["show", f"{rev}:{path}"], self.root)
        return done.stdout if done.returncode == 0 else None

    def parent(self, rev: str) -> str | None:
        """A commit's first parent: for a merge, the main line it was merged into."""
        return self.commit(f"{rev}^1")

    def _out(self, *args: str) -> str | None:
        done = git(list(args), self.root)
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
        return git(["merge-base", "--is-ancestor", older, newer], self.root).returncode == 0

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
        log = git(["log", "-p", "--no-merges", "--format=commit %H", rev_range, "--", *paths], self.root)
        if log.returncode != 0:
            return {}
        done = git(["patch-id", "--stable"], self.root, log.stdout)
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
        done = git(["archive", "--format=tar", rev, "--", path], self.root)
        if done.returncode != 0:
            raise EnvironmentProblem(f"git archive {rev} -- {path} failed: {done.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            if hasattr(tarfile, "data_filter"):  # no links or paths out of ``dest``
                tar.extractall(dest, filter="data")
            else:  # a Python before 3.10.12: git archive's own output, of a commit's paths only
                tar.extractall(dest)


# --- for port: trees that may have no history, and git that may be missing --------------------

# The labels of git merge-file's conflict markers, in its order: current, base, other.
LABELS = ("the new tree", "{release} (pristine)", "{fix}")


def _repo(tree: Path) -> Repo | None:
    try:
        return Repo.at(tree)
    except EnvironmentProblem:  # no git: port takes the tree as a plain folder
        return None


def release_name(tree: Path) -> str | None:
    """The release a git tree is at: its tag, else ``<branch>-<8 hex>`` (``main-091bbadd``, the name
    a hand port of main is given), else ``commit-<8 hex>``; None when it is not a git tree."""
    repo = _repo(tree)
    if repo is None:
        return None
    tag = repo._out("describe", "--tags", "--exact-match", "HEAD")
    if tag:
        return tag
    sha = repo._out("rev-parse", "--short=8", "HEAD")
    if not sha:
        return None
    refs = repo._out(
        "for-each-ref", "--points-at", "HEAD", "--format=%(refname:lstrip=-1)", "refs/heads", "refs/remotes"
    )
    branch = next((r for r in (refs or "").splitlines() if r and r != "HEAD"), "")
    return f"{branch or 'commit'}-{sha}"


def tree_head(tree: Path) -> str | None:
    """The commit a git tree is at (None: not a git tree)."""
    repo = _repo(tree)
    return repo.head() if repo is not None else None


def pinned_file(tree: Path, pin: Pin, path: str) -> bytes | None:
    """``path`` as one of the pin's commits has it, read from the new tree's git history (None when
    the tree has none of those commits, or the file is not there)."""
    repo = _repo(tree)
    if repo is None:
        return None
    return next((c for commit in pin.commits if (c := repo.show(commit, path)) is not None), None)


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
        args = ["merge-file", "-p", *(a for label in labels for a in ("-L", label)), *files]
        try:
            out = git(args, timeout=60)
        except (EnvironmentProblem, subprocess.TimeoutExpired):
            return None
    if out.returncode < 0 or out.returncode > 127:  # git's own failure, not a count of conflicts
        return None
    return Merged(out.stdout, out.returncode)
