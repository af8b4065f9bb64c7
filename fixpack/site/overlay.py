"""The overlay destination: an apply that writes nothing under site-packages.

``DIR`` receives the patched modules (``DIR/.fixpack/modules/<repository path>``, with their
hash-based .pyc in their own ``__pycache__``), the start-up import hook (``DIR/sitecustomize.py``),
the runtime check's distribution and fixpack's state (``DIR/.fixpack/manifest.json``). A process
with DIR on ``PYTHONPATH`` imports the patched modules from DIR and everything else as installed.

An overlay is never changed in place. It is built whole beside DIR, in
``.DIR.fixpack-new-XXXX``, each file fsynced, and then swapped in: the old DIR is renamed aside
to ``.DIR.fixpack-old-XXXX``, the new one renamed to DIR, the old one removed. A run killed at any
point leaves, for the next run's :meth:`Overlay.recover` (under the lock, before anything else):

- during the build: DIR as it was, and a ``-new-`` folder, removed;
- after the old one is renamed aside, before the new one is in: no DIR; the old one is renamed
  back (the old overlay), the new one removed;
- after the new one is in, before the old one is gone: the new overlay; the old one is removed.

So DIR is the old overlay or the new one, never a mix. Removing an overlay (``revert``) renames it
aside and removes it: killed in between, the next run brings it back. Applies to one DIR
serialise on a lock of the folder holding it. ``FIXPACK_CRASH_AFTER=N`` (tests) kills the
process after the N-th durable write: each file of the build, each rename, the removal."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import EnvironmentProblem
from . import confine, lock
from .files import CrashCounter, fsync_dir, write_synced
from .layout import MANIFEST, STATE_DIR_NAME, aside_prefix
from .warm import exec_command

__all__ = ["Overlay", "MODULES", "activation", "exec_command"]

MODULES = f"{STATE_DIR_NAME}/modules"  # the patched modules, by repository path, under DIR


def activation(root: Path) -> str:
    """The one shell line that makes a process (and the processes it starts) use the overlay."""
    return f"export PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}}"


class Overlay:
    """An overlay folder, and fixpack's state for it inside it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root))
        self.state_dir = self.root / STATE_DIR_NAME

    def _aside(self, kind: str) -> list[Path]:
        prefix = f"{aside_prefix(self.root.name)}{kind}-"
        try:
            names = os.listdir(self.root.parent)
        except OSError:
            return []
        return sorted(self.root.parent / n for n in names if n.startswith(prefix))

    def is_overlay(self) -> bool:
        return (self.state_dir / MANIFEST).is_file()

    def read(self, rel: str) -> bytes | None:
        try:
            return confine.inside(self.root, rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError, EnvironmentProblem):
            return None

    @contextlib.contextmanager
    def locked(self, create: bool = False) -> Iterator[None]:
        """The lock of the folder that holds DIR (``create``: make that folder first)."""
        if create:
            try:
                self.root.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise EnvironmentProblem(
                    f"cannot make {self.root.parent}: {exc.strerror}", path=str(self.root)
                ) from None
        with lock.locked(self.root):  # locks self.root's parent, as it locks a state directory's
            yield

    def recover(self) -> str | None:
        """Finish or undo a build, swap or removal that was killed; a note when there was one."""
        new, old = self._aside("new"), self._aside("old")
        if not new and not old:
            return None
        try:
            for folder in new:  # never renamed in: incomplete, or the loser of a killed swap
                shutil.rmtree(folder)
            kept = "the new overlay"
            if old and not self.root.exists():  # killed between the two renames: the old one goes back
                os.rename(old[-1], self.root)
                old, kept = old[:-1], "the previous overlay"
            for folder in old:
                shutil.rmtree(folder)
            fsync_dir(self.root.parent)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot finish the interrupted overlay build beside {self.root} ({exc}); remove the "
                f".{self.root.name}.fixpack-* folders in {self.root.parent} by hand",
                path=str(self.root),
            ) from None
        return f"recovered an interrupted overlay build in {self.root.parent}: {self.root} is {kept}"

    def check(self) -> None:
        """Refuse, before any write, what the build could not do or must not do."""
        parent = self.root.parent
        try:
            mode = os.lstat(self.root).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and (stat.S_ISLNK(mode) or not stat.S_ISDIR(mode)):
            raise EnvironmentProblem(f"refusing --overlay {self.root}: it is not a folder", path=str(self.root))
        if mode is not None and not self.is_overlay() and any(os.scandir(self.root)):
            raise EnvironmentProblem(
                f"refusing --overlay {self.root}: it is a folder with files and not a fixpack overlay; "
                "name a new or empty folder (fixpack replaces the whole folder)",
                path=str(self.root),
            )
        while not parent.exists() and parent != parent.parent:  # a folder still to be made: its nearest one
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise EnvironmentProblem(
                f"{parent} is not writable by uid {os.getuid()}: the overlay is built beside {self.root.name} "
                "and renamed into place; name a folder in a writable place",
                path=str(parent),
            )

    def commit(self, files: dict[str, bytes]) -> None:
        """Build an overlay of ``files`` (path relative to DIR -> bytes) and swap it in."""
        self.check()
        counter = CrashCounter()
        parent = self.root.parent
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.root.name}.fixpack-new-", dir=parent))
        try:
            os.chmod(tmp, 0o755)  # readable by the uid the image runs as, when built by root
            folders = {tmp}
            for rel, content in sorted(files.items()):
                path = confine.inside(tmp, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_synced(path, content)
                folders.add(path.parent)
                counter.wrote()
            for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
                fsync_dir(folder)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvironmentProblem(
                f"building the overlay beside {self.root} failed, nothing changed: {exc}"
            ) from None
        self._swap(tmp, counter)

    def _swap(self, new: Path | None, counter: CrashCounter) -> None:
        old = None
        if self.root.exists():
            old = self.root.parent / f".{self.root.name}.fixpack-old-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(self.root, old)
            fsync_dir(self.root.parent)
            counter.wrote()
        if new is not None:
            try:
                os.rename(new, self.root)
            except OSError as exc:
                if old is not None:
                    os.rename(old, self.root)
                shutil.rmtree(new, ignore_errors=True)
                raise EnvironmentProblem(f"cannot rename the new overlay into {self.root}: {exc}") from None
            fsync_dir(self.root.parent)
            counter.wrote()
        if old is not None:
            shutil.rmtree(old)
            fsync_dir(self.root.parent)
            counter.wrote()

    def remove(self) -> None:
        """Remove the overlay (renamed aside first: killed, the next run brings it back)."""
        if not self.root.exists():
            return
        self.check()
        self._swap(None, CrashCounter())
