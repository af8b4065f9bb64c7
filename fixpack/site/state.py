"""fixpack's state directory in an environment (``.fixpack/`` beside the dist-info): the manifest,
the pristine copy of each patched file, and the journal of a transaction under way."""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path

from ..errors import Refused, UsageError
from ..runtime.index import read_regular
from . import confine
from .files import NotARegularFile
from .layout import MANIFEST, PRISTINE_DIR
from .manifest import Manifest

__all__ = ["read_manifest", "pristine_copy", "read_file"]


STATE_LIMIT = 64 << 20  # a state file of the whole pack is well under 1 MB


def read_file(path: Path) -> bytes | None:
    """A file's bytes, None when it is absent; NotARegularFile (an OSError) when it is a folder, a
    FIFO (never opened for a blocking read) or a device, or holds more than STATE_LIMIT bytes."""
    try:
        return read_regular(str(path), STATE_LIMIT)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise NotARegularFile(str(exc)) from None


def read_manifest(state_dir: Path, known: Container[str], cookbook: Path | str = "") -> Manifest:
    """The manifest, refusing one that names fixes the cookbook does not have (``known``): they
    could not be recognised or reverted without their changes."""
    try:
        manifest = Manifest.from_bytes(read_file(state_dir / MANIFEST))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError, NotARegularFile) as exc:
        raise UsageError(f"unreadable manifest {state_dir / MANIFEST}: {exc}", path=str(state_dir / MANIFEST)) from None
    unknown = [f for f in manifest.fixes if f not in known]
    if unknown:
        raise Refused(
            f"this environment has {', '.join(unknown)} applied, which this cookbook ({cookbook}) does not have: "
            "run fixpack from the cookbook that applied them (fixpack revert, then apply)",
            fix_id=unknown[0],
        )
    return manifest


def pristine_copy(state_dir: Path, path: str) -> Path:
    """Where the release's bytes of a patched file are kept."""
    return confine.inside(state_dir, f"{PRISTINE_DIR}/{path}")
