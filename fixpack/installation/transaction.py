"""Applies a set of file writes to an environment all or nothing, and recovers after a crash.

The recipe: take the environment's lock; preflight (before the first write, check every folder the commit
will write or remove in); write the journal (which files, their hashes before and after); back up
every file about to change; stage each new content in a temporary file beside its target (a
failure until then removes what was staged: nothing changed); replace each target by renaming its
staged file over it (keeping its mode); remove the stale bytecode of each changed module; remove
the journal. A write that fails rolls back at once. A journal found later means a run died part way:
``recover`` puts every listed file back from its backup (or removes it if it did not exist) and
removes what was staged, so the environment is wholly as before.

The journal names each file by a root ("state", "site", "dist:NAME") and a path relative to it,
never by an absolute path: a journal only ever touches files of the environment it is found in,
and a site moved (or a state directory copied) while interrupted still recovers. Recovery trusts
nothing it reads: the journal's shape, each name (confined to its root, backups to the journal
folder) and each backup's hash are checked before the first write; anything wrong leaves the site
as it is and says what the operator can do (``fixpack recover --discard``).

``FIXPACK_CRASH_AFTER=N`` (crash tests only) kills the process with ``os._exit`` right after its
N-th durable write, rollback and recovery included.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem
from . import confine, files
from .files import (
    CrashCounter,
    atomic_write,
    fsync_dir,
    keep_mode,
    make_folders,
    remove,
    remove_bytecode,
    stale_bytecode,
    tmp_name,
    write_synced,
)
from .flock import locked
from .journal import Entry, locate, read_backup
from .journal import clear as clear_journal
from .journal import read as read_journal
from .journal import write as write_journal
from .layout import JOURNAL, JOURNAL_INDEX

__all__ = [
    "Write",
    "STATE",
    "SITE",
    "preflight",
    "commit",
    "recover",
    "discard",
    "locked",
    "remove_bytecode",
]

STATE, SITE = "state", "site"  # the journal's names of the state directory and of the folder holding it


@dataclass(frozen=True, slots=True)
class Write:
    path: Path
    content: bytes | None  # None: remove the file
    same_as: Path | None = None  # a file that may hold exactly ``content`` now: then it is linked, not copied


def way_out(state_dir: Path) -> str:
    """What the operator can do when an interrupted transaction cannot be rolled back."""
    return (
        f"check the files named; then `fixpack recover --site {state_dir.parent} --discard` sets the journal "
        "aside and leaves the files as they are, and `fixpack status` shows where each fix stands"
    )


def _state_folders(state_dir: Path) -> Path:
    """The journal folder, once the state directory and it are known to be real folders, not links."""
    confine.inside(state_dir.parent, state_dir.name, folder=True)
    return confine.inside(state_dir, JOURNAL, folder=True)


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def preflight(state_dir: Path, writes: list[Write], roots: dict[str, Path]) -> None:
    """Refuse, before any write, what the commit could not do: a path outside its root or through
    a symlink, and any folder the commit writes or removes in that is not writable.

    Files are replaced by renaming, so it is the folders that must be writable: each target's,
    each ``__pycache__`` holding bytecode to remove, the state directory's (for the journal), and
    for a folder still to be made, the nearest one that exists."""
    if not writes:
        return
    journal = _state_folders(state_dir)
    folders: dict[Path, None] = {_existing(journal): None}
    for path in (w.path for w in writes):
        name, rel = locate(path, roots)
        confine.inside(roots[name], rel)
        folders[_existing(path.parent)] = None
        for pyc in stale_bytecode(path):
            folders[pyc.parent] = None
    for folder in folders:
        if not os.access(folder, os.W_OK):
            raise EnvironmentProblem(
                f"{folder} is not writable by uid {os.getuid()}: run fixpack as the owner of the "
                "installation (e.g. as root when the image is built), or make it writable for this user; "
                "or apply with --overlay DIR, which leaves the installation as it is (docs/operators/overlay.md)",
                path=str(folder),
            )


def commit(state_dir: Path, writes: list[Write], roots: dict[str, Path]) -> None:
    """Apply ``writes`` all or nothing. The caller holds the lock and has run :func:`preflight` with
    the same arguments.

    A write that fails (a full disk, a file that cannot be removed), or Ctrl-C, rolls back what was
    done before it, at once; a rollback that cannot finish keeps the journal for the next run."""
    counter = CrashCounter()
    try:
        _commit(state_dir, writes, roots, counter)
    except KeyboardInterrupt:
        _recover(state_dir, roots, counter)  # Ctrl-C again, or a rollback that fails: the next run's
        raise
    except OSError as exc:
        try:
            _recover(state_dir, roots, counter)
        except EnvironmentProblem as again:
            raise EnvironmentProblem(f"writing failed ({exc}) and so did rolling back: {again.message}") from None
        raise EnvironmentProblem(f"writing failed, everything was put back: {exc}") from None


def _commit(state_dir: Path, writes: list[Write], roots: dict[str, Path], counter: CrashCounter) -> None:
    journal = state_dir / JOURNAL
    make_folders(journal)
    made: list[Path] = []  # folders the staging made
    staged: list[Path] = []  # temporary files it wrote
    try:  # until the first target changes, a failure leaves no trace
        _journal(journal, writes, roots, counter)
        in_place = _stage(writes, made, staged, counter)
    except BaseException:
        _unstage(staged, made)
        clear_journal(journal)
        _prune(state_dir)
        raise
    folders: dict[Path, None] = {}
    written = {w.path for w in writes}
    for w in writes:
        if w.path in in_place:
            continue
        if w.content is None:
            with contextlib.suppress(FileNotFoundError):
                w.path.unlink()
        else:
            os.replace(tmp_name(w.path), w.path)
        folders[w.path.parent] = None
        remove_bytecode(w.path, but=written)  # a .pyc this commit writes is replaced, not removed
        counter.wrote()
    for folder in folders:  # every rename is durable before the journal goes
        fsync_dir(folder)
    clear_journal(journal)
    if any(w.content is None for w in writes):  # only a removal can leave a folder empty
        _prune(state_dir)


def _journal(journal: Path, writes: list[Write], roots: dict[str, Path], counter: CrashCounter) -> None:
    """The journal of ``writes`` (written atomically) and a backup of each file they change; all of
    it durable before anything is staged."""
    entries: list[Entry] = []
    for i, w in enumerate(writes):
        root, rel = locate(w.path, roots)
        old = w.path.read_bytes() if w.path.exists() else None
        backup = f"{i}.bak" if old is not None else None
        entries.append(Entry(root, rel, sha256(old), sha256(w.content), backup))
    write_journal(journal, entries)
    counter.wrote()
    for w, entry in zip(writes, entries):
        if entry.backup is not None:
            files.backup(w.path, journal / entry.backup)
            counter.wrote()
    fsync_dir(journal)  # every backup is durable before the first target changes


def _stage(writes: list[Write], made: list[Path], staged: list[Path], counter: CrashCounter) -> set[Path]:
    """Each new content in its temporary file beside its target, synced; no target changes yet.
    Returns the writes already in place (new files linked where they go)."""
    linked = _link_copies(writes, made, staged, counter)
    for w in writes:
        if w.content is None or w.path in linked:
            continue
        made.extend(make_folders(w.path.parent))
        tmp = tmp_name(w.path)
        staged.append(tmp)
        write_synced(tmp, w.content)
        keep_mode(tmp, w.path)
        counter.wrote()
    return {p for p, in_place in linked.items() if in_place}


def _unstage(staged: list[Path], made: list[Path]) -> None:
    """Remove what :func:`_stage` wrote (or linked), and the folders it made (deepest first)."""
    for tmp in staged:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _link_copies(writes: list[Write], made: list[Path], staged: list[Path], counter: CrashCounter) -> dict[Path, bool]:
    """The writes whose ``same_as`` holds exactly their bytes, each given a hard link to it now,
    before any target changes: the pristine copy of a file about to be patched is its old inode
    (targets are replaced by renaming, never written in place), with no bytes to write or sync.
    A new file is linked where it goes (a link is there whole or not at all; its folder is
    synced here): True; one that exists gets its temporary file linked: False. Anything else
    (another file system, other bytes) is written as usual."""
    linked: dict[Path, bool] = {}
    for w in writes:
        if w.same_as is None or w.content is None:
            continue
        in_place = not os.path.lexists(w.path)
        to = w.path if in_place else tmp_name(w.path)
        try:
            if w.same_as.read_bytes() != w.content:
                continue
            made.extend(make_folders(w.path.parent))
            if not in_place:
                to.unlink(missing_ok=True)
            staged.append(to)
            os.link(w.same_as, to)
        except OSError:
            continue
        linked[w.path] = in_place
        counter.wrote()
    for folder in dict.fromkeys(p.parent for p, in_place in linked.items() if in_place):
        fsync_dir(folder)
    return linked


def _prune(state_dir: Path) -> None:
    """Remove the state directory's empty folders (all of it after a full revert)."""
    for folder in sorted((p for p in state_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
    with contextlib.suppress(OSError):
        state_dir.rmdir()


def recover(state_dir: Path, roots: dict[str, Path]) -> bool:
    """Undo a transaction that died part way. Returns True if there was one. Caller holds the lock.

    EnvironmentProblem (exit 3), the site left as it is, when the journal cannot be trusted."""
    return _recover(state_dir, roots, CrashCounter())


def _recover(state_dir: Path, roots: dict[str, Path], counter: CrashCounter) -> bool:
    journal = _state_folders(state_dir)
    if not journal.is_dir():
        return False
    index = journal / JOURNAL_INDEX
    if not index.exists():  # died before the journal was complete: nothing was touched yet
        _finish(journal, state_dir)
        return True
    try:
        entries = read_journal(journal, roots)
        # Everything is judged before the first write: a journal that cannot be trusted leaves the site as it is.
        plan: list[tuple[Path, bool, bytes | None]] = []  # path, to restore, its old bytes (None: remove)
        for entry in entries:
            path = confine.inside(roots[entry.root], entry.path)
            now = sha256(path.read_bytes()) if path.exists() else None
            if now == entry.old:
                plan.append((path, False, None))
            elif now == entry.new:
                plan.append((path, True, read_backup(journal, entry) if entry.old is not None else None))
            else:
                raise ValueError(f"{path} changed outside fixpack during the interrupted transaction")
    except (OSError, ValueError, RecursionError, EnvironmentProblem) as exc:
        reason = exc.message if isinstance(exc, EnvironmentProblem) else str(exc)
        raise EnvironmentProblem(
            f"cannot recover the interrupted transaction in {journal}: {reason}. Nothing was changed; "
            + way_out(state_dir),
            path=str(journal),
        ) from None
    problems = []
    for path, restore, old in reversed(plan):
        try:
            tmp = tmp_name(path)
            if os.path.isfile(tmp) and not os.path.islink(tmp):  # a rename that never happened; only ours
                remove(tmp)
            if not restore:
                continue
            if old is None:
                remove(path)
            else:
                atomic_write(path, old, like=path)
            counter.wrote()
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        # A .pyc left behind is harmless: it records another file's mtime and size than the one restored.
        with contextlib.suppress(OSError):
            remove_bytecode(path)
    if problems:
        raise EnvironmentProblem(
            f"could not finish rolling back the transaction in {journal} ({'; '.join(problems)}); "
            f"the journal is kept and the next fixpack run tries again; or {way_out(state_dir)}",
            path=str(journal),
        )
    _finish(journal, state_dir)
    return True


def _finish(journal: Path, state_dir: Path) -> None:
    try:
        clear_journal(journal)
    except OSError as exc:
        raise EnvironmentProblem(
            f"the files are as before, but the journal {journal} could not be removed ({exc.strerror}); "
            "remove it, or run fixpack again as a user who can",
            path=str(journal),
        ) from None
    _prune(state_dir)


def discard(state_dir: Path) -> Path | None:
    """Set an interrupted transaction's journal aside, files left as they are: the operator's way
    out when recovery refuses. Returns where the journal went (None: there was none)."""
    journal = _state_folders(state_dir)
    if not journal.is_dir():
        return None
    aside = state_dir / f"{JOURNAL}.discarded-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    os.replace(journal, aside)
    fsync_dir(state_dir)
    return aside
