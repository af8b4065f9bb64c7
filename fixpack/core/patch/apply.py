"""Apply a FileDiff to a file's bytes: exact context, no fuzz, git's anchors, offsets carried.

A hunk's context and removed lines match file lines whose bodies are equal (the line less one
``\\r\\n`` or ``\\n``) and that are both terminated or both not. A hunk is looked for nearest to
where its header says plus the offset the hunk before it was found at, never before the end of
that hunk; like git, a hunk starting at old line 0 or 1 must match at the start of the file and a
hunk without trailing context at its end. Context lines keep the file's bytes, added lines the
patch's bytes, except in one case (see ``_to_crlf``).
"""

from __future__ import annotations

from .model import ENC, ERRORS, FileDiff, body, key, split_lines


class HunkFailed(ValueError):
    """A hunk's lines are not in the file; ``nearest`` shows the closest place and how it differs."""

    def __init__(self, path: str, index: int, line: int, nearest: str, reason: str = "") -> None:
        message = f"hunk #{index} (line {line}) does not match the file" + (f": {reason}" if reason else "")
        super().__init__(f"{path}: {message}")
        self.path, self.index, self.line, self.nearest = path, index, line, nearest


def _to_crlf(fd: FileDiff, text: str) -> bool:
    """Whether added lines ending in a bare ``\\n`` are written with ``\\r\\n``.

    Only when the file (``text``) is pure CRLF (it has terminated lines, all ending ``\\r\\n``)
    and the diff was visibly made against an LF copy of it: its old side (context and removed
    lines) has terminated lines, all ending in a bare ``\\n``. A diff made by git of this very file
    can never meet both conditions, so it always applies byte for byte, and so does its reverse;
    an LF diff applied to a CRLF file and then reversed gives back the CRLF file."""
    evidence = False
    for hunk in fd.hunks:
        for tag, line in hunk.lines:
            if tag != "+" and line.endswith("\n"):
                if line.endswith("\r\n"):
                    return False
                evidence = True
    if not evidence:
        return False
    terminators = text.count("\n")  # each ends one line; pure CRLF: every one follows a \r
    return terminators > 0 and text.count("\r\n") == terminators


def _locate(keys: list[str], want: list[str], expected: int, floor: int, at_start: bool, at_end: bool) -> int | None:
    """Where ``want`` matches, at or after ``floor``, nearest to ``expected`` (later first on a
    tie, as git's find_pos), or only at the start / the end when anchored."""
    n, k = len(keys), len(want)
    last = n - k
    if at_start or at_end:
        candidates = [0] if at_start else [last]
        if at_start and at_end and last != 0:
            return None
    else:
        if not want:
            return min(max(expected, floor), n)
        return _nearest_match(keys, want, expected, floor, last)
    for at in candidates:
        if floor <= at <= last and keys[at : at + k] == want:
            return at
    return None


def _nearest_match(keys: list[str], want: list[str], expected: int, floor: int, last: int) -> int | None:
    """The match nearest to ``expected`` within [floor, last], the later one on a tie: searched
    outwards, since a hunk is almost always found within a few lines of where it is expected."""
    if floor > last:
        return None
    k, first = len(want), want[0]
    for distance in range(max(abs(expected - floor), abs(last - expected)) + 1):
        for at in (expected + distance, expected - distance) if distance else (expected,):
            if floor <= at <= last and keys[at] == first and keys[at : at + k] == want:
                return at
    return None


def _nearest(lines: list[str], start: int, want: tuple[str, ...]) -> str:
    """The window of the file most like the hunk's lines, as a small diff, for a refusal message."""
    if not want or not lines:
        return ""
    import difflib  # only when a hunk fails: a cold apply that succeeds does without it

    bodies = [body(x) for x in want]
    start = min(max(start, 0), len(lines) - 1)
    best, best_at = -1.0, start
    for at in range(max(0, start - 3000), min(len(lines), start + 3000)):
        if body(lines[at]) == bodies[0] or at == start:
            window = [body(x) for x in lines[at : at + len(want)]]
            score = difflib.SequenceMatcher(None, bodies, window, autojunk=False).ratio()
            if score > best:
                best, best_at = score, at
    window = [body(x) for x in lines[best_at : best_at + len(want)]]
    diff = difflib.unified_diff(bodies, window, "hunk expects", f"file has (line {best_at + 1})", lineterm="", n=2)
    return "\n".join(diff)


def _apply_lines(fd: FileDiff, lines: list[str], any_crlf: bool | None = None) -> list[str]:
    # A line's key differs from the line only when it ends in \r\n, and only a file with one can
    # be pure CRLF: one C-speed search spares both for a file that has none (most). ``any_crlf``
    # False: the caller knows the lines have none.
    text = "".join(lines) if any_crlf is not False else ""
    any_crlf = "\r\n" in text
    crlf = any_crlf and _to_crlf(fd, text)
    keys = [key(line) for line in lines] if any_crlf else lines
    out: list[str] = []
    pos = offset = 0
    for number, hunk in enumerate(fd.hunks, 1):
        old = hunk.old
        anchor = hunk.old_start - 1 if hunk.old_count else hunk.old_start  # 0-based index of its first old line
        at_start = hunk.old_start <= 1
        at_end = hunk.trailing == 0
        at = _locate(keys, [key(x) for x in old], anchor + offset, pos, at_start, at_end)
        if at is None:
            where = "at the start of the file" if at_start else "at the end of the file" if at_end else ""
            nearest = _nearest(lines, max(anchor + offset, pos), old)
            if where and not nearest:
                nearest = f"the hunk must match {where}"
            raise HunkFailed(fd.path, number, hunk.old_start, nearest)
        out.extend(lines[pos:at])
        matched = iter(lines[at : at + len(old)])
        for tag, text in hunk.lines:
            if tag == "+":
                out.append(text[:-1] + "\r\n" if crlf and text.endswith("\n") and not text.endswith("\r\n") else text)
                continue
            have = next(matched)
            if tag == " ":
                out.append(have)
        pos, offset = at + len(old), at - anchor
    out.extend(lines[pos:])
    return out


def _step(fd: FileDiff, lines: list[str] | None, any_crlf: bool | None = None) -> list[str] | None:
    if fd.creates:
        if lines is not None:
            raise HunkFailed(fd.path, 1, 0, "", "the file already exists, and this change creates it")
        lines = []
    elif lines is None:
        raise HunkFailed(fd.path, 1, 0, "", "the file is absent, and this change edits it")
    out = _apply_lines(fd, lines, any_crlf)
    if fd.deletes:
        if out:
            raise HunkFailed(fd.path, len(fd.hunks), 0, "".join(out[:5]), "lines remain in a file this change deletes")
        return None
    return out


def apply(fd: FileDiff, content: bytes | None) -> bytes | None:
    """Apply one file's diff to its bytes (``None``: the file is absent; returned when the diff
    deletes it). Raises HunkFailed."""
    lines = None if content is None else split_lines(content.decode(ENC, ERRORS))
    out = _step(fd, lines)
    return None if out is None else "".join(out).encode(ENC, ERRORS)


def apply_chain(fds: list[FileDiff], content: bytes | None) -> bytes | None:
    """Apply several diffs of one file in order, decoding and encoding the file once; the same
    bytes as ``apply`` one after the other."""
    text = None if content is None else content.decode(ENC, ERRORS)
    lines = None if text is None else split_lines(text)
    any_crlf = text is not None and "\r\n" in text  # the file as it is after each step, below
    for fd in fds:
        lines = _step(fd, lines, None if any_crlf else False)
        any_crlf = any_crlf or any("\r\n" in line for hunk in fd.hunks for tag, line in hunk.lines if tag == "+")
    return None if lines is None else "".join(lines).encode(ENC, ERRORS)
