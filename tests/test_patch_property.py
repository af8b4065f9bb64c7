"""Property test against git: random files and edits, diffed by git, applied and reversed by the
engine; the engine's own diffs applied by ``git apply``. Both must give the exact bytes.

Files mix LF, CRLF and CR CR LF endings, lack a final newline, hold the bytes Python (but not git)
treats as line breaks, and may be absent (a create or delete). ``git`` is the oracle; the test is
skipped without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fixpack.core import patch

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not on PATH: it is the oracle")

BODIES = [
    "a",
    "b",
    "x = 1",
    "",
    "    pass",
    "caf\u00e9",
    "a\x0bb",
    "\x0c",
    "\x1c\x1d\x1e",
    "\u0085",
    "\u2028x\u2029",
    "a\rb",
    "\r",
    "tab\t",
]
STYLES = {"lf": ["\n"], "crlf": ["\r\n"], "mixed": ["\n", "\r\n", "\r\r\n"]}


class Repo:
    """One scratch repository for every example: ``f`` in the index is the old side, in the work
    tree the new side, so ``git diff`` is the patch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = root / "f"
        home = root.parent / "home"
        home.mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }
        self.git("init", "-q")
        for key, value in (
            ("core.autocrlf", "false"),
            ("core.safecrlf", "false"),
            ("apply.whitespace", "nowarn"),
            ("core.quotepath", "true"),
        ):
            self.git("config", key, value)

    def git(self, *args: str) -> bytes:
        done = subprocess.run(["git", *args], cwd=self.root, env=self.env, capture_output=True)
        if done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def put(self, content: bytes | None) -> None:
        if content is None:
            self.file.unlink(missing_ok=True)
        else:
            self.file.write_bytes(content)

    def read(self) -> bytes | None:
        return self.file.read_bytes() if self.file.exists() else None

    def diff(self, old: bytes | None, new: bytes | None) -> str:
        self.git("rm", "-qf", "--cached", "--ignore-unmatch", "f")
        if old is not None:
            self.put(old)
            self.git("add", "f")
        self.put(new)
        if old is None and new is not None:
            self.git("add", "-N", "f")
        out = self.git("diff", "--no-color", "--no-ext-diff", "--no-renames", "-U3", "--", "f")
        self.git("rm", "-qf", "--cached", "--ignore-unmatch", "f")
        return out.decode(patch.ENC, patch.ERRORS)

    def apply(self, text: str, content: bytes | None, reverse: bool = False) -> bytes | None:
        self.put(content)
        patch_file = self.root.parent / "p.diff"
        patch_file.write_bytes(text.encode(patch.ENC, patch.ERRORS))
        self.git("apply", *(["-R"] if reverse else []), str(patch_file))
        return self.read()


@pytest.fixture(scope="module")
def repo():
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        yield Repo(root)


@st.composite
def files(draw: st.DrawFn, lf_only: bool = False) -> tuple[bytes | None, bytes | None]:
    """An old file and a new one made from it by a few line edits (either may be absent; with
    ``lf_only``, both present and without a CR)."""
    endings = STYLES["lf" if lf_only else draw(st.sampled_from(sorted(STYLES)))]
    bodies = [b for b in BODIES if "\r" not in b] if lf_only else BODIES
    line = st.tuples(st.sampled_from(bodies), st.sampled_from(endings)).map("".join)
    old = draw(st.lists(line, max_size=30))
    new = list(old)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(new)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "ending"]))
        if kind == "insert" or at == len(new):
            new[at:at] = draw(st.lists(line, min_size=1, max_size=4))
        elif kind == "delete":
            del new[at : at + draw(st.integers(1, 3))]
        elif kind == "replace":
            new[at] = draw(line)
        else:
            ending = draw(st.sampled_from(endings if lf_only else ["\n", "\r\n"]))
            new[at] = patch.split_lines(new[at])[0].rstrip("\n").removesuffix("\r") + ending
    for lines in (old, new):
        if lines and draw(st.integers(0, 3)) == 0:
            lines[-1] = lines[-1].rstrip("\n")  # no newline at the end (an \r may remain)
    a, b = "".join(old).encode(), "".join(new).encode()
    presence = "edit" if lf_only else draw(st.sampled_from(["edit"] * 8 + ["create", "delete"]))
    return (None if presence == "create" else a), (None if presence == "delete" else b)


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@SETTINGS
@given(files())
def test_git_diffs_apply_and_reverse_exactly(repo: Repo, pair: tuple[bytes | None, bytes | None]):
    old, new = pair
    assume(old != new)
    text = repo.diff(old, new)
    (fd,) = patch.parse(text)
    assert [(e.path, e.creates, e.deletes) for e in patch.index(text)] == [("f", fd.creates, fd.deletes)]
    assert patch.apply(fd, old) == new
    assert patch.apply(fd.reversed(), new) == old


@SETTINGS
@given(files())
def test_rendered_diffs_apply_in_git_as_in_the_engine(repo: Repo, pair: tuple[bytes | None, bytes | None]):
    old, new = pair
    assume(old != new)
    text = patch.render("f", old, new)
    (fd,) = patch.parse(text)
    assert patch.apply(fd, old) == new
    assert patch.apply(fd.reversed(), new) == old
    assert repo.apply(text, old) == new
    assert repo.apply(text, new, reverse=True) == old


@SETTINGS
@given(files(lf_only=True))
def test_an_lf_diff_applies_to_the_crlf_copy_and_reverses(repo: Repo, pair: tuple[bytes | None, bytes | None]):
    old, new = pair
    assume(old is not None and new is not None and old != new)
    assume(b"\r" not in old + new)
    fd = patch.parse(patch.render("f", old, new))[0]
    # Both sides show LF lines, so both directions see "an LF diff on a CRLF file". (A side with no
    # line ending at all, e.g. b"a", cannot: reversing onto it writes the patch's LF.)
    for side in (fd, fd.reversed()):
        assume(any(t.endswith("\n") for h in side.hunks for tag, t in h.lines if tag != "+"))
    crlf_old, crlf_new = old.replace(b"\n", b"\r\n"), new.replace(b"\n", b"\r\n")
    assert patch.apply(fd, crlf_old) == crlf_new
    assert patch.apply(fd.reversed(), crlf_new) == crlf_old


@st.composite
def perturbed(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    """An LF file, an edit of it, and a third file: the first with a few unrelated lines added or
    removed (where the edit's hunks must be found at an offset, or fail)."""
    pool = ["a\n", "b\n", "c\n", "d\n", "x\n", "\n"]
    old = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=25))
    new, target = list(old), list(old)
    for lines, extra in ((new, "N\n"), (target, "T\n")):
        for _ in range(draw(st.integers(1 if lines is new else 0, 3))):
            at = draw(st.integers(0, len(lines)))
            if draw(st.booleans()) or at == len(lines):
                lines[at:at] = [draw(st.sampled_from([*pool, extra]))]
            else:
                del lines[at]
    return "".join(old).encode(), "".join(new).encode(), "".join(target).encode()


@SETTINGS
@given(perturbed())
def test_on_another_file_the_engine_succeeds_and_fails_as_git_does(repo: Repo, triple: tuple[bytes, bytes, bytes]):
    """Same offsets, anchors and refusals as ``git apply`` (on LF files, where no fuzz and exact
    matching mean the same for both)."""
    old, new, target = triple
    assume(old != new)
    text = patch.render("f", old, new)
    try:
        ours = patch.apply(patch.parse(text)[0], target)
    except patch.HunkFailed:
        ours = None
    try:
        theirs = repo.apply(text, target)
    except AssertionError:  # git apply refused
        theirs = None
    assert ours == theirs
