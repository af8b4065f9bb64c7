"""Read a patch (plain, git or mbox) into one FileDiff per file: unidiff reads it, this adapter
turns its PatchSet into fixpack's model and answers what unidiff leaves open.

- Creation and deletion come from ``/dev/null`` in the ``---``/``+++`` lines or git's ``new file
  mode``/``deleted file mode``, never from counts (unidiff calls an emptied file removed).
- git's C-style quoted names (``"a/caf\\303\\251.py"``) are unquoted (unidiff keeps the quotes).
- Binary patches, renames, copies, mode changes, symlinks and submodules are refused.
- unidiff passes over some malformed text (lines after a hunk become the next file's header or
  are dropped), so every line of the input must be accounted for by what it read: its numbered
  hunk lines, the git header it kept, the ``---``/``+++`` pair. What it did not read is allowed
  before the first file (a mail) and after a file's last hunk (a signature, the next mail) when
  it does not look like more hunk lines, as git allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from unidiff import Hunk as RawHunk
from unidiff import PatchedFile, PatchSet, UnidiffParseError
from unidiff.constants import (
    LINE_TYPE_EMPTY,
    LINE_TYPE_NO_NEWLINE,
    RE_DIFF_GIT_HEADER,
    RE_DIFF_GIT_HEADER_NO_PREFIX,
    RE_DIFF_GIT_HEADER_URI_LIKE,
    RE_SOURCE_FILENAME,
    RE_TARGET_FILENAME,
)

from .model import ENC, ERRORS, FileDiff, FileEntry, Hunk, PatchError, UnsupportedPatch, split_lines

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
_HUNK_LINES = (" ", "+", "-", "\\")
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
    raw: PatchedFile


def _chomp(line: str) -> str:
    line = line[:-1] if line.endswith("\n") else line
    return line[:-1] if line.endswith("\r") else line


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


def _name(field: str) -> str:
    """A name as unidiff read it from a header line: unquoted, less a CR of a CRLF patch."""
    field = _chomp(field)
    return _unquote(field)[0] if field.startswith('"') else field


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _label(raw: PatchedFile) -> str | None:
    """The path to name in an error about a file unidiff was reading."""
    try:
        names = [_name(n) for n in (raw.target_file, raw.source_file) if n]
    except PatchError:
        return None
    return next((_strip(n) for n in names if n != _DEV_NULL), None)


class _Reading(PatchSet):
    """A PatchSet that keeps, outside itself, each file as unidiff appends it: its constructor
    drops the files read before an error, and the error is reported on the file being read."""

    def __init__(self, lines: Iterator[str], seen: list[PatchedFile]) -> None:
        self.seen = seen
        super().__init__(lines)

    def append(self, file: PatchedFile) -> None:
        self.seen.append(file)
        super().append(file)


def _read(lines: list[str]) -> list[PatchedFile]:
    read = 0

    def counted() -> Iterator[str]:  # the lines, counting how far unidiff got
        nonlocal read
        for line in lines:
            read += 1
            yield line

    seen: list[PatchedFile] = []
    try:
        _Reading(counted(), seen)
    except UnidiffParseError as exc:
        raise _refusal(str(exc), seen, lines, read) from None
    return seen


def _end(raw: RawHunk) -> int:
    """The line after a hunk as unidiff read it: its numbered lines, then the markers it added."""
    end = 0
    for line in raw:
        if line.diff_line_no is not None:
            end = line.diff_line_no
        elif line.line_type == LINE_TYPE_NO_NEWLINE:
            end += 1
        else:
            break
    return end


def _refusal(message: str, files: list[PatchedFile], lines: list[str], read: int) -> PatchError:
    """unidiff's parse error as fixpack's, with the path when known."""
    path = _label(files[-1]) if files else None
    number = len(files[-1]) + 1 if files else 1  # the hunk being read is not in the file yet
    at = f"patch line {read}"
    if message.startswith("Hunk is shorter"):
        if not lines[-1].endswith("\n"):
            return PatchError(f"hunk #{number}: the patch ends mid-line (truncated?)", path)
        return PatchError(f"hunk #{number} is truncated: the patch ends before its @@ counts are met", path)
    if message.startswith("Hunk is longer"):
        return PatchError(f"hunk #{number}: more lines than its @@ header counts", path)
    if message.startswith("Hunk diff line expected"):
        return PatchError(
            f"hunk #{number}: {at} {_chomp(lines[read - 1])[:40]!r} is not a hunk line"
            " (the @@ counts do not match the lines?)",
            path,
        )
    if message.startswith("Unexpected hunk found"):
        if not files:
            return PatchError(f"{at}: a hunk without a file header")
        if files[-1]:  # the line after the file's last hunk, which unidiff passed over as text
            after = lines[_end(files[-1][-1])]
            if after[:1] in _HUNK_LINES and _chomp(after) != "-- ":
                return PatchError(f"hunk #{len(files[-1])}: more lines than its @@ header counts", path)
        return PatchError(f"{at}: a hunk after text that is not part of a hunk", path)
    return PatchError(f"{at}: {message.splitlines()[0] if message else 'unreadable'}", path)


def _git_header(lines: list[str], raw: PatchedFile) -> _Header:
    start = raw.diff_line_no - 1
    info = list(raw.patch_info or ())
    # git's own header lines, in place: unidiff also keeps here text it could not place, and reads
    # ---/+++ between them without keeping those.
    run = 1
    while run < len(info) and info[run].startswith(_EXTENDED) and lines[start + run] == info[run]:
        run += 1
    found: dict[str, str] = {}
    for line in info[1:run]:
        found.setdefault(next(p for p in _EXTENDED if line.startswith(p)), line)
    at = start + run
    pair = at + 1 < len(lines) and lines[at].startswith("--- ") and lines[at + 1].startswith("+++ ")
    minus = plus = None
    if pair:
        minus = _name(RE_SOURCE_FILENAME.match(lines[at])["filename"])  # type: ignore[index]
        plus = _name(RE_TARGET_FILENAME.match(lines[at + 1])["filename"])  # type: ignore[index]
    names = RE_DIFF_GIT_HEADER.match(info[0]) or RE_DIFF_GIT_HEADER_URI_LIKE.match(info[0])
    names = names or RE_DIFF_GIT_HEADER_NO_PREFIX.match(info[0])
    old_name, new_name = _name(names["source"]), _name(names["target"])  # type: ignore[index]
    named = [_strip(n) for n in (plus, minus) if n not in (None, _DEV_NULL)]
    where = named[0] if named else _strip(new_name)
    if raw.is_binary_file or "GIT binary patch" in found or "Binary files " in found:
        raise UnsupportedPatch("binary patch: fixpack applies text diffs only", where)
    for prefix, what in (("rename from ", "rename"), ("rename old ", "rename"), ("copy from ", "copy")):
        if prefix in found:
            raise UnsupportedPatch(f"{what} ({_chomp(found[prefix])!r}): fixpack does not {what} files", where)
    if "old mode " in found or "new mode " in found:
        raise UnsupportedPatch("mode change: fixpack does not change file modes", where)
    new_mode = _chomp(found["new file mode "])[14:].strip() if "new file mode " in found else None
    gone_mode = _chomp(found["deleted file mode "])[18:].strip() if "deleted file mode " in found else None
    index_mode = _chomp(found["index "]).split(" ")[2:3] if "index " in found else []
    if new_mode is not None and new_mode != _REGULAR:
        raise UnsupportedPatch(f"creates a file with mode {new_mode}: fixpack creates regular files only", where)
    for mode in (gone_mode, *index_mode):
        if mode is not None and mode not in (_REGULAR, _EXECUTABLE):
            raise UnsupportedPatch(f"mode {mode} (a symlink or submodule): fixpack changes regular files only", where)
    body = at + 2 if pair else at
    rest = info[run:]
    if rest and (len(raw) or lines[body : body + len(rest)] != rest):
        # text after a header is allowed (a headers-only file, then a mail), not before hunks
        raise PatchError(f"{_chomp(rest[0])[:40]!r} inside a git header is not a git header line", where)
    creates = new_mode is not None or minus == _DEV_NULL
    deletes = gone_mode is not None or plus == _DEV_NULL
    if minus is None or plus is None:
        old, new = _strip(old_name), _strip(new_name)
    else:
        old, new = _strip(minus), _strip(plus)
        for side, name in ((minus, old_name), (plus, new_name)):
            if side != _DEV_NULL and _strip(side) != _strip(name):
                raise PatchError(f"inconsistent names: {side!r} under {_chomp(info[0])!r}", where)
        if (new_mode is not None and minus != _DEV_NULL) or (gone_mode is not None and plus != _DEV_NULL):
            raise PatchError("new/deleted file mode but ---/+++ do not say /dev/null", where)
    return _finish(old, new, creates, deletes, start, body, pair, raw)


def _plain_header(lines: list[str], raw: PatchedFile) -> _Header:
    plus_at = raw.diff_line_no - 1
    if plus_at < 1 or not lines[plus_at - 1].startswith("--- "):
        raise PatchError(f"patch line {plus_at + 1}: a +++ line without a --- line before it", _label(raw))
    minus, plus = _name(raw.source_file), _name(raw.target_file)
    return _finish(
        _strip(minus), _strip(plus), minus == _DEV_NULL, plus == _DEV_NULL, plus_at - 1, plus_at + 1, True, raw
    )


def _finish(
    old: str, new: str, creates: bool, deletes: bool, start: int, body: int, hunks: bool, raw: PatchedFile
) -> _Header:
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
    return _Header(path, old_path, new_path, creates, deletes, start, body, hunks, raw)


def _headers(text: str) -> tuple[list[str], list[_Header]]:
    """The patch's lines and one header per file, every header refusal before any hunk is built."""
    lines = split_lines(text)
    headers: list[_Header] = []
    for raw in _read(lines):
        if lines[raw.diff_line_no - 1].startswith("diff --git "):
            headers.append(_git_header(lines, raw))
        elif raw.is_binary_file:
            raise UnsupportedPatch("binary patch: fixpack applies text diffs only", _label(raw))
        else:
            headers.append(_plain_header(lines, raw))
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


def _hunk(lines: list[str], raw: RawHunk, at: int, number: int, path: str) -> tuple[Hunk, int]:
    """The hunk whose @@ line is ``lines[at]``, and the line after its last line."""
    items: list[list[str]] = []
    closed = {"-": False, "+": False}  # a side ended by "\ No newline at end of file"
    j = at + 1
    for line in raw:
        if line.diff_line_no is None:
            # read after the counts were met: a blank line (text after the hunk, not part of it)
            # or a "No newline" marker, which must be the very next line
            if line.line_type == LINE_TYPE_EMPTY or not lines[j].startswith("\\"):
                break
        elif line.diff_line_no != j + 1:
            raise PatchError(f"hunk #{number}: patch line {j + 1} was not read as part of it", path)
        if line.line_type == LINE_TYPE_NO_NEWLINE:
            if len(lines[j]) < 12 or not lines[j].startswith("\\ ") or not items:
                raise PatchError(f"hunk #{number}: stray {_chomp(lines[j])!r}", path)
            tag, text = items[-1]
            if not text.endswith("\n"):
                raise PatchError(f"hunk #{number}: two 'No newline' markers for one line", path)
            items[-1][1] = text[:-1]
            for side in ("-", "+") if tag == " " else (tag,):
                closed[side] = True
            j += 1
            continue
        if not line.value.endswith("\n"):
            raise PatchError(f"hunk #{number}: the patch ends mid-line (truncated?)", path)
        if lines[j][:1] not in _HUNK_LINES and lines[j] != "\n":  # unidiff reads "\r\n" as a blank line
            raise PatchError(
                f"hunk #{number}: patch line {j + 1} {_chomp(lines[j])[:40]!r} is not a hunk line "
                f"(the @@ counts do not match the lines?)",
                path,
            )
        tag = line.line_type
        if (tag != "+" and closed["-"]) or (tag != "-" and closed["+"]):
            raise PatchError(f"hunk #{number}: a line after 'No newline at end of file'", path)
        items.append([tag, line.value])
        j += 1
    hunk = Hunk(
        raw.source_start, raw.source_length, raw.target_start, raw.target_length, tuple((t, x) for t, x in items)
    )
    tags = {t for t, _ in items}
    if not tags & {"-", "+"}:
        raise PatchError(f"hunk #{number} changes nothing", path)
    whole = (hunk.old_count == 0 and hunk.old_start == 0) or (hunk.old_count > 0 and hunk.old_start == 1)
    if " " not in tags and not whole:
        # git would anchor such a hunk at the end of the file (without --unidiff-zero): refuse instead.
        raise PatchError(f"hunk #{number} has no context lines (a --unified=0 diff?); fixpack needs context", path)
    return hunk, j


def _file(lines: list[str], header: _Header, end: int, text: str) -> FileDiff:
    path = header.path
    hunks: list[Hunk] = []
    j = header.body
    if header.raw and not header.has_hunks:
        raise PatchError("hunks without ---/+++ lines", path)
    for number, raw in enumerate(header.raw, 1):
        if not raw or raw[0].diff_line_no is None:  # "@@ -1,0 +1,0 @@" as the patch's last line
            raise PatchError(f"hunk #{number} changes nothing", path)
        at = raw[0].diff_line_no - 2
        if at != j:
            raise PatchError(f"patch line {j + 1}: a hunk after text that is not part of a hunk", path)
        hunk, j = _hunk(lines, raw, at, number, path)
        hunks.append(hunk)
    # What unidiff did not read as this file's, up to the next file: a signature, the next mail.
    for k in range(j, end):
        if lines[k].startswith("@@"):  # a hunk header unidiff could not read is text to it
            if k == j:
                raise PatchError(f"hunk #{len(hunks) + 1}: bad header {_chomp(lines[k])!r}", path)
            raise PatchError(f"patch line {k + 1}: a hunk after text that is not part of a hunk", path)
    if hunks and j < end and lines[j][:1] in _HUNK_LINES and _chomp(lines[j]) != "-- ":
        raise PatchError(f"hunk #{len(hunks)}: more lines than its @@ header counts", path)
    if header.has_hunks and not hunks and not (header.creates or header.deletes):
        raise PatchError("---/+++ lines but no hunk", path)
    if not header.has_hunks and not (header.creates or header.deletes):
        raise PatchError("no change (a git header without hunks)", path)
    if header.creates and any(h.old_count for h in hunks):
        raise PatchError("creates the file but a hunk has old lines", path)
    if header.deletes and any(h.new_count for h in hunks):
        raise PatchError("deletes the file but a hunk has new lines", path)
    return FileDiff(path, text, tuple(hunks), header.creates, header.deletes, header.old_path, header.new_path)


def parse(text: str) -> list[FileDiff]:
    """Parse a patch (plain, git or mbox) into one FileDiff per file. Raises PatchError."""
    lines, headers = _headers(text)
    return [_file(lines, h, end, t) for h, end, t in _slices(lines, headers)]


def index(text: str) -> list[FileEntry]:
    """Each file's part of a patch with its path and whether it is created or deleted."""
    return [FileEntry(fd.path, fd.text, fd.creates, fd.deletes) for fd in parse(text)]


split_files = parse
