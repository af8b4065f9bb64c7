"""Differential replay: real vllm-gaudi commits, applied and reversed by the engine, byte for byte.

Needs ``FIXPACK_SRC_VLLM_GAUDI``: a git clone of vllm-gaudi, read with ``git -C`` only. For the
last non-merge commits before HEAD, each text file's change (``git diff-tree -p``) must turn the
old blob into the new one exactly, and its reverse the new into the old.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fixpack.core import patch

COMMITS = 300
MAX_FILES = 1200
PATHSPEC = ("*.py", "*.md", "*.yaml", "*.yml")


def _source() -> Path:
    src = os.environ.get("FIXPACK_SRC_VLLM_GAUDI")
    if not src:
        pytest.skip("FIXPACK_SRC_VLLM_GAUDI is not set (a git clone of vllm-gaudi)")
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    path = Path(src)
    probe = subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"FIXPACK_SRC_VLLM_GAUDI={src} is not a git repository")
    return path


class _Blobs:
    """``git cat-file --batch``: one process for every blob."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def get(self, sha: str) -> bytes:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(sha.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        assert len(header) == 3 and header[1] == b"blob", header
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)
        return data

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait()


def _blob_ids(fd_text: str) -> tuple[str, str]:
    for line in fd_text.splitlines():
        if line.startswith("index "):
            old, new = line.split()[1].split("..")
            return old, new
    raise AssertionError(f"no index line in {fd_text[:200]!r}")


def _per_file(text: str) -> list[str]:
    """A git patch cut at its ``diff --git`` lines, to parse the files one by one."""
    return [part for part in re.split(r"(?m)^(?=diff --git )", text) if part]


@pytest.mark.realtree
def test_replay_recent_commits_apply_and_reverse_exactly():
    repo = _source()
    started = time.monotonic()
    git = ["git", "-C", str(repo)]
    commits = subprocess.run(
        [*git, "rev-list", "--no-merges", f"--max-count={COMMITS}", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.split()
    blobs = _Blobs(repo)
    replayed = created = deleted = crlf = no_eol = refused = 0
    try:
        for commit in commits:
            raw = subprocess.run(
                [
                    *git,
                    "diff-tree",
                    "-p",
                    "-r",
                    "--no-renames",
                    "--full-index",
                    "--no-commit-id",
                    f"{commit}^",
                    commit,
                    "--",
                    *PATHSPEC,
                ],
                capture_output=True,
                check=True,
            ).stdout
            if not raw:
                continue
            text = raw.decode(patch.ENC, patch.ERRORS)
            try:
                fds = patch.parse(text)
            except patch.UnsupportedPatch:  # a mode change, symlink or executable among them: file by file
                fds = []
                for chunk in _per_file(text):
                    try:
                        fds.extend(patch.parse(chunk))
                    except patch.UnsupportedPatch as exc:
                        assert exc.path and exc.path in chunk.split("\n", 1)[0], exc
                        refused += 1
            else:
                entries = patch.index(text)
                assert [(e.path, e.text, e.creates, e.deletes) for e in entries] == [
                    (f.path, f.text, f.creates, f.deletes) for f in fds
                ]
            for fd in fds:
                (alone,) = patch.parse(fd.text)
                assert alone == fd
                old_id, new_id = _blob_ids(fd.text)
                old = None if fd.creates else blobs.get(old_id)
                new = None if fd.deletes else blobs.get(new_id)
                assert patch.apply(fd, old) == new, f"{commit} {fd.path}"
                assert patch.apply(fd.reversed(), new) == old, f"{commit} {fd.path} (reversed)"
                replayed += 1
                created += fd.creates
                deleted += fd.deletes
                crlf += b"\r\n" in (old or b"") + (new or b"")
                no_eol += any(not t.endswith("\n") for h in fd.hunks for _, t in h.lines)
                if replayed >= MAX_FILES:
                    break
            if replayed >= MAX_FILES:
                break
    finally:
        blobs.close()
    elapsed = time.monotonic() - started
    print(
        f"\nreplayed {replayed} file changes ({created} created, {deleted} deleted, {crlf} with CRLF,"
        f" {no_eol} without a final newline; {refused} refused) in {elapsed:.1f}s"
    )
    assert replayed >= 100
