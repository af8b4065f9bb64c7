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

__all__ = ["tomllib", "read", "quote", "invalid"]


def invalid(where: Path, reason: str) -> UsageError:
    return UsageError(f"invalid {where}: {reason}", path=str(where))


def read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise invalid(path, str(exc)) from None


def quote(value: str | list[str]) -> str:
    """A TOML basic string or array of them (JSON's escapes are TOML's)."""
    return json.dumps(value)
