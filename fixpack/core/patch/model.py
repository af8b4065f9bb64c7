"""The patch engine's data: hunks, file diffs, index entries, errors, and git's line model.

Text is bytes decoded with ``utf-8`` + ``surrogateescape``, so any byte survives a round trip.
A line is what git calls a line: everything up to and including ``\\n``; every other byte
(``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, U+0085, U+2028/9) belongs to the line.
"""

from __future__ import annotations

from dataclasses import dataclass

ENC, ERRORS = "utf-8", "surrogateescape"

_SWAP = {" ": " ", "-": "+", "+": "-"}


class PatchError(ValueError):
    """The patch text is malformed; ``path`` names the file it concerns, when known."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class UnsupportedPatch(PatchError):
    """A well-formed change fixpack refuses: binary, rename, copy, mode change, symlink, submodule."""


def split_lines(text: str) -> list[str]:
    """Split as git does: on ``\\n`` only, each line keeping it; a last line without one is kept."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def key(line: str) -> str:
    """What two lines are compared by: the line with a ``\\r\\n`` terminator read as ``\\n``.

    Equal keys mean equal bodies (the line less one ``\\r\\n`` or ``\\n``) and both or neither
    terminated; ``x\\r\\r\\n`` has body ``x\\r`` and so never matches ``x\\n``."""
    return line[:-2] + "\n" if line.endswith("\r\n") else line


def body(line: str) -> str:
    """The line less its terminator (one ``\\r\\n`` or ``\\n``)."""
    if line.endswith("\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith("\n") else line


@dataclass(frozen=True, slots=True)
class Hunk:
    old_start: int  # 1-based, as in the @@ header (the line before, when old_count is 0)
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text with its terminator; none at EOF)

    @property
    def old(self) -> tuple[str, ...]:
        return tuple(text for tag, text in self.lines if tag != "+")

    @property
    def new(self) -> tuple[str, ...]:
        return tuple(text for tag, text in self.lines if tag != "-")

    @property
    def leading(self) -> int:
        """Context lines before the first change (git's ``leading``)."""
        n = 0
        for tag, _ in self.lines:
            if tag != " ":
                break
            n += 1
        return n

    @property
    def trailing(self) -> int:
        """Context lines after the last change (git's ``trailing``)."""
        n = 0
        for tag, _ in reversed(self.lines):
            if tag != " ":
                break
            n += 1
        return n

    def reversed(self) -> Hunk:
        swapped = tuple((_SWAP[tag], text) for tag, text in self.lines)
        return Hunk(self.new_start, self.new_count, self.old_start, self.old_count, swapped)


@dataclass(frozen=True, slots=True)
class FileDiff:
    path: str  # repository path, without the a/ b/ prefix
    text: str  # this file's part of the patch, as stored
    hunks: tuple[Hunk, ...]
    creates: bool
    deletes: bool
    old_path: str | None = None  # None: /dev/null
    new_path: str | None = None

    def reversed(self) -> FileDiff:
        """The diff that undoes this one (its ``text`` stays the stored text of this one)."""
        return FileDiff(
            self.path,
            self.text,
            tuple(h.reversed() for h in self.hunks),
            creates=self.deletes,
            deletes=self.creates,
            old_path=self.new_path,
            new_path=self.old_path,
        )


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file's part of a patch, found from its headers without parsing its hunks."""

    path: str
    text: str
    creates: bool
    deletes: bool
