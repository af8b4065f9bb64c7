"""The unified-diff applicator on its own: bytes in, bytes out, exact, and reversible."""

from __future__ import annotations

import random

import pytest

from fixpack.core import patch as diff


def _random_edit(rng: random.Random, lines: list[str]) -> list[str]:
    out = list(lines)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        kind = rng.choice(("insert", "delete", "replace"))
        if kind == "insert" or not out or at == len(out):
            out[at:at] = [f"new {rng.random():.6f}\n" for _ in range(rng.randint(1, 3))]
        elif kind == "delete":
            del out[at : at + rng.randint(1, 3)]
        else:
            out[at] = f"changed {rng.random():.6f}\n"
    return out


@pytest.mark.parametrize("seed", range(40))
def test_render_apply_reverse_round_trip(seed: int):
    rng = random.Random(seed)
    before = [f"line {i} {rng.randint(0, 5)}\n" for i in range(rng.randint(1, 60))]
    after = _random_edit(rng, before)
    if rng.random() < 0.3 and after:
        after[-1] = after[-1].rstrip("\n")  # no newline at the end of the file
    a, b = "".join(before).encode(), "".join(after).encode()
    (fd,) = diff.split_files(diff.render("m.py", a, b))
    assert diff.apply(fd, a) == b
    assert diff.apply(fd.reversed(), b) == a
    # The same patch on a CRLF copy of the file keeps CRLF.
    crlf_a = a.replace(b"\n", b"\r\n")
    patched = diff.apply(fd, crlf_a)
    assert patched.replace(b"\r\n", b"\n") == b
    assert b"\n" not in patched.replace(b"\r\n", b"")


def test_hunks_apply_at_an_offset_but_never_with_fuzz():
    base = "".join(f"def f{i}():\n    return {i}\n" for i in range(20)).encode()
    (fd,) = diff.split_files(diff.render("m.py", base, base.replace(b"return 15\n", b"return 150\n")))
    shifted = b"# a header\n" * 7 + base
    assert diff.apply(fd, shifted) == shifted.replace(b"return 15\n", b"return 150\n")
    altered_context = base.replace(b"return 14\n", b"return 41\n")
    with pytest.raises(diff.HunkFailed) as failed:
        diff.apply(fd, altered_context)
    assert "return 41" in failed.value.nearest


def test_creating_deleting_and_a_file_that_should_not_be_there():
    (create,) = diff.split_files(diff.render("n.py", None, b"X = 1\n"))
    assert create.creates and diff.apply(create, None) == b"X = 1\n"
    with pytest.raises(diff.HunkFailed, match="does not match"):
        diff.apply(create, b"other\n")
    (delete,) = diff.split_files(diff.render("n.py", b"X = 1\n", None))
    assert delete.deletes and diff.apply(delete, b"X = 1\n") is None
    with pytest.raises(diff.HunkFailed):
        diff.apply(delete, None)


def test_index_cuts_a_git_patch_into_its_files():
    text = diff.render("a.py", b"1\n", b"2\n") + diff.render("b.py", None, b"new\n")
    entries = diff.index(text)
    assert [(e.path, e.creates, e.deletes) for e in entries] == [("a.py", False, False), ("b.py", True, False)]
    assert [f.path for f in diff.split_files(text)] == ["a.py", "b.py"]
    with pytest.raises(ValueError, match="twice"):
        diff.index(text + diff.render("a.py", b"2\n", b"3\n"))
