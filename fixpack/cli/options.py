"""What the commands share: the click options (``--site``, ``--json``, ``--source``), the parsing
of ``--source DIST=DIR``, the catalog, and how a command ends (``guard``)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..cookbook.catalog import Catalog
from ..errors import INTERRUPTED, EnvironmentProblem, FixpackError, UsageError
from . import render

if TYPE_CHECKING:  # the destinations, imported when a command chooses one
    from ..installation.destination import Where

__all__ = ["SITE", "chosen", "JSON", "SOURCE", "SOURCE_ENV", "ErrorShape", "guard", "catalog", "sources"]

ErrorShape = Callable[[FixpackError, dict[str, Any]], dict[str, Any]]

SITE = click.option(
    "--site",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FIXPACK_SITE",
    help="Look for vllm and vllm-gaudi only in DIR (a site-packages-like folder), not this interpreter's path. "
    "Default: $FIXPACK_SITE.",
)


def chosen(site: Path | None, overlay: Path | None = None) -> Where:
    """The destination the command line chose, once, for every step below it: an overlay in
    ``--overlay DIR``, else in place; the distributions are read from ``--site`` either way."""
    if overlay is not None:
        from ..installation.overlay import OverlayAt

        return OverlayAt(overlay, site)
    from ..installation.inplace import InPlaceAt

    return InPlaceAt(site)


JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout (messages go to stderr).")
SOURCE_ENV = {"vllm-gaudi": "FIXPACK_SRC_VLLM_GAUDI", "vllm": "FIXPACK_SRC_VLLM"}
SOURCE = click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="DIST=DIR",
    help="An upstream tree in repository layout: vllm-gaudi=DIR (DIR/vllm_gaudi/...), vllm=DIR (DIR/vllm/...). "
    "Default: $FIXPACK_SRC_VLLM_GAUDI and $FIXPACK_SRC_VLLM.",
)


def sources(values: tuple[str, ...], named_by: str = "--source") -> dict[str, Path]:
    """``--source DIST=DIR`` options (or another option's, ``named_by``); without any, the
    FIXPACK_SRC_* variables the tests use."""
    if not values:
        values = tuple(f"{dist}={os.environ[var]}" for dist, var in SOURCE_ENV.items() if os.environ.get(var))
        named_by = "FIXPACK_SRC_*"
    out = {}
    for value in values:
        dist, sep, folder = value.partition("=")
        if not sep or not dist or not folder:
            raise UsageError(f"{named_by} {value!r}: expected DIST=DIR, e.g. vllm-gaudi=/src/vllm-gaudi")
        path = Path(folder)
        if not path.is_dir():
            raise UsageError(f"{named_by} {value!r}: {folder} is not a directory", path=folder)
        out[dist] = path
    return out


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
            except KeyboardInterrupt:
                render.interrupted()
                code = INTERRUPTED
            except ModuleNotFoundError as exc:
                missing = _extra_missing(exc)
                if missing is None:
                    raise  # not one an extra installs: a bug, with its traceback
                render.error(missing)
                code = missing.exit_code
            sys.exit(code)

        return wrapper

    return decorate


def _extra_missing(exc: ModuleNotFoundError) -> EnvironmentProblem | None:
    """A module of one of fixpack's extras, missing where a command first imports it (libcst for a
    transform, coverage, cyclonedx, openai): exit 3 naming the line that installs the extra."""
    from ..extras import install_line, providing

    extra = providing(exc.name or "")
    if extra is None:
        return None
    return EnvironmentProblem(
        f"the Python module {exc.name!r} is missing: this command needs fixpack's {extra} extra, {install_line(extra)}"
    )


def catalog() -> Catalog:
    return Catalog.load()
