"""TOML in the cookbook: one reader (tomllib, or tomli before Python 3.11) and the quoting its
writers use."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ..errors import UsageError
from ..runtime.index import read_regular

__all__ = ["tomllib", "read", "quote", "invalid", "way_out"]


def invalid(where: Path, reason: str) -> UsageError:
    """A cookbook file that is not what its format says: exit 2, with the format's section to correct
    it by and the command that reads the cookbook again."""
    return UsageError(f"invalid {where}: {reason}", path=str(where), way_out=way_out(where))


def way_out(where: Path) -> str:
    if where.name.endswith(".lock.json"):
        return (
            "To go on: fixpack lock --profile NAME --source DIST=DIR rewrites the fingerprints from the "
            "pinned trees (docs/reference/formats.md#the-lock-file)"
        )
    if "profiles" in where.parts:
        page = "docs/reference/formats.md#a-profile-profilesnametoml"
    elif "fixes" in where.parts:
        page = "docs/reference/formats.md#a-fix-fixesid"
    else:
        page = "docs/reference/formats.md#on-disk-formats"
    return f"To go on: correct it as {page} says; fixpack list reads the cookbook again"


TOML_LIMIT = 4 << 20  # a fix.toml or a profile is a few kB


def read(path: Path) -> dict[str, Any]:
    """A cookbook TOML file: a regular file (never a FIFO) of at most TOML_LIMIT bytes, parsed; any
    failure is ``invalid`` (one line, exit 2)."""
    try:
        return tomllib.loads(read_regular(str(path), TOML_LIMIT).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise invalid(path, str(exc)) from None
    except (RecursionError, MemoryError):
        raise invalid(path, "nested too deep or too large to read") from None


def quote(value: str | list[str]) -> str:
    """A TOML basic string or array of them (JSON's escapes are TOML's)."""
    return json.dumps(value)
