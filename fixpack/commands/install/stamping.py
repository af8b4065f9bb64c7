"""The warm stamp a writing apply records (its shape and its check: ``fixpack.installation.warm``): the
command line the apply came from, and the files it read to decide."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...installation import warm
from ...installation.destination import Destination
from ...installation.distributions import Distribution
from .results import Result

__all__ = ["Invocation", "warm_stamp"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """What the command line asked, as given: the raw arguments of the apply (the stamp's key),
    how the CLI prints a result for them, and the ``--exec`` command it parsed."""

    argv: tuple[str, ...]
    printed: Callable[[Result], tuple[str, str]]
    command: tuple[str, ...] = ()


def warm_stamp(
    invocation: Invocation,
    catalog: Catalog,
    done: Result,
    dists: list[Distribution],
    targets: dict[str, str | None],
    target: Destination,
    site: Path | None,
) -> dict | None:
    """The stamp for the all-applied state an apply leaves in ``target``: ``done`` is what a re-run
    answers while ``targets`` (file -> hash) and every file the answer was read from stay as they
    are. The stamp names the folder a process puts on PYTHONPATH, if any, as an absolute path."""
    read: list[Path] = []
    for d in dists:  # what finding the distributions and their commits read
        read += [d.dist_info / n for n in ("METADATA", "PKG-INFO", "direct_url.json")]
        read.append(d.files_root / d.package / "_version.py")
    files, folders = catalog.sources()
    return warm.make_stamp(
        invocation.argv,
        str(target.state_dir),
        None if site is None else str(site),
        None if target.pythonpath is None else str(target.pythonpath),
        targets,
        map(str, [*read, *files]),
        map(str, folders),
        invocation.printed(done),
        invocation.command,
    )
