"""``fixpack sbom``: the installed state as a CycloneDX 1.6 JSON document, each applied fix a patch in
its distribution's pedigree (``document`` says what it holds, ``facts`` the rule of each patch's
type), or with ``--merge FILE`` that pedigree added to another tool's document of the same
environment (``merge``). cyclonedx-python-lib (fixpack's ``sbom`` extra) is imported here, when
the command runs, and nowhere else.

The same site gives the same bytes, however often and wherever it is copied to; the timestamp is
``SOURCE_DATE_EPOCH``'s, or there is none."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...errors import EnvironmentProblem, FixpackError, UsageError
from ...extras import install_line
from ...installation.destination import Where
from ...runtime.index import read_regular
from ..install.outputs import write_named
from .facts import applied

__all__ = ["Sbom", "sbom", "write"]

EXTRA = f"{install_line('sbom')} (cyclonedx-python-lib[json-validation] 11)"


@dataclass(frozen=True, slots=True)
class Sbom:
    text: str  # the JSON document
    spec: str  # its CycloneDX version: 1.6, or the --merge input's
    fixes: int  # the patches recorded: one per fix and distribution it changes


MERGE_LIMIT = 64 << 20  # an environment's SBOM is a few MB


def _timestamp(epoch: str | None) -> datetime | None:
    if not epoch:
        return None
    try:
        if not (epoch.isascii() and epoch.isdigit()):  # int() would take " 7 ", "1_000" and "-1"
            raise ValueError(epoch)
        return datetime.fromtimestamp(int(epoch), timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"SOURCE_DATE_EPOCH {epoch!r}: expected seconds since 1970-01-01 UTC") from None


def _read(path: Path) -> bytes:
    """The --merge input: a regular file (never /dev/zero nor a FIFO) of at most MERGE_LIMIT bytes."""
    try:
        return read_regular(str(path), MERGE_LIMIT)
    except ValueError as exc:
        raise UsageError(f"--merge {exc}", path=str(path)) from None
    except OSError as exc:
        raise UsageError(f"--merge {path}: cannot read it ({exc.strerror or exc})", path=str(path)) from None


def sbom(
    catalog: Catalog,
    where: Where,
    merge: Path | None = None,
    epoch: str | None = None,
) -> Sbom:
    """The document of what is applied in ``where``'s destination, or ``merge``'s document with it
    added; ``epoch``: SOURCE_DATE_EPOCH's value. Checked against the library's schema before it is
    returned."""
    when = _timestamp(epoch)
    raw = _read(merge) if merge is not None else None
    prov = applied(catalog, where)
    try:
        from cyclonedx.exception import MissingOptionalDependencyException

        from . import document
        from .merge import merge as graft
    except ImportError as exc:
        missing = (exc.name or "a module it imports").partition(".")[0]
        raise EnvironmentProblem(f"fixpack sbom needs cyclonedx-python-lib ({missing} is missing): {EXTRA}") from None
    try:
        if raw is None:
            text, spec = document.render(document.bom(prov, when)), "1.6"
        else:
            text, spec = graft(raw, str(merge), prov)
        problem = document.invalid(text, document.SPECS[spec])
    except MissingOptionalDependencyException as exc:
        raise EnvironmentProblem(f"fixpack sbom validates what it writes, and {exc}: {EXTRA}") from None
    if problem is not None:
        raise FixpackError(f"the document made is not valid CycloneDX {spec} ({problem}): a bug in fixpack")
    return Sbom(text, spec, sum(len(pd.patches) for pd in prov.dists))


def write(text: str, output: Path) -> None:
    """``output`` holds ``text`` whole, or is as it was: written beside it and renamed over it."""
    write_named("--output", output, text)
