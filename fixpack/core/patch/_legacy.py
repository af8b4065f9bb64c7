"""The unified-diff applicator: exact hunks, no fuzz, line endings kept, and the reverse.

A hunk applies only where its context and removed lines match the file exactly (line endings
aside); it may sit at another line than the diff says (an offset), which is how the patches of
several fixes chain in one file. Text is decoded with ``surrogateescape`` so that any byte survives.
"""

from __future__ import annotations

from dataclasses import dataclass

ENC, ERRORS = "utf-8", "surrogateescape"
_SWAP = {" ": " ", "-": "+", "+": "-"}


class HunkFailed(ValueError):
    """A hunk's lines are not in the file; ``nearest`` shows the closest place and how it differs."""

    def __init__(self, path: str, index: int, line: int, nearest: str) -> None:
        super().__init__(f"{path}: hunk #{index} (line {line}) does not match the file")
        self.path, self.index, self.line, self.nearest = path, index, line, nearest


@dataclass(frozen=True)
class Hunk:
    old_start: int  # 1-based, as in the @@ header
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text with its ending; none at EOF)

    @property
    def old(self) -> tuple[str, ...]:
        return tuple(text for tag, text in self.lines if tag != "+")

    @property
    def new(self) -> tuple[str, ...]:
        return tuple(text for tag, text in self.lines if tag != "-")

    def reversed(self, new_start: int) -> Hunk:
        return Hunk(new_start, tuple((_SWAP[tag], text) for tag, text in self.lines))


@dataclass(frozen=True)
class FileDiff:
    path: str  # repository path, without the a/ b/ prefix
    text: str  # this file's part of the patch, as stored
    hunks: tuple[Hunk, ...]
    new_starts: tuple[int, ...]
    creates: bool
    deletes: bool

    def reversed(self) -> FileDiff:
        hunks = tuple(h.reversed(s) for h, s in zip(self.hunks, self.new_starts))
        starts = tuple(h.old_start for h in self.hunks)
        return FileDiff(self.path, self.text, hunks, starts, creates=self.deletes, deletes=self.creates)


def _strip_prefix(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


@dataclass(frozen=True)
class FileEntry:
    """One file's part of a patch, found without parsing its hunks."""

    path: str
    text: str
    creates: bool
    deletes: bool


def index(text: str) -> list[FileEntry]:
    """Cut a patch into its files by their headers alone, which is all the already-applied path
    needs (unidiff parses the hunks only when a change must run). A line starting ``diff --git ``
    is always a header: hunk lines start with a space, ``+``, ``-`` or ``\\``."""
    if "\ndiff --git " not in "\n" + text:
        return [FileEntry(f.path, f.text, f.creates, f.deletes) for f in split_files(text)]
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    entries = []
    for a, b in zip(starts, [*starts[1:], len(lines)]):
        chunk = lines[a:b]
        old = next((ln[4:].strip() for ln in chunk if ln.startswith("--- ")), "")
        new = next((ln[4:].strip() for ln in chunk if ln.startswith("+++ ")), "")
        if not old or not new:
            raise ValueError(f"no ---/+++ lines after {chunk[0].strip()!r}")
        creates, deletes = old == "/dev/null", new == "/dev/null"
        entries.append(FileEntry(_strip_prefix(old if deletes else new), "".join(chunk), creates, deletes))
    paths = [e.path for e in entries]
    if len(set(paths)) != len(paths):
        raise ValueError("a file appears twice in one patch")
    return entries


def split_files(text: str) -> list[FileDiff]:
    """Parse a patch (plain, git or mbox) into one FileDiff per file."""
    import unidiff

    try:
        patch = unidiff.PatchSet(text)
    except unidiff.UnidiffParseError as exc:
        raise ValueError(f"not a unified diff: {exc}") from None
    out = []
    for pf in patch:
        hunks, starts = [], []
        for h in pf:
            lines: list[tuple[str, str]] = []
            for line in h:
                if line.line_type == "\\":  # "\ No newline at end of file": the line before has none
                    if lines:
                        tag, value = lines[-1]
                        lines[-1] = (tag, value.rstrip("\r\n"))
                    continue
                if line.line_type in (" ", "-", "+"):
                    lines.append((line.line_type, line.value))
            hunks.append(Hunk(h.source_start, tuple(lines)))
            starts.append(h.target_start)
        path = _strip_prefix(pf.source_file if pf.is_removed_file else pf.target_file)
        out.append(FileDiff(path, str(pf), tuple(hunks), tuple(starts), pf.is_added_file, pf.is_removed_file))
    paths = [f.path for f in out]
    if len(set(paths)) != len(paths):
        raise ValueError("a file appears twice in one patch")
    return out


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _has_eol(line: str) -> bool:
    return line.endswith(("\n", "\r"))


def _dominant_ending(lines: list[str]) -> str:
    crlf = sum(1 for ln in lines if ln.endswith("\r\n"))
    return "\r\n" if crlf * 2 > len(lines) else "\n"


def _ending_of(content: bytes, n_lines: int) -> str:
    """``_dominant_ending`` of a file's lines, counted on its bytes (each CRLF ends one line)."""
    return "\r\n" if content.count(b"\r\n") * 2 > n_lines else "\n"


def _matches(lines: list[str], at: int, want: tuple[str, ...]) -> bool:
    if at < 0 or at + len(want) > len(lines):
        return False
    return all(
        _body(have) == _body(w) and _has_eol(have) == _has_eol(w) for have, w in zip(lines[at : at + len(want)], want)
    )


def _locate(lines: list[str], want: tuple[str, ...], expected: int, floor: int) -> int | None:
    """Where ``want`` matches, at or after ``floor`` and nearest to ``expected``."""
    expected = min(max(expected, floor), len(lines))
    if not want:
        return expected
    last = len(lines) - len(want)
    for delta in range(0, max(last - floor, expected - floor) + 1):
        for at in (expected + delta, expected - delta) if delta else (expected,):
            if floor <= at <= last and _matches(lines, at, want):
                return at
    return None


def _nearest(lines: list[str], start: int, want: tuple[str, ...]) -> str:
    """The window of the file most like the hunk's lines, as a small diff, for a refusal message."""
    import difflib

    if not want or not lines:
        return ""
    bodies = [_body(x) for x in want]
    best, best_at = -1.0, min(start, len(lines) - 1)
    for at in range(max(0, start - 3000), min(len(lines), start + 3000)):
        if _body(lines[at]) == bodies[0] or at == start:
            window = [_body(x) for x in lines[at : at + len(want)]]
            score = difflib.SequenceMatcher(None, bodies, window, autojunk=False).ratio()
            if score > best:
                best, best_at = score, at
    window = [_body(x) for x in lines[best_at : best_at + len(want)]]
    diff = difflib.unified_diff(bodies, window, "hunk expects", f"file has (line {best_at + 1})", lineterm="", n=2)
    return "\n".join(diff)


def apply(fd: FileDiff, content: bytes | None) -> bytes | None:
    """Apply one file's diff to its bytes (``None``: the file is absent). Raises HunkFailed."""
    if fd.creates:
        if content:
            raise HunkFailed(fd.path, 1, 0, "the file already exists, and this change creates it")
        lines: list[str] = []
    elif content is None:
        raise HunkFailed(fd.path, 1, 0, "the file is absent")
    else:
        lines = content.decode(ENC, ERRORS).splitlines(keepends=True)
    eol = _ending_of(content, len(lines)) if lines else None
    out = apply_lines(fd, lines, eol)
    return None if out is None else "".join(out).encode(ENC, ERRORS)


def apply_chain(fds: list[FileDiff], content: bytes) -> bytes | None:
    """Apply several diffs of one file in order, decoding and encoding the file once.

    Gives the same bytes as ``apply`` one after the other for diffs that neither create nor delete
    the file (the caller checks the result against the locked after-hash anyway)."""
    lines = content.decode(ENC, ERRORS).splitlines(keepends=True)
    eol = _ending_of(content, len(lines)) if lines else None
    for fd in fds:
        if fd.creates or fd.deletes:
            raise ValueError("apply_chain takes diffs that neither create nor delete the file")
        lines = apply_lines(fd, lines, eol)  # type: ignore[assignment]
    return "".join(lines).encode(ENC, ERRORS)


def apply_lines(fd: FileDiff, lines: list[str], eol: str | None = None) -> list[str] | None:
    """``apply`` on a file's lines (with their endings); None if the diff deletes the file.
    ``eol``: the file's dominant line ending, when the caller has counted it."""
    if eol is None:
        eol = _dominant_ending(lines or [t for h in fd.hunks for _, t in h.lines])
    out: list[str] = []
    pos = offset = 0
    for index, hunk in enumerate(fd.hunks, 1):
        old = hunk.old
        anchor = hunk.old_start - (1 if old else 0)  # an empty old side sits after its start line
        at = _locate(lines, old, anchor + offset, pos)
        if at is None:
            raise HunkFailed(fd.path, index, hunk.old_start, _nearest(lines, max(anchor + offset, pos), old))
        out.extend(lines[pos:at])
        matched = iter(lines[at : at + len(old)])
        for tag, text in hunk.lines:
            if tag == "+":
                out.append(_body(text) + (eol if _has_eol(text) else ""))
                continue
            have = next(matched)
            if tag == " ":
                out.append(have if _has_eol(text) or not _has_eol(have) else _body(have))
        pos, offset = at + len(old), at - anchor
    out.extend(lines[pos:])
    if fd.deletes:
        if any(out):
            raise HunkFailed(fd.path, len(fd.hunks), 0, "lines remain in a file this change deletes")
        return None
    return out


def render(path: str, before: bytes | None, after: bytes | None, context: int = 3) -> str:
    """A git-style diff of one file, with paths as in the upstream repository ('' if no change)."""
    import difflib

    a = [] if before is None else before.decode(ENC, ERRORS).splitlines(keepends=True)
    b = [] if after is None else after.decode(ENC, ERRORS).splitlines(keepends=True)
    body = []
    for line in difflib.unified_diff(
        a, b, "/dev/null" if before is None else f"a/{path}", "/dev/null" if after is None else f"b/{path}", n=context
    ):
        if line.startswith(("--- ", "+++ ")):
            body.append(line.rstrip("\n") + "\n")
        elif not _has_eol(line):
            body.append(line + "\n\\ No newline at end of file\n")
        else:
            body.append(line)
    if not body:
        return ""
    head = f"diff --git a/{path} b/{path}\n"
    if before is None:
        head += "new file mode 100644\n"
    elif after is None:
        head += "deleted file mode 100644\n"
    return head + "".join(body)
