"""The keys each table of the cookbook's files may have, checked one way for all three formats:
``fix.toml``, a profile and a recipe. Every loader passes each table it reads (the top level, each
nested table, each entry of an array of tables) to :func:`check`, so that a misspelt key is
refused, naming the file, the key with its table and the nearest known key, never dropped."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ..core.names import suggest
from .tomlfile import invalid

__all__ = ["check", "unknown", "toml_table", "toml_keys"]

_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")


def unknown(key: str, table: str, known: Collection[str]) -> str:
    """The message for ``key`` in ``table``: the nearest known key, or every known key when none is near."""
    hint = suggest(key, sorted(known)) or f" (known: {', '.join(sorted(known))})"
    return f"unknown key {key!r} in {table}{hint}"


def check(table: Mapping[str, Any], known: Collection[str], name: str, fail: Callable[[str, str], Exception]) -> None:
    """Raise ``fail(key, message)`` for the first key of ``table`` (in the file's order) that is not
    ``known``; ``name`` is the table as the file's format spells it."""
    for key in table:
        if key not in known:
            raise fail(key, unknown(str(key), name, known))


def toml_table(path: tuple[str | int, ...]) -> str:
    """A TOML table by its path from the top: ``[upstream]``, ``[release."v0.26.0"]``, and an entry of
    an array of tables with its number, ``[[proof.harmless]] #2``."""
    if not path:
        return "the top-level table"
    names = [p if _BARE.match(p) else f'"{p}"' for p in path if isinstance(p, str)]
    dotted = ".".join(names)
    if isinstance(path[-1], int):
        return f"[[{dotted}]] #{path[-1] + 1}"
    return f"[{dotted}]"


def toml_keys(table: Mapping[str, Any], known: Collection[str], where: Path, *path: str | int) -> None:
    """:func:`check` for one table of the TOML file ``where``: an unknown key is its invalid-file error."""
    check(table, known, toml_table(path), lambda key, message: invalid(where, message))
