"""Applies a set of file writes to an environment all or nothing, and recovers after a crash.

The recipe: take the environment's lock; check, before the first write, every folder the commit
will write or remove in; write the journal (which files, their hashes before and after); back up
every file about to change; replace each target atomically (keeping its mode); remove the stale
bytecode of each changed module; remove the journal. A write that fails rolls back at once. A
journal found later means a run died part way: ``recover`` puts every listed file back from its
backup (or removes it if it did not exist), so the environment is wholly as before.

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
import json
import os
import re
import stat
import time
from pathlib import Path

from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem
from ..structs import struct
from . import confine, files
from .files import CrashCounter, atomic_write, fsync_dir, remove, remove_bytecode, stale_bytecode, tmp_name
from .layout import JOURNAL, JOURNAL_INDEX
from .lock import locked

__all__ = ["Write", "STATE", "SITE", "check", "commit", "recover", "discard", "locked", "remove_bytecode"]

STATE, SITE = "state", "site"  # the journal's names of the state directory and of the folder holding it
JOURNAL_FORMAT = 2  # 1 named files by absolute path
_HASH = re.compile(r"^[0-9a-f]{64}$")
_BACKUP = re.compile(r"^[0-9]+\.bak$")


@struct(frozen=True)
class Write:
    path: Path
    content: bytes | None  # None: remove the file
    same_as: Path | None = None  # a file that may hold exactly ``content`` now: then it is linked, not copied


@struct(frozen=True)
class _Entry:
    """One file of a transaction, as the journal names it."""

    root: str
    path: str
    old: str | None  # sha256 before; None: the file did not exist
    new: str | None
    backup: str | None  # the backup's name in the journal folder; None when old is None

    def to_json(self) -> dict[str, str | None]:
        return {"root": self.root, "path": self.path, "old": self.old, "new": self.new, "backup": self.backup}


def way_out(state_dir: Path) -> str:
    """What the operator can do when an interrupted transaction cannot be rolled back."""
    return (
        f"check the files named; then `fixpack recover --site {state_dir.parent} --discard` sets the journal "
        "aside and leaves the files as they are, and `fixpack status` shows where each fix stands"
    )


def _locate(path: Path, roots: dict[str, Path]) -> tuple[str, str]:
    """The journal's name of ``path``: the innermost root holding it, and the path inside it."""
    best: tuple[str, str] | None = None
    depth = -1
    for name, root in roots.items():  # in order: the first of equally deep roots wins
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if len(root.parts) > depth:
            best, depth = (name, rel.as_posix()), len(root.parts)
    if best is None:
        raise EnvironmentProblem(f"refusing to write {path}: it is under none of {', '.join(map(str, roots.values()))}")
    return best


def _state_folders(state_dir: Path) -> Path:
    """The journal folder, once the state directory and it are known to be real folders, not links."""
    confine.inside(state_dir.parent, state_dir.name, folder=True)
    return confine.inside(state_dir, JOURNAL, folder=True)


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check(state_dir: Path, writes: list[Write], roots: dict[str, Path]) -> None:
    """Refuse, before any write, what the commit could not do: a path outside its root or through
    a symlink, and any folder the commit writes or removes in that is not writable.

    Files are replaced by renaming, so it is the folders that must be writable: each target's,
    each ``__pycache__`` holding bytecode to remove, the state directory's (for the journal), and
    for a folder still to be made, the nearest one that exists."""
    if not writes:
        return
    journal = _state_folders(state_dir)
    folders: dict[Path, None] = {_existing(journal): None}
    for w in writes:
        name, rel = _locate(w.path, roots)
        confine.inside(roots[name], rel)
        folders[_existing(w.path.parent)] = None
        for pyc in stale_bytecode(w.path):
            folders[pyc.parent] = None
    for folder in folders:
        if not os.access(folder, os.W_OK):
            raise EnvironmentProblem(
                f"{folder} is not writable by uid {os.getuid()}: run fixpack as the owner of the "
                "installation (e.g. as root when the image is built), or make it writable for this user",
                path=str(folder),
            )


def commit(state_dir: Path, writes: list[Write], roots: dict[str, Path]) -> None:
    """Apply ``writes`` all or nothing. The caller holds the lock and has run :func:`check`.

    A write that fails (a full disk, a file that cannot be removed) rolls back what was done
    before it, at once; a rollback that cannot finish keeps the journal for the next run."""
    counter = CrashCounter()
    try:
        _commit(state_dir, writes, roots, counter)
    except OSError as exc:
        try:
            _recover(state_dir, roots, counter)
        except EnvironmentProblem as again:
            raise EnvironmentProblem(f"writing failed ({exc}) and so did rolling back: {again.message}") from None
        raise EnvironmentProblem(f"writing failed, everything was put back: {exc}") from None


def _commit(state_dir: Path, writes: list[Write], roots: dict[str, Path], counter: CrashCounter) -> None:
    journal = state_dir / JOURNAL
    journal.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, w in enumerate(writes):
        root, rel = _locate(w.path, roots)
        old = w.path.read_bytes() if w.path.exists() else None
        backup = f"{i}.bak" if old is not None else None
        entries.append(_Entry(root, rel, sha256(old), sha256(w.content), backup))
    index = {"format": JOURNAL_FORMAT, "entries": [e.to_json() for e in entries]}
    atomic_write(journal / JOURNAL_INDEX, json.dumps(index, indent=1).encode())
    counter.wrote()
    for w, entry in zip(writes, entries):
        if entry.backup is not None:
            files.backup(w.path, journal / entry.backup)
            counter.wrote()
    fsync_dir(journal)  # every backup is durable before the first target changes
    linked = _link_copies(writes)
    folders: dict[Path, None] = {}
    for w in writes:
        if w.content is None:
            with contextlib.suppress(FileNotFoundError):
                w.path.unlink()
        elif w.path in linked:
            os.replace(tmp_name(w.path), w.path)
        else:
            w.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(w.path, w.content, like=w.path, sync_dir=False)
        folders[w.path.parent] = None
        remove_bytecode(w.path)
        counter.wrote()
    for folder in folders:  # every rename is durable before the journal goes
        fsync_dir(folder)
    _clear_journal(journal)
    _prune(state_dir)


def _link_copies(writes: list[Write]) -> set[Path]:
    """The writes whose ``same_as`` holds exactly their bytes, each given a hard link to it as its
    temporary file now, before any target changes: the pristine copy of a file about to be
    patched is its old inode (targets are replaced by renaming, never written in place), with no
    bytes to write or sync. Anything else (another file system, other bytes) is written as usual."""
    linked = set()
    for w in writes:
        if w.same_as is None or w.content is None:
            continue
        tmp = tmp_name(w.path)
        try:
            if w.same_as.read_bytes() != w.content:
                continue
            w.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)
            os.link(w.same_as, tmp)
        except OSError:
            continue
        linked.add(w.path)
    return linked


def _prune(state_dir: Path) -> None:
    """Remove the state directory's empty folders (all of it after a full revert)."""
    for folder in sorted((p for p in state_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
    with contextlib.suppress(OSError):
        state_dir.rmdir()


def _clear_journal(journal: Path) -> None:
    # journal.json goes first: without it the folder's remains mean nothing.
    remove(journal / JOURNAL_INDEX)
    for leftover in journal.iterdir():
        leftover.unlink()
    journal.rmdir()
    fsync_dir(journal.parent)


def _parse(raw: bytes, roots: dict[str, Path]) -> list[_Entry]:
    """The journal's entries; ValueError, saying what is wrong, for anything but fixpack's shape."""
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError("not a fixpack journal (no list of entries)")
    if data.get("format", 1) != JOURNAL_FORMAT:  # format 1 (no "format" key) named files by absolute path
        raise ValueError(f"journal format {data.get('format', 1)!r}; this fixpack reads format {JOURNAL_FORMAT}")
    entries = []
    for n, e in enumerate(data["entries"]):
        if not isinstance(e, dict) or set(e) != {"root", "path", "old", "new", "backup"}:
            raise ValueError(f"entry {n} is not {{root, path, old, new, backup}}")
        if e["root"] not in roots:
            known = ", ".join(sorted(roots))
            raise ValueError(f"entry {n} names root {e['root']!r}, which this environment does not have ({known})")
        if not isinstance(e["path"], str):
            raise ValueError(f"entry {n}: path is not text")
        for key in ("old", "new"):
            if e[key] is not None and not (isinstance(e[key], str) and _HASH.match(e[key])):
                raise ValueError(f"entry {n}: {key} is not a sha256 hex digest")
        if (e["backup"] is None) != (e["old"] is None):
            raise ValueError(f"entry {n}: a backup is named exactly when the file existed before")
        if e["backup"] is not None and not (isinstance(e["backup"], str) and _BACKUP.match(e["backup"])):
            raise ValueError(f"entry {n}: backup {e['backup']!r} is not a name in the journal folder")
        entries.append(_Entry(e["root"], e["path"], e["old"], e["new"], e["backup"]))
    return entries


def _read_backup(journal: Path, entry: _Entry) -> bytes:
    """The backup's bytes, only from a regular file in the journal folder, and only if they are
    the bytes the journal says the file had."""
    assert entry.backup is not None
    path = journal / entry.backup
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"backup {path} is not a regular file")
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"backup {path} cannot be read ({exc.strerror})") from None
    if sha256(data) != entry.old:
        raise ValueError(f"backup {path} is not the bytes the journal recorded (its sha256 is not {entry.old})")
    return data


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
        entries = _parse(index.read_bytes(), roots)
        # Everything is judged before the first write: a journal that cannot be trusted leaves the site as it is.
        plan: list[tuple[Path, bool, bytes | None]] = []  # path, to restore, its old bytes (None: remove)
        for entry in entries:
            path = confine.inside(roots[entry.root], entry.path)
            now = sha256(path.read_bytes()) if path.exists() else None
            if now == entry.old:
                plan.append((path, False, None))
            elif now == entry.new:
                plan.append((path, True, _read_backup(journal, entry) if entry.old is not None else None))
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
        _clear_journal(journal)
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
