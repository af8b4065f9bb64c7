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
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..core.bytecode import hash_based_pyc, pyc_path
from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem, Refused
from . import confine, flock, plugin
from .destination import Destination, Held, InstalledFile, Placement, Rebuilt, Shadow, Write
from .distributions import Distribution, Environment
from .files import CrashCounter, fsync_dir, make_folders, write_synced
from .layout import MANIFEST, STATE_DIR_NAME, aside_prefix
from .manifest import Manifest
from .state import read_manifest
from .warm import exec_command

__all__ = ["Overlay", "OverlayAt", "MODULES", "HOOK", "activation", "exec_command"]

MODULES = f"{STATE_DIR_NAME}/modules"  # the patched modules, by repository path, under DIR
HOOK = "sitecustomize.py"  # the start-up import hook: fixpack/runtime/hook.py, copied


def activation(root: Path) -> str:
    """The one shell line that makes a process (and the processes it starts) use the overlay."""
    return f"export PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}}"


class Overlay:
    """An overlay folder, and fixpack's state for it inside it."""

    mode = "overlay"
    own_files = (HOOK, *plugin.CODE)

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root))
        self.state_dir = self.root / STATE_DIR_NAME
        self.where = f"in the overlay {self.root}"
        self.pythonpath: Path | None = self.root

    def _aside(self, kind: str) -> list[Path]:
        prefix = f"{aside_prefix(self.root.name)}{kind}-"
        try:
            names = os.listdir(self.root.parent)
        except OSError:
            return []
        return sorted(self.root.parent / n for n in names if n.startswith(prefix))

    def is_overlay(self) -> bool:
        return (self.state_dir / MANIFEST).is_file()

    def _file(self, rel: str) -> bytes | None:
        try:
            return confine.inside(self.root, rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError, EnvironmentProblem):
            return None

    @contextlib.contextmanager
    def locked(self, create: bool = False) -> Iterator[None]:
        """The lock of the folder that holds DIR (``create``: make that folder first; without it,
        where that folder does not exist, no overlay is there to lock)."""
        if not create and not self.root.parent.is_dir():
            yield
            return
        if create:
            try:
                self.root.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise EnvironmentProblem(
                    f"cannot make {self.root.parent}: {exc.strerror}", path=str(self.root)
                ) from None
        with flock.locked(self.root):  # locks self.root's parent, as it locks a state directory's
            yield

    def recover(self) -> str | None:
        """Finish or undo a build, swap or removal that was killed; a note when there was one."""
        if not self.root.parent.is_dir():
            return None
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

    def preflight(self, writes: list[Write] | None = None) -> None:
        """Refuse, before any write, what the build (or the removal) could not do or must not do."""
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

    def commit(self, writes: list[Write]) -> None:
        """Build an overlay of ``writes`` (each file of DIR, by its path in DIR) and swap it in; an
        empty write set removes the overlay."""
        files: dict[str, bytes] = {}
        for w in writes:
            if w.content is not None:
                files[w.path.relative_to(self.root).as_posix()] = w.content
        if not files:
            self.remove()
            return
        self.preflight()
        counter = CrashCounter()
        parent = self.root.parent
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.root.name}.fixpack-new-", dir=parent))
        try:
            os.chmod(tmp, 0o755)  # readable by the uid the image runs as, when built by root
            folders = {tmp}
            for rel, content in sorted(files.items()):
                path = confine.inside(tmp, rel)
                make_folders(path.parent)
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
        self.preflight()
        self._swap(None, CrashCounter())

    # -- what the install commands ask of a destination (fixpack.installation.destination) ----------------

    def read(self) -> Held:
        """The manifest; each patched file's copy, as the index lists it and as it is now, and the
        installed file it shadows; the hook and the runtime check's code as they must be."""
        if not self.is_overlay():
            return Held(Manifest(), Manifest(), {}, {})
        manifest = read_manifest(self.state_dir)
        entries = plugin.read_entries(self._file(plugin.INDEX))
        shadows = {}
        for path, entry in entries.items():
            copy = sha256(self._file(entry.file)) if entry.file else None
            original = Path(entry.original) if entry.original else None
            shadows[path] = Shadow(copy, entry.sha256, original, entry.pristine)
        runtime = plugin.RUNTIME
        own = {self.root / HOOK: sha256((runtime / "hook.py").read_bytes())}
        own.update({self.root / rel: sha256((runtime / source).read_bytes()) for rel, source in plugin.CODE.items()})
        return Held(manifest, Manifest(), shadows, own)  # the installed files: as the release has them

    def place(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
    ) -> Placement:
        """Every file of the new overlay (none: the overlay goes); the warm stamp's targets are each
        overlay module and each installed file it shadows."""
        manifest_at = self.state_dir / MANIFEST
        if new.empty:
            return Placement((), new, manifest_at, {})
        out: dict[str, bytes] = {}
        entries, expected = [], {}
        for path, record in sorted(new.files.items()):
            if not path.endswith(".py") or plugin.module_name(path) is None:
                raise Refused(
                    f"{path} is not a Python module: an overlay can only carry modules (apply in place instead)",
                    fix_id=record.fixes[0],
                    path=path,
                )
            content = rebuilt.new[path]
            rel = f"{MODULES}/{path}" if content is not None else None
            if content is not None and rel is not None:
                out[rel] = content
                code, pyc = rebuilt.code.get(path), pyc_path(rel)
                if code is not None and pyc is not None:
                    out[pyc] = hash_based_pyc(code, content)
                expected[str(self.root / rel)] = record.applied
            f = files[path]
            original = f.dist.file(path)
            pristine = sha256(f.current)  # the installed bytes the overlay is built over
            entries.append(
                plugin.IndexEntry(
                    path, record.dist, plugin.module_name(path), rel, record.applied, str(original), pristine
                )
            )
            expected[str(original)] = pristine
        hook = (plugin.RUNTIME / "hook.py").read_bytes()
        out[HOOK] = hook
        compiled = plugin.pyc(HOOK, hook)
        if compiled is not None:
            out[compiled[0]] = compiled[1]
        packages = (d.package for d in dists.values())
        out.update(plugin.files(plugin.index("overlay", new, entries, packages)))
        for rel in (HOOK, plugin.INDEX, *plugin.CODE):
            expected[str(self.root / rel)] = sha256(out[rel])
        writes = tuple(Write(self.root / rel, content) for rel, content in out.items())
        return Placement(writes, new, manifest_at, expected)


class OverlayAt:
    """An overlay, chosen on the command line (``--overlay DIR``): the fixes go into ``root``, over
    the distributions in ``site`` (None: this interpreter's path)."""

    def __init__(self, root: Path, site: Path | None = None) -> None:
        self.root, self.site = root, site
        self.where = f"in the overlay {root}"

    def open(self, env: Environment) -> Destination:
        return Overlay(self.root)
