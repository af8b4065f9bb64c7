"""Read a patch (plain, git or mbox) into one FileDiff per file: unidiff parses it, this adapter
turns its PatchSet into fixpack's model and adds what ``git apply`` checks and unidiff does not.

unidiff reads the file headers (``diff --git``, ``---``/``+++``, ``Binary files``), git's mode lines
(``new``/``deleted file mode`` put ``/dev/null`` on their side; ``old``/``new mode`` and ``index`` give
the modes) and each hunk by its ``@@`` counts, numbering the lines it reads. It raises on a hunk line
that starts with none of `` -+\\`` and is not blank, a hunk longer or shorter than its counts, a hunk,
marker or ``+++`` with no file to belong to, and a git ``+++`` naming another file.

The adapter's duties, each with its test in tests/test_patch_engine.py:

1. unidiff's refusals told apart by the input line where it stopped, never by its messages
   (test_unidiff_refusals_are_told_from_the_line_where_it_stopped).
2. Creation and deletion from ``/dev/null`` in ``---``/``+++`` or git's mode lines, never from counts
   (test_an_emptied_file_is_not_a_deletion_though_unidiff_says_so).
3. git's C-style quoted names unquoted (test_quoted_names_are_unquoted_though_unidiff_keeps_the_quotes).
4. Binary patches, renames, copies, mode changes, symlinks and submodules refused: renames and copies
   from git's header lines, the rest as unidiff reports it (test_unsupported_changes_are_refused_naming_the_path).
5. A file's names agree: git's ``---`` line (unidiff checks only ``+++``) names the header's file, or
   ``/dev/null`` under ``new file mode``; ``diff --git`` names no ``/dev/null`` (unidiff takes it for a
   mode line's); old and new paths are one (test_a_files_names_must_agree).
6. Every line unidiff passed over accounted for: text is allowed before the first file (a mail) and
   after a file's last hunk (a signature), not as more hunk lines after a hunk's counts, an unreadable
   ``@@`` line, text in a git header or a mode line after it, a ``+++`` apart from its ``---``
   (test_lines_unidiff_passes_over_are_accounted_for).
7. Hunk lines read as git reads them: a line starting with ``\\r`` is no blank context line, each ends
   in ``\\n``, a "No newline" marker follows a line, once, and ends its side
   (test_hunk_lines_are_read_as_git_reads_them).
8. A hunk changes something and has context unless it covers the file
   (test_context_free_hunks_are_refused_unless_they_cover_the_file, test_garbage_is_refused).
9. A file's hunks agree with its header, and a path appears once (test_a_files_hunks_must_agree_with_its_header).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from unidiff import Hunk as RawHunk
from unidiff import PatchedFile, PatchSet, UnidiffParseError
from unidiff.constants import (
    DEV_NULL,
    LINE_TYPE_NO_NEWLINE,
    RE_HUNK_BODY_LINE,
    RE_HUNK_EMPTY_BODY_LINE,
    RE_HUNK_HEADER,
    RE_NO_NEWLINE_MARKER,
    RE_SOURCE_FILENAME,
)

from .model import ENC, ERRORS, FileDiff, FileEntry, Hunk, PatchError, UnsupportedPatch, split_lines

# git's quoting of a name (quote.c): these escapes, and three octal digits for any other byte
_QUOTED = re.compile(r'"((?:[^"\\]|\\[abtnvfr"\\]|\\[0-3][0-7]{2})*)"')
_ESCAPES = dict(zip(b'abtnvfr"\\', b'\a\b\t\n\v\f\r"\\'))
# git's extended header lines (apply.c, parse_git_diff_header). unidiff reads the mode lines and keeps
# the others as text: where a header ends, and its renames and copies, are found with these.
_MODE_LINES = ("old mode ", "new mode ", "deleted file mode ", "new file mode ", "index ")
_EXTENDED = (
    *_MODE_LINES,
    *("copy from ", "copy to ", "rename old ", "rename new ", "rename from ", "rename to "),
    *("similarity index ", "dissimilarity index "),
)
_SIDES = {" ": "-+", "-": "-", "+": "+"}  # the sides of the file a hunk line is on


@dataclass(frozen=True, slots=True)
class _Header:
    path: str
    old_path: str | None  # None: /dev/null
    new_path: str | None
    start: int  # the header's first line
    body: int  # the line after the header, where its first hunk must start
    paired: bool  # it has ---/+++ lines
    raw: PatchedFile


def _show(line: str) -> str:
    return repr(line.rstrip("\r\n")[:40])


def _unquote(field: str) -> str:
    """A C-style quoted name as git writes it (``"a/foo\\tbar"``, ``\\303\\251``: a byte in octal)."""
    quoted = _QUOTED.match(field)
    if quoted is None:
        raise PatchError(f"bad quoted name {field!r} (an escape git does not write, or no closing quote)")

    def byte(escape: re.Match[bytes]) -> bytes:
        code = escape[1]
        return bytes([int(code, 8) if len(code) == 3 else _ESCAPES[code[0]]])

    return re.sub(rb"\\([0-7]{3}|.)", byte, quoted[1].encode(ENC, ERRORS)).decode(ENC, ERRORS)


def _name(field: str) -> str:
    """A name as unidiff read it from a header line: unquoted, less the CR of a CRLF patch."""
    field = field.removesuffix("\r")
    return _unquote(field) if field.startswith('"') else field


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _line(number: int | None) -> int:
    """A line number unidiff gave (1-based); its types allow None, but it numbers every line and
    file it reads from a patch."""
    if number is None:
        raise PatchError("unidiff gave no line number for a part of the patch")
    return number


def _label(raw: PatchedFile) -> str | None:
    """The path to name in an error about a file unidiff read."""
    names = [_name(n) for n in (raw.target_file, raw.source_file) if n]
    return next((_strip(n) for n in names if n != DEV_NULL), None)


class _Reading(PatchSet):
    """A PatchSet that keeps, outside itself, each file as unidiff appends it: its constructor
    drops the files read before an error, and the error concerns the last of them."""

    def __init__(self, lines: Iterator[str], seen: list[PatchedFile]) -> None:
        self.seen = seen
        super().__init__(lines)

    def append(self, file: PatchedFile) -> None:
        self.seen.append(file)
        super().append(file)


def _read(lines: list[str]) -> list[PatchedFile]:
    stopped = 0  # the line unidiff is reading; len(lines) once it asked for more than there is

    def counted() -> Iterator[str]:
        nonlocal stopped
        for line in lines:
            yield line
            stopped += 1

    seen: list[PatchedFile] = []
    try:
        _Reading(counted(), seen)
    except UnidiffParseError:
        raise _refusal(lines, seen, stopped) from None
    return seen


def _after(lines: list[str], raw: RawHunk) -> int:
    """The line after a hunk: after the lines unidiff numbered and a "No newline" marker right after
    them, which unidiff adds to the hunk unnumbered."""
    end = max((line.diff_line_no or 0 for line in raw), default=0)  # 1-based: the next line's index
    return end + 1 if end < len(lines) and RE_NO_NEWLINE_MARKER.match(lines[end]) else end


def _more(lines: list[str], at: int) -> bool:
    """Whether the line after a hunk looks like more of it ("-- " starts a mail's signature)."""
    return at < len(lines) and lines[at][:1] in (" ", "-", "+", "\\") and lines[at].rstrip("\r\n") != "-- "


def _unpaired(lines: list[str], at: int, path: str | None) -> PatchError:
    return PatchError(f"patch line {at + 1}: {_show(lines[at])} does not follow its file's --- line", path)


def _not_a_hunk_line(lines: list[str], at: int, number: int, path: str | None) -> PatchError:
    where = f"hunk #{number}: patch line {at + 1} {_show(lines[at])}"
    return PatchError(f"{where} is not a hunk line (the @@ counts do not match the lines?)", path)


def _refusal(lines: list[str], files: list[PatchedFile], at: int) -> PatchError:
    """Why unidiff stopped at ``lines[at]`` (at ``len(lines)``: it ran out), told from the input.

    unidiff reads every ``@@`` line outside a hunk as a hunk header (inside one it is an error) and
    adds a hunk to its file once complete: more ``@@`` lines than hunks, and it stopped in a hunk."""
    path = _label(files[-1]) if files else None
    if sum(1 for line in lines[:at] if RE_HUNK_HEADER.match(line)) > sum(map(len, files)):
        number = len(files[-1]) + 1
        if at == len(lines):
            if not lines[-1].endswith("\n"):
                return PatchError(f"hunk #{number}: the patch ends mid-line (truncated?)", path)
            return PatchError(f"hunk #{number} is truncated: the patch ends before its @@ counts are met", path)
        if RE_HUNK_BODY_LINE.match(lines[at]) or RE_HUNK_EMPTY_BODY_LINE.match(lines[at]):
            return PatchError(f"hunk #{number}: more lines than its @@ header counts", path)  # a hunk line
        return _not_a_hunk_line(lines, at, number, path)
    if RE_HUNK_HEADER.match(lines[at]):  # a hunk with no file open: none yet, or text before it
        if not files:
            return PatchError(f"patch line {at + 1}: a hunk without a file header")
        if files[-1] and _more(lines, _after(lines, files[-1][-1])):
            return PatchError(f"hunk #{len(files[-1])}: more lines than its @@ header counts", path)
        return PatchError(f"patch line {at + 1}: a hunk after text that is not part of a hunk", path)
    if lines[at].startswith("+++ "):  # with no --- before it, or under a git header of another file
        return _unpaired(lines, at, path)
    return PatchError(f"patch line {at + 1}: {_show(lines[at])} has no file or hunk to belong to", path)


def _header(lines: list[str], raw: PatchedFile) -> _Header:
    where = _label(raw)
    if raw.is_binary_file:
        raise UnsupportedPatch("binary patch: fixpack applies text diffs only", where)
    start = _line(raw.diff_line_no) - 1  # the diff --git line, or the +++ line of a plain diff
    if lines[start].startswith("diff --git "):
        return _git_header(lines, raw, start, where)
    # unidiff pairs a +++ line with the last --- line before it, however far; git with the one right before
    if start < 1 or not lines[start - 1].startswith("--- "):
        raise _unpaired(lines, start, where)
    old = _name(raw.source_file)
    return _finish(old, _name(raw.target_file), old == DEV_NULL, start - 1, start + 1, True, raw)


def _git_header(lines: list[str], raw: PatchedFile, start: int, where: str | None) -> _Header:
    end = start + 1
    while end < len(lines) and lines[end].startswith(_EXTENDED):
        end += 1
    header = lines[start + 1 : end]
    # unidiff goes on reading git's mode lines after text, which ends the header for git
    late = [line for line in (raw.patch_info or [])[len(header) + 1 :] if line.startswith(_MODE_LINES)]
    if late:
        raise PatchError(f"{_show(late[0])} after text that ends the git header", where)
    for line in header:
        for what in ("rename", "copy"):
            if line.startswith((f"{what} from ", f"{what} old ")):
                raise UnsupportedPatch(f"{what} ({_show(line)}): fixpack does not {what} files", where)
    if raw.source_mode and raw.target_mode and raw.source_mode != raw.target_mode:
        raise UnsupportedPatch("mode change: fixpack does not change file modes", where)
    if raw.is_symlink or raw.is_submodule:
        mode = raw.target_mode or raw.source_mode
        raise UnsupportedPatch(f"mode {mode} (a symlink or submodule): fixpack changes regular files only", where)
    # unidiff names the sides by the diff --git line, /dev/null where a mode line says so (or that line)
    old, new = _name(raw.source_file), _name(raw.target_file)
    for name, mode in ((old, "new file mode "), (new, "deleted file mode ")):
        if name == DEV_NULL and not any(line.startswith(mode) for line in header):
            raise PatchError(f"{_show(lines[start])} names /dev/null, not a file", where)
    if old == DEV_NULL and raw.target_mode != "100644":
        raise UnsupportedPatch(f"creates a file with mode {raw.target_mode}: fixpack creates regular files only", where)
    paired = end + 1 < len(lines) and lines[end].startswith("--- ") and lines[end + 1].startswith("+++ ")
    creates = old == DEV_NULL
    if paired:  # unidiff has checked the +++ name against the header, not the --- name
        minus = _name(RE_SOURCE_FILENAME.match(lines[end])["filename"])  # type: ignore[index]
        if creates and minus != DEV_NULL:
            raise PatchError("new file mode but the --- line does not say /dev/null", where)
        if minus != DEV_NULL and _strip(minus) != _strip(old):
            raise PatchError(f"inconsistent names: {_show(lines[end])} under {_show(lines[start])}", where)
        creates = minus == DEV_NULL
    return _finish(old, new, creates, start, end + 2 if paired else end, paired, raw)


def _finish(old: str, new: str, creates: bool, start: int, body: int, paired: bool, raw: PatchedFile) -> _Header:
    old_path = None if creates else _strip(old)
    new_path = None if new == DEV_NULL else _strip(new)
    path = new_path or old_path
    if path is None:
        raise PatchError("the diff both creates and deletes the file (/dev/null on both sides?)", _label(raw))
    if old_path is not None and new_path is not None and old_path != new_path:
        raise UnsupportedPatch(f"old and new paths differ ({old_path!r}): fixpack does not rename files", new_path)
    return _Header(path, old_path, new_path, start, body, paired, raw)


def _hunk(lines: list[str], raw: RawHunk, at: int, number: int, path: str) -> tuple[Hunk, int]:
    """The hunk whose @@ line is ``lines[at]``, and the line after it."""
    end = _after(lines, raw)
    items: list[list[str]] = []  # [tag, text]; a marker takes the text's newline off
    closed: set[str] = set()  # the sides a "\ No newline at end of file" has ended
    for text, line in zip(lines[at + 1 : end], raw):  # the input line and unidiff's reading of it
        if line.line_type == LINE_TYPE_NO_NEWLINE:
            # git takes any "\ " line of 12 characters or more (the marker in any language)
            if len(text) < 12 or not text.startswith("\\ ") or not items:
                raise PatchError(f"hunk #{number}: stray {_show(text)}", path)
            tag, value = items[-1]
            if not value.endswith("\n"):
                raise PatchError(f"hunk #{number}: two 'No newline' markers for one line", path)
            items[-1][1] = value[:-1]
            closed.update(_SIDES[tag])
            continue
        if text.startswith("\r"):  # unidiff reads it as a blank context line, git as no hunk line
            raise _not_a_hunk_line(lines, _line(line.diff_line_no) - 1, number, path)
        if not text.endswith("\n"):
            raise PatchError(f"hunk #{number}: the patch ends mid-line (truncated?)", path)
        if closed.intersection(_SIDES[line.line_type]):
            raise PatchError(f"hunk #{number}: a line after 'No newline at end of file'", path)
        items.append([line.line_type, line.value])
    hunk = Hunk(raw.source_start, raw.source_length, raw.target_start, raw.target_length,
                tuple((tag, value) for tag, value in items))  # fmt: skip
    tags = {tag for tag, _ in items}
    if not tags & {"-", "+"}:
        raise PatchError(f"hunk #{number} changes nothing", path)
    whole = (hunk.old_count == 0 and hunk.old_start == 0) or (hunk.old_count > 0 and hunk.old_start == 1)
    if " " not in tags and not whole:
        # git would anchor such a hunk at the end of the file (without --unidiff-zero): refuse instead.
        raise PatchError(f"hunk #{number} has no context lines (a --unified=0 diff?); fixpack needs context", path)
    return hunk, end


def _file(lines: list[str], header: _Header, end: int) -> FileDiff:
    """The file whose header is ``header`` and whose part of the patch ends before ``lines[end]``."""
    path, creates, deletes = header.path, header.old_path is None, header.new_path is None
    hunks: list[Hunk] = []
    at = header.body
    for number, raw in enumerate(header.raw, 1):
        # text (a blank line, a git header's) before its @@ line; a hunk with no lines is the last line
        if raw and _line(raw[0].diff_line_no) - 2 != at:
            raise PatchError(f"patch line {at + 1}: a hunk after text that is not part of a hunk", path)
        if not header.paired:  # a git header and then its hunks
            raise PatchError("hunks without ---/+++ lines", path)
        hunk, at = _hunk(lines, raw, at, number, path)
        hunks.append(hunk)
    # What unidiff did not read as this file's, up to the next file: a signature, the next mail.
    bad = next((k for k in range(at, end) if lines[k].startswith("@@")), None)
    if bad is not None:  # a hunk header unidiff could not read is text to it
        raise PatchError(f"patch line {bad + 1}: bad header {_show(lines[bad])}", path)
    if hunks and at < end and _more(lines, at):
        raise PatchError(f"hunk #{len(hunks)}: more lines than its @@ header counts", path)
    if not hunks and not (creates or deletes):
        what = "---/+++ lines but no hunk" if header.paired else "no change (a git header without hunks)"
        raise PatchError(what, path)
    if creates and any(h.old_count for h in hunks):
        raise PatchError("creates the file but a hunk has old lines", path)
    if deletes and any(h.new_count for h in hunks):
        raise PatchError("deletes the file but a hunk has new lines", path)
    text = "".join(lines[header.start : end])
    return FileDiff(path, text, tuple(hunks), creates, deletes, header.old_path, header.new_path)


def parse(text: str) -> list[FileDiff]:
    """Parse a patch (plain, git or mbox) into one FileDiff per file. Raises PatchError."""
    lines = split_lines(text)
    headers = [_header(lines, raw) for raw in _read(lines)]  # every header refusal before any hunk's
    if not headers:
        raise PatchError("no file diff in the patch (not a unified diff?)")
    paths = [h.path for h in headers]
    twice = next((p for i, p in enumerate(paths) if p in paths[:i]), None)
    if twice is not None:
        raise PatchError("the file appears twice in one patch", twice)
    ends = [h.start for h in headers[1:]] + [len(lines)]
    return [_file(lines, h, end) for h, end in zip(headers, ends)]


def index(text: str) -> list[FileEntry]:
    """Each file's part of a patch with its path and whether it is created or deleted."""
    return [FileEntry(fd.path, fd.text, fd.creates, fd.deletes) for fd in parse(text)]


split_files = parse
