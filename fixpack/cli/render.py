"""What every command's output shares: the colour of a word on a terminal, the notes and the error
line on stderr, JSON on stdout. Each command's own lines and JSON shapes are beside it:
``render_install`` (apply, status, revert, list, show, profiles), ``render_maintain`` (verify,
port), ``render_accept`` (recipe accept)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from ..errors import INTERRUPTED_LINE, FixpackError

__all__ = ["paint", "notes", "interrupted", "error", "dump"]

_COLOURS = {
    "applied": "32",
    "would-apply": "36",
    "already-applied": "2",
    "refused": "31",
    "reverted": "33",
    "would-revert": "36",
    "pending": "33",
    "drifted": "31",
    "missing": "31",
    "partial": "35",
}


def paint(text: str, key: str, stream: TextIO) -> str:
    code = _COLOURS.get(key)
    return f"\x1b[{code}m{text}\x1b[0m" if code and stream.isatty() else text


def notes(lines: list[str], err: TextIO | None = None) -> None:
    for line in lines:
        print(f"fixpack: {line}", file=err or sys.stderr)


def interrupted() -> None:
    print(INTERRUPTED_LINE, file=sys.stderr)


def error(exc: FixpackError, err: TextIO | None = None) -> None:
    err = err or sys.stderr
    print(f"fixpack: error: {exc.said}", file=err)
    if exc.details:
        print(exc.details, file=err)


def dump(data: Mapping[str, object] | Sequence[object]) -> None:
    print(json.dumps(data, indent=2), file=sys.stdout)
