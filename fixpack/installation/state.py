"""fixpack's state directory in an environment (``.fixpack/`` beside the dist-info): the manifest,
the pristine copy of each patched file, and the journal of a transaction under way.

What the state says is acted on with this process's rights (often root's): the manifest and the
journal name files to write, a kept RECORD is written back into a dist-info. So the state is read
only where no other user could have written it (:func:`refuse_untrusted`)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import EnvironmentProblem, UsageError
from ..runtime.index import read_regular, untrusted, writer
from . import confine
from .files import NotARegularFile
from .layout import JOURNAL, JOURNAL_INDEX, MANIFEST, PRISTINE_DIR
from .manifest import Manifest

__all__ = ["read_manifest", "pristine_copy", "read_file", "refuse_untrusted"]


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


def read_manifest(state_dir: Path) -> Manifest:
    """The manifest (empty where there is none); UsageError when it cannot be read."""
    try:
        return Manifest.from_bytes(read_file(state_dir / MANIFEST))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError, NotARegularFile) as exc:
        raise UsageError(f"unreadable manifest {state_dir / MANIFEST}: {exc}", path=str(state_dir / MANIFEST)) from None


def pristine_copy(state_dir: Path, path: str) -> Path:
    """Where the release's bytes of a patched file are kept."""
    return confine.inside(state_dir, f"{PRISTINE_DIR}/{path}")


def refuse_untrusted(state_dir: Path) -> None:
    """EnvironmentProblem, before anything in it is read, when a user other than root and this
    process's own could write the state: the state directory, a folder in it, the manifest, the
    journal's index, a kept RECORD (the rule is the runtime's, ``fixpack.runtime.index.writer``).
    Every other state file is believed only when its hash is one those record: a pristine copy, a
    journal's backup (each often the installed file's own inode, whoever installed it). The folder
    above is not judged: who may write the site is the image's choice, and a state directory put
    there by another user is theirs, and refused."""
    if not state_dir.is_dir():
        return
    why = untrusted(str(state_dir), str(state_dir)) or _untrusted_inside(state_dir)
    if why is not None:
        raise EnvironmentProblem(
            f"{why}, which fixpack does not trust: fixpack's state in {state_dir} must be writable by root or "
            f"uid {os.geteuid()} alone (chown and chmod go-w it, after checking what it holds)",
            path=str(state_dir),
        )


def _untrusted_inside(state_dir: Path) -> str | None:
    for folder, names, files in os.walk(state_dir):
        anchors = [n for n in files if _anchor(Path(folder, n).relative_to(state_dir).parts)]
        for name in [*names, *anchors]:
            try:
                who = writer(os.lstat(os.path.join(folder, name)))
            except OSError:
                continue  # gone since it was listed
            if who is not None:
                return f"{os.path.join(folder, name)} can be written by {who}"
    return None


def _anchor(parts: tuple[str, ...]) -> bool:
    """A state file whose bytes are believed as they are, checked by no recorded hash."""
    if parts in ((MANIFEST,), (JOURNAL, JOURNAL_INDEX)):
        return True
    return len(parts) == 3 and parts[0] == PRISTINE_DIR and parts[1].endswith(".dist-info") and parts[2] == "RECORD"
