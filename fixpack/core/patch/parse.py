"""Read a patch (plain, git or mbox) into one FileDiff per file, or cut it into files cheaply.

Files are found by their headers (``diff --git``, or ``---``/``+++`` followed by ``@@ -``); text
before the first header (a mail) and after a file's last hunk (a signature) is ignored, as git
does. A hunk ends where its ``@@`` counts say. Creation and deletion come from ``/dev/null`` in
the ``---``/``+++`` lines or git's ``new file mode``/``deleted file mode``, never from counts.
Binary patches, renames, copies, mode changes, symlinks and submodules are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import ENC, ERRORS, FileDiff, FileEntry, Hunk, PatchError, UnsupportedPatch, split_lines

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DEV_NULL = "/dev/null"
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
# git's extended header lines (apply.c, parse_git_diff_header); "---"/"+++" end the header.
_EXTENDED = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "copy from ",
    "copy to ",
    "rename old ",
    "rename new ",
    "rename from ",
    "rename to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
    "GIT binary patch",
    "Binary files ",
)
_HEADS = frozenset("d-@B")  # the first characters of the lines _cut looks at
_REGULAR = "100644"
_EXECUTABLE = "100755"


@dataclass(frozen=True, slots=True)
class _Header:
    path: str
    old_path: str | None
    new_path: str | None
    creates: bool
    deletes: bool
    start: int  # the header's first line
    body: int  # the first line after the header
    has_hunks: bool  # a ---/+++ pair was seen: hunks must follow


def _unquote(field: str) -> tuple[str, str]:
    """A C-style quoted name as git writes it (``"a/foo\\tbar"``, octal bytes) and the text after it."""
    out = bytearray()
    i = 1
    while i < len(field):
        c = field[i]
        if c == '"':
            return out.decode(ENC, ERRORS), field[i + 1 :]
        if c == "\\":
            esc = field[i + 1 : i + 2]
            if esc and esc in "01234567":
                digits = field[i + 1 : i + 4]
                if len(digits) != 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                    raise PatchError(f"bad octal escape in quoted name {field!r}")
                out.append(int(digits, 8))
                i += 4
                continue
            if esc not in _ESCAPES:
                raise PatchError(f"bad escape in quoted name {field!r}")
            out.append(_ESCAPES[esc])
            i += 2
            continue
        out += c.encode(ENC, ERRORS)
        i += 1
    raise PatchError(f"unterminated quoted name {field!r}")


def _chomp(line: str) -> str:
    line = line[:-1] if line.endswith("\n") else line
    return line[:-1] if line.endswith("\r") else line


def _name(field: str) -> str:
    """The name on a ``---``/``+++`` line: quoted, or up to a tab (git adds one after names with
    spaces; traditional diffs put a timestamp there)."""
    field = _chomp(field)
    if field.startswith('"'):
        return _unquote(field)[0]
    return field.split("\t", 1)[0]


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _git_names(rest: str) -> tuple[str, str] | None:
    """The two names of a ``diff --git`` line, or None where spaces make them ambiguous."""
    rest = _chomp(rest)
    if rest.startswith('"'):
        a, tail = _unquote(rest)
        if not tail.startswith(" "):
            return None
        tail = tail[1:]
        return a, _unquote(tail)[0] if tail.startswith('"') else tail
    quote = rest.find(' "')
    if quote >= 0:
        return rest[:quote], _unquote(rest[quote + 1 :])[0]
    spaces = [i for i, c in enumerate(rest) if c == " "]
    if len(spaces) == 1:
        return rest[: spaces[0]], rest[spaces[0] + 1 :]
    for i in spaces:  # "a/x y b/x y": the split where both sides name the same file
        if _strip(rest[:i]) == _strip(rest[i + 1 :]):
            return rest[:i], rest[i + 1 :]
    return None


def _mode(line: str, prefix: str) -> str:
    return _chomp(line)[len(prefix) :].strip()


def _git_header(lines: list[str], start: int) -> _Header:
    names = _git_names(lines[start][len("diff --git ") :])
    guess = _strip(names[1]) if names else None
    found: dict[str, str] = {}
    minus = plus = None
    j = start + 1
    while j < len(lines):
        line = lines[j]
        if line.startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ "):
            minus, plus = _name(line[4:]), _name(lines[j + 1][4:])
            j += 2
            break
        prefix = next((p for p in _EXTENDED if line.startswith(p)), None)
        if prefix is None:
            break
        found.setdefault(prefix, line)
        j += 1
    named = [_strip(n) for n in (plus, minus) if n not in (None, _DEV_NULL)]
    where = named[0] if named else guess
    if "GIT binary patch" in found or "Binary files " in found:
        raise UnsupportedPatch("binary patch: fixpack applies text diffs only", where)
    for prefix, what in (("rename from ", "rename"), ("rename old ", "rename"), ("copy from ", "copy")):
        if prefix in found:
            raise UnsupportedPatch(f"{what} ({_chomp(found[prefix])!r}): fixpack does not {what} files", where)
    if "old mode " in found or "new mode " in found:
        raise UnsupportedPatch("mode change: fixpack does not change file modes", where)
    new_mode = _mode(found["new file mode "], "new file mode ") if "new file mode " in found else None
    gone_mode = _mode(found["deleted file mode "], "deleted file mode ") if "deleted file mode " in found else None
    index_mode = _chomp(found["index "]).split(" ")[2:3] if "index " in found else []
    if new_mode is not None and new_mode != _REGULAR:
        raise UnsupportedPatch(f"creates a file with mode {new_mode}: fixpack creates regular files only", where)
    for mode in (gone_mode, *index_mode):
        if mode is not None and mode not in (_REGULAR, _EXECUTABLE):
            raise UnsupportedPatch(f"mode {mode} (a symlink or submodule): fixpack changes regular files only", where)
    creates = new_mode is not None or minus == _DEV_NULL
    deletes = gone_mode is not None or plus == _DEV_NULL
    if minus is None:
        if names is None:
            raise PatchError(f"cannot tell the file's name from {_chomp(lines[start])!r}")
        old, new = _strip(names[0]), _strip(names[1])
    else:
        old, new = _strip(minus), _strip(plus)  # type: ignore[arg-type]
        if names is not None:
            for side, named in ((minus, names[0]), (plus, names[1])):
                if side != _DEV_NULL and _strip(side) != _strip(named):  # type: ignore[arg-type]
                    raise PatchError(f"inconsistent names: {side!r} under {_chomp(lines[start])!r}", where)
        if (new_mode is not None and minus != _DEV_NULL) or (gone_mode is not None and plus != _DEV_NULL):
            raise PatchError("new/deleted file mode but ---/+++ do not say /dev/null", where)
    return _finish(old, new, creates, deletes, start, j, minus is not None)


def _finish(old: str, new: str, creates: bool, deletes: bool, start: int, body: int, hunks: bool) -> _Header:
    old_path = None if creates else old
    new_path = None if deletes else new
    path = new_path or old_path
    if creates and deletes or path is None or path == _DEV_NULL:
        raise PatchError(
            "the diff both creates and deletes the file (/dev/null on both sides?)",
            next((name for name in (new, old) if name != _DEV_NULL), None),
        )
    if old_path is not None and new_path is not None and old_path != new_path:
        raise UnsupportedPatch(f"old and new paths differ ({old_path!r}): fixpack does not rename files", new_path)
    return _Header(path, old_path, new_path, creates, deletes, start, body, hunks)


def _cut(text: str) -> tuple[list[str], list[_Header]]:
    """The patch's lines and its file headers. A header can never be inside a valid hunk: hunk lines
    start with a space, ``+``, ``-`` or ``\\``, and a ``---``/``+++`` pair inside one is never
    followed by ``@@ -``."""
    lines = split_lines(text)
    headers: list[_Header] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line[:1] not in _HEADS:  # most lines: hunk context and additions
            i += 1
            continue
        if line.startswith("diff --git "):
            header = _git_header(lines, i)
        elif line.startswith("--- ") and i + 2 < n and lines[i + 1].startswith("+++ ") and lines[i + 2][:4] == "@@ -":
            minus, plus = _name(line[4:]), _name(lines[i + 1][4:])
            header = _finish(_strip(minus), _strip(plus), minus == _DEV_NULL, plus == _DEV_NULL, i, i + 2, True)
        elif not headers and line.startswith("@@ -"):
            raise PatchError(f"line {i + 1}: a hunk without a file header")
        elif line.startswith("Binary files ") and _chomp(line).endswith(" differ"):
            match = re.match(r"Binary files (.*) and (.*) differ", _chomp(line))
            raise UnsupportedPatch("binary patch: fixpack applies text diffs only", _strip(match[2]) if match else None)
        else:
            i += 1
            continue
        headers.append(header)
        i = header.body
    if not headers:
        raise PatchError("no file diff in the patch (not a unified diff?)")
    seen: set[str] = set()
    for header in headers:
        if header.path in seen:
            raise PatchError("the file appears twice in one patch", header.path)
        seen.add(header.path)
    return lines, headers


def _slices(lines: list[str], headers: list[_Header]) -> list[tuple[_Header, int, str]]:
    """Each header with the line where its file ends and its text (header to next header)."""
    ends = [h.start for h in headers[1:]] + [len(lines)]
    return [(h, end, "".join(lines[h.start : end])) for h, end in zip(headers, ends)]


def index(text: str) -> list[FileEntry]:
    """Cut a patch into its files by their headers alone, which is all the already-applied path
    needs; hunks are parsed only when a change must run. Decides creates/deletes as ``parse``."""
    lines, headers = _cut(text)
    return [FileEntry(h.path, t, h.creates, h.deletes) for h, _, t in _slices(lines, headers)]


def _hunk(lines: list[str], at: int, end: int, number: int, path: str) -> tuple[Hunk, int]:
    """The hunk whose header is ``lines[at]``, and the line after it."""
    match = _HUNK.match(lines[at])
    if match is None:
        raise PatchError(f"hunk #{number}: bad header {_chomp(lines[at])!r}", path)
    old_start, new_start = int(match[1]), int(match[3])
    old_count = 1 if match[2] is None else int(match[2])
    new_count = 1 if match[4] is None else int(match[4])
    old_left, new_left = old_count, new_count
    items: list[list[str]] = []
    closed = {"-": False, "+": False}  # a side ended by "\ No newline at end of file"
    j = at + 1

    def marker(j: int) -> None:
        line = lines[j]
        if len(line) < 12 or not line.startswith("\\ ") or not items:
            raise PatchError(f"hunk #{number}: stray {_chomp(line)!r}", path)
        tag, text = items[-1]
        if not text.endswith("\n"):
            raise PatchError(f"hunk #{number}: two 'No newline' markers for one line", path)
        items[-1][1] = text[:-1]
        for side in ("-", "+") if tag == " " else (tag,):
            closed[side] = True

    while old_left > 0 or new_left > 0:
        if j >= end:
            where = "the patch ends" if j >= len(lines) else "the next file begins"
            raise PatchError(
                f"hunk #{number} is truncated: {where} with {old_left} old and {new_left} new lines still to come"
                f" (@@ -{old_start},{old_count} +{new_start},{new_count} @@)",
                path,
            )
        line = lines[j]
        if not line.endswith("\n"):
            raise PatchError(f"hunk #{number}: the patch ends mid-line (truncated?)", path)
        tag = line[0]
        if tag == "\\":
            marker(j)
            j += 1
            continue
        if tag == "\n":  # an empty context line, as some tools write " \n"
            tag, text = " ", "\n"
        elif tag in " -+":
            text = line[1:]
        else:
            raise PatchError(
                f"hunk #{number}: patch line {j + 1} {_chomp(line)[:40]!r} is not a hunk line "
                f"(the @@ counts do not match the lines?)",
                path,
            )
        if tag != "+":
            old_left -= 1
        if tag != "-":
            new_left -= 1
        if old_left < 0 or new_left < 0:
            raise PatchError(f"hunk #{number}: more lines than its @@ header counts", path)
        if (tag != "+" and closed["-"]) or (tag != "-" and closed["+"]):
            raise PatchError(f"hunk #{number}: a line after 'No newline at end of file'", path)
        items.append([tag, text])
        j += 1
    if j < end and lines[j].startswith("\\ "):
        marker(j)
        j += 1
    hunk = Hunk(old_start, old_count, new_start, new_count, tuple((t, x) for t, x in items))
    tags = {t for t, _ in items}
    if not tags & {"-", "+"}:
        raise PatchError(f"hunk #{number} changes nothing", path)
    whole = (old_count == 0 and old_start == 0) or (old_count > 0 and old_start == 1)
    if " " not in tags and not whole:
        # git would anchor such a hunk at the end of the file (without --unidiff-zero): refuse instead.
        raise PatchError(f"hunk #{number} has no context lines (a --unified=0 diff?); fixpack needs context", path)
    return hunk, j


def _file(lines: list[str], header: _Header, end: int, text: str) -> FileDiff:
    path = header.path
    hunks: list[Hunk] = []
    j = header.body
    while j < end and lines[j].startswith("@@ -"):
        hunk, j = _hunk(lines, j, end, len(hunks) + 1, path)
        hunks.append(hunk)
    if header.has_hunks and not hunks and not (header.creates or header.deletes):
        raise PatchError("---/+++ lines but no hunk", path)
    if not header.has_hunks and not (header.creates or header.deletes):
        raise PatchError("no change (a git header without hunks)", path)
    if j < end:
        after = lines[j]
        if hunks and after[:1] in (" ", "+", "-", "\\") and _chomp(after) != "-- ":
            raise PatchError(f"hunk #{len(hunks)}: more lines than its @@ header counts", path)
        if not hunks and after.startswith("@@ -"):
            raise PatchError("hunks without ---/+++ lines", path)
        for k in range(j, end):
            if lines[k].startswith("@@ -"):
                raise PatchError(f"patch line {k + 1}: a hunk after text that is not part of a hunk", path)
    if header.creates and any(h.old_count for h in hunks):
        raise PatchError("creates the file but a hunk has old lines", path)
    if header.deletes and any(h.new_count for h in hunks):
        raise PatchError("deletes the file but a hunk has new lines", path)
    return FileDiff(path, text, tuple(hunks), header.creates, header.deletes, header.old_path, header.new_path)


def parse(text: str) -> list[FileDiff]:
    """Parse a patch (plain, git or mbox) into one FileDiff per file. Raises PatchError."""
    lines, headers = _cut(text)
    return [_file(lines, h, end, t) for h, end, t in _slices(lines, headers)]


split_files = parse
