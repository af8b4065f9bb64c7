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

__all__ = ["tomllib", "read", "field", "quote", "invalid"]


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


def field(data: dict[str, Any], key: str, kind: type[Any], where: Path, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise invalid(where, f"missing {key!r}")
        return default
    value = data[key]
    if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
        raise invalid(where, f"{key!r} must be a {kind.__name__}" + (" of strings" if kind is list else ""))
    return value
