"""``fixpack recover``: roll back an interrupted transaction, or set its journal aside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import FixpackError
from .options import SITE, catalog, guard


def _error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"error": exc.said}


@click.command()
@click.option(
    "--discard",
    is_flag=True,
    help="Set the interrupted transaction's journal aside and leave the files as they are "
    "(after checking the files the refusal named).",
)
@SITE
@guard(_error)
def recover(discard: bool, site: Path | None) -> int:
    """Roll back an interrupted transaction now (every apply, status and revert does so first).

    When that is refused (a file changed since, a backup that does not match), check the files it
    names, then --discard: the journal is moved aside, and fixpack status shows where each fix stands.
    """
    from ..commands.install.recover import recover as run

    print(f"fixpack recover: {run(catalog(), site, discard)}")
    return 0
