"""Render one file's change as a git-style diff that ``git apply`` and ``parse``/``apply`` accept.

Lines are split as git splits them (on ``\\n`` only) and compared with their terminators, so a
change of line ending is a change. Names are quoted as git quotes them.
"""

from __future__ import annotations

from .model import ENC, ERRORS, split_lines

_NAMED = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def quote(name: str) -> str:
    """``name`` as git writes it in a header: C-quoted when it holds a control character, a quote,
    a backslash or a non-ASCII byte (git's default core.quotePath)."""
    raw = name.encode(ENC, ERRORS)
    if all(0x20 <= b < 0x7F and b not in (34, 92) for b in raw):
        return name
    out = []
    for b in raw:
        if b in _NAMED:
            out.append("\\" + _NAMED[b])
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _side(name: str) -> str:
    quoted = quote(name)
    return quoted + "\t" if " " in quoted and not quoted.startswith('"') else quoted  # as git does


def _range(start: int, count: int) -> str:
    if count == 1:
        return str(start + 1)
    return f"{start if count == 0 else start + 1},{count}"


def _line(tag: str, text: str) -> str:
    return tag + text if text.endswith("\n") else f"{tag}{text}\n\\ No newline at end of file\n"


def blob_id(content: bytes | None) -> str:
    """git's object id of a file's bytes (``None``: absent, all zeros), as ``git hash-object`` gives it."""
    if content is None:
        return "0" * 40
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def render(path: str, before: bytes | None, after: bytes | None, context: int = 3, blobs: bool = False) -> str:
    """A git-style diff of one file (``None``: absent), with paths as in the upstream repository;
    ``''`` when nothing changes. ``blobs``: with git's ``index`` line (abbreviated blob ids), which
    ``git am -3`` needs to fall back on a three-way merge."""
    if context < 1:
        raise ValueError("context must be at least 1: fixpack refuses diffs without context")
    if before == after:
        return ""
    a = [] if before is None else split_lines(before.decode(ENC, ERRORS))
    b = [] if after is None else split_lines(after.decode(ENC, ERRORS))
    head = f"diff --git {quote('a/' + path)} {quote('b/' + path)}\n"
    if before is None:
        head += "new file mode 100644\n"
    elif after is None:
        head += "deleted file mode 100644\n"
    if blobs:
        mode = "" if before is None or after is None else " 100644"
        head += f"index {blob_id(before)[:7]}..{blob_id(after)[:7]}{mode}\n"
    if not a and not b:  # an empty file created or deleted: git writes no ---/+++ and no hunk
        return head
    out = [
        head,
        f"--- {'/dev/null' if before is None else _side('a/' + path)}\n",
        f"+++ {'/dev/null' if after is None else _side('b/' + path)}\n",
    ]
    import difflib  # diff, record and verify render; an apply does not

    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out.extend(_line(" ", text) for text in a[x1:x2])
                continue
            out.extend(_line("-", text) for text in a[x1:x2])
            out.extend(_line("+", text) for text in b[y1:y2])
    return "".join(out)


def as_git_diff(path: str, patch: str) -> str:
    """A change's diff with the ``diff --git`` line that git's tools read."""
    text = patch if patch.endswith("\n") else patch + "\n"
    return text if text.startswith("diff --git ") else f"diff --git a/{path} b/{path}\n{text}"
