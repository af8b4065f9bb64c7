"""The patch engine on its own: git's line model, create/delete, line endings, anchors, refusals."""

from __future__ import annotations

import pytest
import unidiff

from fixpack.core import patch
from fixpack.core.patch import HunkFailed, PatchError, UnsupportedPatch


def one(text: str) -> patch.FileDiff:
    (fd,) = patch.parse(text)
    return fd


def round_trip(before: bytes | None, after: bytes | None, path: str = "m.py") -> patch.FileDiff:
    fd = one(patch.render(path, before, after))
    assert patch.apply(fd, before) == after
    assert patch.apply(fd.reversed(), after) == before
    return fd


# Bug 1: create/delete come from /dev/null and git's file modes, never from @@ counts.

EMPTIED = """\
diff --git a/m.py b/m.py
index 7898192..e69de29 100644
--- a/m.py
+++ b/m.py
@@ -1,2 +0,0 @@
-a
-b
"""

FILLED = """\
diff --git a/m.py b/m.py
index e69de29..7898192 100644
--- a/m.py
+++ b/m.py
@@ -0,0 +1,2 @@
+a
+b
"""


def test_a_commit_that_empties_a_file_edits_it():
    fd = one(EMPTIED)
    assert not fd.creates and not fd.deletes
    assert patch.apply(fd, b"a\nb\n") == b""
    assert patch.apply(fd.reversed(), b"") == b"a\nb\n"
    assert [(e.creates, e.deletes) for e in patch.index(EMPTIED)] == [(False, False)]


def test_an_emptied_file_is_not_a_deletion_though_unidiff_says_so():
    plain = EMPTIED.split("\n", 2)[2]  # without the diff --git and index lines, as diff -u writes it
    for text in (EMPTIED, plain):
        (raw,) = unidiff.PatchSet(text)
        assert raw.is_removed_file  # unidiff reads deletion from the counts
        (fd,) = patch.parse(text)
        assert not fd.deletes and fd.new_path == "m.py"


def test_reversing_an_empty_to_content_edit_empties_the_file_and_keeps_it():
    fd = one(FILLED)
    assert patch.apply(fd, b"") == b"a\nb\n"
    assert patch.apply(fd.reversed(), b"a\nb\n") == b""
    with pytest.raises(HunkFailed, match="absent"):
        patch.apply(fd, None)


def test_create_and_delete_are_read_from_dev_null_and_file_modes():
    create = one(patch.render("n.py", None, b"X = 1\n"))
    assert create.creates and create.old_path is None and create.new_path == "n.py"
    assert patch.apply(create, None) == b"X = 1\n"
    with pytest.raises(HunkFailed, match="already exists"):
        patch.apply(create, b"")
    delete = one(patch.render("n.py", b"X = 1\n", None))
    assert delete.deletes and patch.apply(delete, b"X = 1\n") is None
    assert delete.reversed().creates and patch.apply(delete.reversed(), None) == b"X = 1\n"
    with pytest.raises(HunkFailed, match="absent"):
        patch.apply(delete, None)
    with pytest.raises(HunkFailed):  # the deletion's hunk must cover the whole file
        patch.apply(delete, b"X = 1\nY = 2\n")


def test_an_empty_file_is_created_and_deleted_by_a_header_without_hunks():
    text = patch.render("e.py", None, b"")
    assert text == "diff --git a/e.py b/e.py\nnew file mode 100644\n"
    fd = one(text)
    assert fd.creates and fd.hunks == () and patch.apply(fd, None) == b""
    assert patch.apply(fd.reversed(), b"") is None
    git_style = "diff --git a/e.py b/e.py\nnew file mode 100644\nindex 0000000..e69de29\n"
    assert [(e.path, e.creates) for e in patch.index(git_style + patch.render("f.py", b"1\n", b"2\n"))] == [
        ("e.py", True),
        ("f.py", False),
    ]
    with_names = "diff --git a/e.py b/e.py\nnew file mode 100644\n--- /dev/null\n+++ b/e.py\n"
    assert patch.apply(one(with_names), None) == b""
    gone = one(patch.render("e.py", b"", None))
    assert gone.deletes and patch.apply(gone, b"") is None
    with pytest.raises(HunkFailed, match="remain"):
        patch.apply(gone, b"x\n")


def test_inconsistent_create_headers_are_refused():
    text = "diff --git a/m.py b/m.py\nnew file mode 100644\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchError, match="/dev/null"):
        patch.parse(text)
    both = "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n"
    with pytest.raises(PatchError):
        patch.parse(both)


# Bug 2: added lines keep the patch's bytes; only an LF diff on a pure CRLF file takes CRLF.


def test_a_crlf_line_added_to_a_mixed_file_keeps_its_crlf():
    before = b"a\nb\r\nc\n"
    after = b"a\nb\r\nnew\r\nc\n"
    fd = round_trip(before, after)
    assert ("+", "new\r\n") in fd.hunks[0].lines


def test_a_patch_that_only_changes_a_line_ending_is_not_a_no_op():
    round_trip(b"a\nb\nc\n", b"a\nb\r\nc\n")
    round_trip(b"a\r\nb\r\nc\r\n", b"a\r\nb\nc\r\n")
    round_trip(b"a\nb\nc", b"a\nb\nc\n")


def test_creating_a_mixed_ending_file_keeps_every_ending():
    content = b"a\r\nb\nc\r\r\nd\re\n\r\nlast"
    round_trip(None, content)


def test_a_line_ending_in_cr_cr_lf_keeps_both_crs():
    round_trip(b"x\r\r\ny\n", b"x\r\r\nz\r\r\ny\n")
    fd = one(patch.render("m.py", b"x\r\r\n", b"y\r\r\n"))
    with pytest.raises(HunkFailed):  # body "x\r" is not "x"
        patch.apply(fd, b"x\r\n")


def test_an_lf_patch_applies_to_a_pure_crlf_file_and_its_added_lines_take_crlf():
    lf_before, lf_after = b"a\nb\nc\nd\n", b"a\nB\nc\nnew\nd\n"
    fd = one(patch.render("m.py", lf_before, lf_after))
    crlf_before = lf_before.replace(b"\n", b"\r\n")
    crlf_after = lf_after.replace(b"\n", b"\r\n")
    assert patch.apply(fd, crlf_before) == crlf_after
    assert patch.apply(fd.reversed(), crlf_after) == crlf_before
    no_final = crlf_before[:-2]  # still pure CRLF: the last line has no ending at all
    assert patch.apply(one(patch.render("m.py", b"a\nb\nc\nd", b"a\nb\nc\nd\ne")), no_final) == no_final + b"\r\ne"


def test_a_git_diff_adding_an_lf_line_to_a_crlf_file_applies_exactly():
    """The CRLF rule needs an LF old side; a diff made from the CRLF file itself has a CRLF one."""
    round_trip(b"a\r\nb\r\nc\r\n", b"a\r\nb\r\nlf\nc\r\n")
    round_trip(b"a\r\nb\r\n", b"a\r\nb\r\nlf\n")


def test_an_lf_patch_on_a_mixed_file_writes_lf():
    fd = one(patch.render("m.py", b"a\nb\nc\n", b"a\nb\nnew\nc\n"))
    assert patch.apply(fd, b"a\r\nb\nc\r\n") == b"a\r\nb\nnew\nc\r\n"


def test_no_newline_markers_are_exact():
    round_trip(b"a\nb", b"a\nc")
    round_trip(b"a\nb", b"a\nb\n")
    round_trip(b"a\nb\n", b"a\nb")
    round_trip(b"a\nb\r", b"a\nb\r\n")
    fd = one(patch.render("m.py", b"a\nb\n", b"a\nc\n"))
    with pytest.raises(HunkFailed):  # "b" without an ending is not "b\n"
        patch.apply(fd, b"a\nb")


# Bug 3: git's anchors.

BLOCK = b"x = 1\ny = 2\nz = 3\n"


def test_a_hunk_without_trailing_context_is_anchored_at_the_end():
    before = BLOCK + b"".join(b"f%d()\n" % i for i in range(10)) + BLOCK
    fd = one(patch.render("m.py", before, before + b"tail()\n"))
    assert fd.hunks[0].trailing == 0
    assert patch.apply(fd, before) == before + b"tail()\n"
    # the block now sits mid-file only: git refuses to place an end-of-file hunk there
    with pytest.raises(HunkFailed):
        patch.apply(fd, before + b"more()\n")


def test_a_hunk_at_line_one_is_anchored_at_the_start():
    before = BLOCK + b"".join(b"f%d()\n" % i for i in range(10)) + BLOCK
    fd = one(patch.render("m.py", before, b"head()\n" + before))
    assert fd.hunks[0].old_start == 1
    assert patch.apply(fd, before) == b"head()\n" + before
    with pytest.raises(HunkFailed):
        patch.apply(fd, b"other()\n" + before)


def test_context_free_hunks_are_refused_unless_they_cover_the_file():
    zero = "--- a/m.py\n+++ b/m.py\n@@ -3,0 +4 @@\n+X\n"
    with pytest.raises(PatchError, match="no context"):
        patch.parse(zero)
    whole = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1 @@\n-a\n-b\n+c\n"
    assert patch.apply(one(whole), b"a\nb\n") == b"c\n"
    with pytest.raises(HunkFailed):
        patch.apply(one(whole), b"a\nb\nd\n")


# Git's line model: only \n ends a line.

ODD = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


@pytest.mark.parametrize("sep", ODD, ids=[f"U+{ord(c):04X}" for c in ODD])
def test_only_newline_ends_a_line(sep: str):
    before = f"a{sep}b\nc\nd{sep}\ne\n".encode()
    after = f"a{sep}b\nC{sep}x\nd{sep}\ne\n".encode()
    fd = round_trip(before, after)
    assert fd.hunks[0].old_count == 4 and fd.hunks[0].new_count == 4
    assert patch.split_lines(before.decode()) == [f"a{sep}b\n", "c\n", f"d{sep}\n", "e\n"]


def test_undecodable_bytes_survive():
    round_trip(b"a\xff\xfe\n\x80b\n", b"a\xff\xfe\nc\xc3\n")


# Refusals: binary, rename, copy, mode changes; quoted names are unquoted as git does.

HEAD = "diff --git a/m.py b/m.py\n"


@pytest.mark.parametrize(
    "extra, what",
    [
        ("index 1234567..89abcde 100644\nGIT binary patch\nliteral 3\nKcmZ?wc(wfU0s|5N\n\n", "binary"),
        ("index 1234567..89abcde 100644\nBinary files a/m.py and b/m.py differ\n", "binary"),
        ("old mode 100644\nnew mode 100755\n", "mode change"),
        ("similarity index 100%\nrename from old.py\nrename to m.py\n", "rename"),
        ("similarity index 90%\ncopy from old.py\ncopy to m.py\n", "copy"),
        ("new file mode 100755\n", "mode 100755"),
        ("new file mode 120000\n", "mode 120000"),
        (
            "index 1234567..89abcde 120000\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n"
            "+b\n\\ No newline at end of file\n",
            "symlink",
        ),
        (
            "index 1234567..89abcde 160000\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-Subproject commit 1\n"
            "+Subproject commit 2\n",
            "submodule",
        ),
    ],
)
def test_unsupported_changes_are_refused_naming_the_path(extra: str, what: str):
    for reader in (patch.parse, patch.index):
        with pytest.raises(UnsupportedPatch, match=what) as refused:
            reader(HEAD + extra)
        assert refused.value.path == "m.py"
        assert isinstance(refused.value, ValueError)


def test_a_rename_with_an_edit_is_refused_not_applied_to_the_new_path():
    text = (
        "diff --git a/old.py b/m.py\nsimilarity index 80%\nrename from old.py\nrename to m.py\n"
        "index 1234567..89abcde 100644\n--- a/old.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    with pytest.raises(UnsupportedPatch, match="rename") as refused:
        patch.parse(text)
    assert refused.value.path == "m.py"
    traditional = "--- a/old.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(UnsupportedPatch, match="paths differ"):
        patch.parse(traditional)


def test_a_traditional_binary_line_is_refused():
    with pytest.raises(UnsupportedPatch, match="binary") as refused:
        patch.parse("Binary files a/x.bin and b/x.bin differ\n")
    assert refused.value.path == "x.bin"


def test_quoted_names_are_unquoted_as_git_writes_them():
    for path in ("foo\tbar.py", "caf\u00e9.py", 'q"uote\\.py', "sp ace.py", "new\nline.py"):
        text = patch.render(path, b"a\n", b"b\n")
        assert ("\t" in path or "\u00e9" in path or '"' in path or "\n" in path) == ('"' in text.split("\n")[0])
        fd = one(text)
        assert fd.path == path and fd.old_path == path
        assert [e.path for e in patch.index(text)] == [path]
    git = 'diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"\n--- "a/caf\\303\\251.py"\n+++ "b/caf\\303\\251.py"\n'
    assert one(git + "@@ -1 +1 @@\n-a\n+b\n").path == "caf\u00e9.py"
    with pytest.raises(PatchError, match="escape"):
        patch.parse('--- "a/x\\q"\n+++ "b/x\\q"\n@@ -1 +1 @@\n-a\n+b\n')


def test_quoted_names_are_unquoted_though_unidiff_keeps_the_quotes():
    git = 'diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"\n--- "a/caf\\303\\251.py"\n+++ "b/caf\\303\\251.py"\n'
    text = git + "@@ -1 +1 @@\n-a\n+b\n"
    (raw,) = unidiff.PatchSet(text)
    assert raw.path == '"caf\\303\\251.py"'
    assert [fd.path for fd in patch.parse(text)] == [e.path for e in patch.index(text)] == ["caf\u00e9.py"]


def test_names_with_spaces_and_timestamps():
    spaced = "diff --git a/sp ace.py b/sp ace.py\nnew file mode 100644\n"
    assert one(spaced).path == "sp ace.py"
    stamped = "--- m.py\t2024-01-01 00:00:00.000000000 +0000\n+++ m.py\t2024-01-02 00:00:00.000000000 +0000\n"
    assert one(stamped + "@@ -1 +1 @@\n-a\n+b\n").path == "m.py"


# Malformed patches: one-line PatchError, with the path where known.

GOOD = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"


def test_a_hunk_with_fewer_lines_than_counted_is_refused():
    short = GOOD.replace("@@ -1,3 +1,3 @@", "@@ -1,4 +1,4 @@")
    with pytest.raises(PatchError, match="truncated") as refused:
        patch.parse(short)
    assert refused.value.path == "m.py" and "\n" not in str(refused.value)
    with pytest.raises(PatchError, match="truncated|not a hunk line"):
        patch.parse(short + patch.render("n.py", b"1\n", b"2\n"))


def test_a_hunk_with_more_lines_than_counted_is_refused():
    long = GOOD.replace("@@ -1,3 +1,3 @@", "@@ -1,2 +1,2 @@")
    with pytest.raises(PatchError, match="more lines") as refused:
        patch.parse(long)
    assert refused.value.path == "m.py"


def test_a_truncated_patch_is_refused():
    with pytest.raises(PatchError, match="truncated"):
        patch.parse(GOOD[: GOOD.index("+B")])
    with pytest.raises(PatchError, match="mid-line"):
        patch.parse(GOOD[:-1])


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no file diff"),
        ("hello\nworld\n", "no file diff"),
        ("@@ -1 +1 @@\n-a\n+b\n", "without a file header"),
        (GOOD.replace("@@ -1,3 +1,3 @@", "@@ -x +1 @@"), "bad header"),
        (GOOD.replace(" c\n", "?c\n"), "not a hunk line"),
        (GOOD + GOOD, "twice"),
        (GOOD.replace(" a\n-b\n+B\n c\n", " a\n b\n c\n"), "changes nothing"),
        (GOOD + "\n@@ -9 +9 @@\n-x\n+y\n", "after text"),
        ("diff --git a/m.py b/m.py\nindex 1234567..89abcde 100644\n", "no change"),
        (GOOD.replace("-b\n", "-b\n\\ No newline at end of file\n"), "after 'No newline"),
    ],
)
def test_garbage_is_refused(text: str, message: str):
    with pytest.raises(PatchError, match=message):
        patch.parse(text)


def test_a_line_after_a_hunk_and_its_marker_is_refused_before_the_next_hunk():
    marked = GOOD + "\\ No newline at end of file\n"
    for text in (GOOD, marked):
        with pytest.raises(PatchError, match="more lines") as refused:
            patch.parse(text + " x\n@@ -9 +9 @@\n-x\n+y\n")
        assert refused.value.path == "m.py"
    with pytest.raises(PatchError, match="after text"):
        patch.parse(marked + "note\n@@ -9 +9 @@\n-x\n+y\n")


def test_mbox_mail_and_signature_are_skipped():
    mail = (
        "From 1234 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nSubject: [PATCH] fix\n\nBody text.\n---\n"
        " m.py | 2 +-\n 1 file changed\n\n"
    )
    sig = "-- \n2.39.5\n\n"
    text = mail + GOOD + patch.render("n.py", b"x\n", b"y\n") + sig
    fds = patch.parse(text)
    assert [f.path for f in fds] == ["m.py", "n.py"]
    assert fds[0].text == GOOD
    assert [(e.path, e.text) for e in patch.index(text)] == [(f.path, f.text) for f in fds]
    for fd in fds:
        assert patch.parse(fd.text) == [fd]
    assert patch.apply(fds[0], b"a\nb\nc\n") == b"a\nB\nc\n"
    # "-- " ends the hunk by its counts, even though it looks like a removed line
    ends = GOOD.replace(" c\n", "-- \n").replace("+++ b/m.py\n@@ -1,3 +1,3 @@", "+++ b/m.py\n@@ -1,3 +1,2 @@")
    fd = one(mail + ends + sig)
    assert fd.hunks[0].old == ("a\n", "b\n", "- \n")


# The adapter's duties over unidiff (fixpack/core/patch/parse.py lists them, with these tests).


class _Mute(unidiff.UnidiffParseError):
    """unidiff's error without its message: the adapter must not need it."""

    def __init__(self, *args: object) -> None:
        super().__init__("")


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD[: GOOD.index("+B")], "truncated"),
        (GOOD.replace("@@ -1,3 +1,3 @@", "@@ -1,4 +1,4 @@")[:-1], "mid-line"),
        (HEAD + "--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n-a\n-b\n+c\n+d\n", "more lines"),  # -b: 2 old lines
        (GOOD.replace(" c\n", "?c\n"), "not a hunk line"),
        ("@@ -1 +1 @@\n-a\n+b\n", "without a file header"),
        (GOOD + "note\n@@ -9 +9 @@\n-x\n+y\n", "after text"),
        (GOOD + " x\n@@ -9 +9 @@\n-x\n+y\n", "more lines"),
        ("+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n", "does not follow its file's --- line"),
        (HEAD + "--- a/m.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", "does not follow its file's --- line"),
        (HEAD + "new file mode 100644\n\\ No newline at end of file\n", "no file or hunk"),
    ],
)
def test_unidiff_refusals_are_told_from_the_line_where_it_stopped(monkeypatch, text: str, message: str):
    with pytest.raises(unidiff.UnidiffParseError):
        unidiff.PatchSet(text)
    monkeypatch.setattr(unidiff.patch, "UnidiffParseError", _Mute)
    with pytest.raises(PatchError, match=message):
        patch.parse(text)


def test_a_files_names_must_agree():
    with pytest.raises(PatchError, match="inconsistent names"):  # unidiff checks the +++ name only
        patch.parse(HEAD + "--- a/x.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n")
    (raw,) = unidiff.PatchSet("diff --git a/m.py /dev/null\n")
    assert raw.is_removed_file  # unidiff takes the header's name for git's deleted file mode
    with pytest.raises(PatchError, match="names /dev/null"):
        patch.parse("diff --git a/m.py /dev/null\n")


@pytest.mark.parametrize(
    "text, message",
    [
        (HEAD + "index 1234567..89abcde 100644\nnote\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n", "after text"),
        (HEAD + "note\nnew file mode 100644\n", "after text that ends the git header"),
        ("--- a/m.py\nnote\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n", "does not follow its file's --- line"),
        (GOOD + "\n@@ -9 +9 @@\n-x\n+y\n", "after text"),
        (GOOD + "-x\n", "more lines"),
        (GOOD.replace("@@ -1,3 +1,3 @@", "@@ -1,3 +1,3"), "bad header"),  # no closing @@
    ],
)
def test_lines_unidiff_passes_over_are_accounted_for(text: str, message: str):
    unidiff.PatchSet(text)  # reads without an error: these lines are text or header to it
    with pytest.raises(PatchError, match=message):
        patch.parse(text)


@pytest.mark.parametrize(
    "hunk, message",
    [
        ("@@ -1,3 +1,3 @@\n a\n-b\n+B\n\r\n", "not a hunk line"),  # unidiff: a blank context line
        ("@@ -1,3 +1,3 @@\n a\n\\ x\n-b\n+B\n c\n", "stray"),  # git's marker is 12 characters or more
        ("@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n", "stray"),
        ("@@ -1 +1 @@\n-a\n\\ No newline at end of file\n\\ No newline at end of file\n+b\n", "two 'No newline'"),
        ("@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n", "after 'No newline"),
        ("@@ -1 +1 @@\n-a\n+b", "mid-line"),
    ],
)
def test_hunk_lines_are_read_as_git_reads_them(hunk: str, message: str):
    text = HEAD + "--- a/m.py\n+++ b/m.py\n" + hunk
    unidiff.PatchSet(text)
    with pytest.raises(PatchError, match=message):
        patch.parse(text)


@pytest.mark.parametrize(
    "text, message",
    [
        (HEAD + "index 1234567..89abcde 100644\n@@ -1 +1 @@\n-a\n+b\n", "hunks without ---/\\+\\+\\+ lines"),
        (HEAD + "--- a/m.py\n+++ b/m.py\n", "but no hunk"),
        (HEAD + "index 1234567..89abcde 100644\n", "no change"),
        (HEAD + "new file mode 100644\n--- /dev/null\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n", "creates the file but"),
        (HEAD + "deleted file mode 100644\n--- a/m.py\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n", "deletes the file but"),
        (GOOD + GOOD, "twice"),
    ],
)
def test_a_files_hunks_must_agree_with_its_header(text: str, message: str):
    with pytest.raises(PatchError, match=message):
        patch.parse(text)


def test_an_empty_context_line_counts_as_context():
    stripped = GOOD.replace(" a\n", "\n")
    assert patch.apply(one(stripped), b"\nb\nc\n") == b"\nB\nc\n"


# Deliberate differences from git apply: no fuzz, offsets carried from hunk to hunk.

FUNCS = b"".join(b"def f%d():\n    return %d\n" % (i, i) for i in range(40))


def test_hunks_apply_at_an_offset_but_never_with_fuzz():
    fd = one(patch.render("m.py", FUNCS, FUNCS.replace(b"return 15\n", b"return 150\n")))
    shifted = b"# a header\n" * 7 + FUNCS
    assert patch.apply(fd, shifted) == shifted.replace(b"return 15\n", b"return 150\n")
    with pytest.raises(HunkFailed) as failed:
        patch.apply(fd, FUNCS.replace(b"return 14\n", b"return 41\n"))
    assert "return 41" in failed.value.nearest and failed.value.index == 1 and failed.value.path == "m.py"


def test_the_offset_of_one_hunk_is_carried_to_the_next():
    after = FUNCS.replace(b"return 5\n", b"return 50\n").replace(b"return 30\n", b"return 300\n")
    fd = one(patch.render("m.py", FUNCS, after))
    assert len(fd.hunks) == 2
    shifted = b"# header\n" * 25 + FUNCS
    assert patch.apply(fd, shifted) == b"# header\n" * 25 + after


def test_a_later_hunk_is_never_placed_before_the_one_before_it():
    repeated = b"a\nb\nc\nd\ne\nf\ng\nh\n" * 3
    after = repeated.replace(b"d\n", b"D\n", 2).replace(b"D\n", b"d\n", 1)  # edits the second "d" only
    fd = one(patch.render("m.py", repeated, after))
    assert patch.apply(fd, repeated) == after
    two = one(patch.render("m.py", repeated, repeated.replace(b"d\n", b"X\n")))
    assert patch.apply(two, repeated) == repeated.replace(b"d\n", b"X\n")


def test_apply_chain_equals_applying_one_after_the_other():
    v1 = FUNCS.replace(b"return 3\n", b"return 33\n")
    v2 = v1.replace(b"return 20\n", b"return 22\n") + b"def g():\n    pass\n"
    first = one(patch.render("m.py", FUNCS, v1))
    second = one(patch.render("m.py", v1, v2))
    assert patch.apply_chain([first, second], FUNCS) == patch.apply(second, patch.apply(first, FUNCS)) == v2
    create = one(patch.render("m.py", None, FUNCS))
    delete = one(patch.render("m.py", v2, None))
    assert patch.apply_chain([create, first, second, delete], None) is None


def test_render_needs_context_and_renders_nothing_for_no_change():
    assert patch.render("m.py", b"a\n", b"a\n") == ""
    assert patch.render("m.py", None, None) == ""
    with pytest.raises(ValueError):
        patch.render("m.py", b"a\n", b"b\n", context=0)


def test_public_names():
    assert set(patch.__all__) >= {
        "FileDiff",
        "Hunk",
        "HunkFailed",
        "apply",
        "apply_chain",
        "index",
        "FileEntry",
        "render",
        "ENC",
        "ERRORS",
        "split_files",
    }
    assert patch.split_files is patch.parse
    assert (patch.ENC, patch.ERRORS) == ("utf-8", "surrogateescape")
    hunk = one(GOOD).hunks[0]
    assert hunk.old == ("a\n", "b\n", "c\n") and hunk.new == ("a\n", "B\n", "c\n")
    assert hunk.reversed().reversed() == hunk
