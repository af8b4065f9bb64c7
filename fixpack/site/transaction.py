"""Applies a set of file writes to an environment all or nothing, and recovers after a crash.

The recipe: take the environment's lock; write the journal (which files, their hashes before and
after); back up every file about to change; replace each target atomically (keeping its mode);
remove the stale bytecode of each changed module; remove the journal. A journal found later means
a run died part way: ``recover`` puts every listed file back from its backup (or removes it if it
did not exist), so the environment is wholly as before.

``FIXPACK_CRASH_AFTER=N`` (crash tests only) kills the process with ``os._exit`` right after its
N-th durable write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem
from .layout import JOURNAL


@dataclass(frozen=True)
class Write:
    path: Path
    content: bytes | None  # None: remove the file


class _Counter:
    def __init__(self) -> None:
        raw = os.environ.get("FIXPACK_CRASH_AFTER", "")
        self.limit = int(raw) if raw.isdigit() and int(raw) > 0 else None
        self.count = 0

    def wrote(self) -> None:
        self.count += 1
        if self.limit is not None and self.count >= self.limit:
            os._exit(99)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _backup(source: Path, backup: Path) -> None:
    """Keep ``source``'s bytes at ``backup``: a hard link where possible (targets are only ever
    replaced by renaming, never written in place, so the linked inode keeps the old bytes), else a
    copy. The caller fsyncs the journal folder once for all backups."""
    try:
        os.link(source, backup)
    except OSError:  # another file system, or links not allowed: copy
        with open(backup, "wb") as fh:
            fh.write(source.read_bytes())
            fh.flush()
            os.fsync(fh.fileno())


def _atomic_write(path: Path, content: bytes, like: Path | None = None, sync_dir: bool = True) -> None:
    """Write via a temporary file in the same folder and rename it over ``path``.

    ``sync_dir=False``: the caller fsyncs the folder later (once for several renames)."""
    tmp = path.with_name(f".{path.name}.fixpack-tmp")
    with open(tmp, "wb") as fh:
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())
    source = like if like is not None and like.exists() else None
    if source is not None:
        st = source.stat()
        os.chmod(tmp, st.st_mode & 0o7777)
        with contextlib.suppress(OSError):  # keep the owner when run as root on another's files
            os.chown(tmp, st.st_uid, st.st_gid)
    os.replace(tmp, path)
    if sync_dir:
        _fsync_dir(path.parent)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    _fsync_dir(path.parent)


def remove_bytecode(source: Path) -> None:
    """Remove every cached ``.pyc`` of a module, so the next import compiles the new source."""
    cache = source.parent / "__pycache__"
    if source.suffix == ".py" and cache.is_dir():
        prefix = source.stem + "."
        for name in os.listdir(cache):  # as cache.glob(f"{stem}.*.pyc"), without compiling a pattern
            if name.startswith(prefix) and name.endswith(".pyc"):
                with contextlib.suppress(FileNotFoundError):
                    (cache / name).unlink()


def check_writable(paths: list[Path], state_dir: Path) -> None:
    """Refuse before any write when a target's folder or the state directory is not writable.

    Files are replaced by renaming, so it is the folders that must be writable.
    """
    for path in [*paths, state_dir / JOURNAL]:
        folder = path.parent
        while not folder.exists():
            folder = folder.parent
        if not os.access(folder, os.W_OK):
            raise EnvironmentProblem(
                f"{folder} is not writable by uid {os.getuid()}: run fixpack as the owner of the "
                "installation (e.g. as root when the image is built), or make it writable for this user"
            )


@contextlib.contextmanager
def locked(state_dir: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the environment's lock; a second fixpack waits for the first, then goes on.

    The lock is taken on the folder that holds the state directory, so taking it writes nothing.
    """
    if timeout is None:
        timeout = float(os.environ.get("FIXPACK_LOCK_TIMEOUT", "300"))
    try:
        fd = os.open(state_dir.parent, os.O_RDONLY)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot open {state_dir.parent} to lock it: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    raise EnvironmentProblem(
                        f"another fixpack holds the lock on {state_dir.parent} (waited {timeout:.0f} s)"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def commit(state_dir: Path, writes: list[Write]) -> None:
    """Apply ``writes`` all or nothing. The caller holds the lock and has checked everything.

    A write that fails (a full disk, say) rolls back what was done before it, at once."""
    try:
        _commit(state_dir, writes)
    except OSError as exc:
        try:
            recover(state_dir)
        except EnvironmentProblem as again:
            raise EnvironmentProblem(f"writing failed ({exc}) and so did rolling back: {again.message}") from None
        raise EnvironmentProblem(f"writing failed, everything was put back: {exc}") from None


def _commit(state_dir: Path, writes: list[Write]) -> None:
    counter = _Counter()
    journal = state_dir / JOURNAL
    journal.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, w in enumerate(writes):
        old = w.path.read_bytes() if w.path.exists() else None
        entries.append({"path": str(w.path), "old": sha256(old), "new": sha256(w.content), "backup": f"{i}.bak"})
    _atomic_write(journal / "journal.json", json.dumps({"entries": entries}, indent=1).encode())
    counter.wrote()
    backed_up = False
    for w, entry in zip(writes, entries):
        if entry["old"] is not None:
            _backup(w.path, journal / entry["backup"])
            backed_up = True
            counter.wrote()
    if backed_up:
        _fsync_dir(journal)  # every backup is durable before the first target changes
    folders: dict[Path, None] = {}
    for w in writes:
        if w.content is None:
            with contextlib.suppress(FileNotFoundError):
                w.path.unlink()
        else:
            w.path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(w.path, w.content, like=w.path, sync_dir=False)
        folders[w.path.parent] = None
        remove_bytecode(w.path)
        counter.wrote()
    for folder in folders:  # every rename is durable before the journal goes
        _fsync_dir(folder)
    _clear_journal(journal)
    _prune(state_dir)


def _prune(state_dir: Path) -> None:
    """Remove the state directory's empty folders (all of it after a full revert)."""
    for folder in sorted((p for p in state_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
    with contextlib.suppress(OSError):
        state_dir.rmdir()


def _clear_journal(journal: Path) -> None:
    # journal.json goes first: without it the folder's remains mean nothing.
    _remove(journal / "journal.json")
    for leftover in journal.iterdir():
        leftover.unlink()
    journal.rmdir()
    _fsync_dir(journal.parent)


def recover(state_dir: Path) -> bool:
    """Undo a transaction that died part way. Returns True if there was one. Caller holds the lock."""
    journal = state_dir / JOURNAL
    if not journal.is_dir():
        return False
    index = journal / "journal.json"
    if not index.exists():  # died before the journal was complete: nothing was touched yet
        _clear_journal(journal)
        return True
    try:
        entries = json.loads(index.read_bytes())["entries"]
    except (ValueError, KeyError) as exc:
        raise EnvironmentProblem(f"cannot read the interrupted transaction's journal {index}: {exc}") from None
    for entry in reversed(entries):
        path = Path(entry["path"])
        _remove(path.with_name(f".{path.name}.fixpack-tmp"))  # a rename that never happened
        now = sha256(path.read_bytes()) if path.exists() else None
        if now == entry["old"]:
            continue
        if now != entry["new"]:
            raise EnvironmentProblem(
                f"cannot recover: {path} changed outside fixpack during an interrupted transaction; "
                f"journal kept in {journal}"
            )
        if entry["old"] is None:
            _remove(path)
        else:
            backup = journal / entry["backup"]
            if not backup.exists():
                raise EnvironmentProblem(f"cannot recover: backup of {path} missing from {journal}")
            _atomic_write(path, backup.read_bytes(), like=path)
        remove_bytecode(path)
    _clear_journal(journal)
    _prune(state_dir)
    return True
