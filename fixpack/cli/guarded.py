"""How a command ends: a fixpack error becomes one line on stderr (and, with --json, the
command's own JSON error shape on stdout) and the contract's exit code. No click here, so that the
plain apply of ``apply_all.py`` runs without it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from ..cookbook.catalog import Catalog
from ..errors import FixpackError
from . import render

__all__ = ["ErrorShape", "guard", "catalog"]

ErrorShape = Callable[[FixpackError, dict[str, Any]], dict[str, Any]]


def guard(error_json: ErrorShape) -> Callable[[Callable[..., int | None]], Callable[..., None]]:
    """Run a command; a fixpack error becomes one line on stderr (and, with --json, the command's
    own JSON error shape on stdout) and the contract's exit code."""

    def decorate(fn: Callable[..., int | None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            try:
                code = fn(*args, **kwargs) or 0
            except FixpackError as exc:
                if kwargs.get("as_json"):
                    render.dump(error_json(exc, kwargs))
                render.error(exc)
                code = exc.exit_code
            sys.exit(code)

        return wrapper

    return decorate


def catalog() -> Catalog:
    return Catalog.load()
