"""The click options the commands share (``--site``, ``--json``, ``--source``) and the parsing of
``--source DIST=DIR``."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import UsageError
from .guarded import catalog, guard

__all__ = ["SITE", "JSON", "SOURCE", "SOURCE_ENV", "guard", "catalog", "sources"]

SITE = click.option(
    "--site",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FIXPACK_SITE",
    help="Look for vllm and vllm-gaudi only in DIR (a site-packages-like folder), not this interpreter's path. "
    "Default: $FIXPACK_SITE.",
)
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


def sources(values: tuple[str, ...]) -> dict[str, Path]:
    """``--source DIST=DIR`` options; without any, the FIXPACK_SRC_* variables the tests use."""
    named_by = "--source"
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
