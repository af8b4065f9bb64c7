"""Durable file operations for the transaction: write via a temporary file and rename, keep a
backup by hard link, fsync folders, and find a module's cached bytecode."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = [
    "CrashCounter",
    "fsync_dir",
    "backup",
    "tmp_name",
    "atomic_write",
    "write_synced",
    "keep_mode",
    "remove",
    "stale_bytecode",
    "remove_bytecode",
]


class CrashCounter:
    """Crash tests only: ``FIXPACK_CRASH_AFTER=N`` kills the process (``os._exit``, no clean-up)
    right after its N-th durable write."""

    def __init__(self) -> None:
        raw = os.environ.get("FIXPACK_CRASH_AFTER", "")
        self.limit = int(raw) if raw.isdigit() and int(raw) > 0 else None
        self.count = 0

    def wrote(self) -> None:
        self.count += 1
        if self.limit is not None and self.count >= self.limit:
            os._exit(99)


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def backup(source: Path, backup: Path) -> None:
    """Keep ``source``'s bytes at ``backup``: a hard link where possible (targets are only ever
    replaced by renaming, never written in place, so the linked inode keeps the old bytes), else a
    copy. The caller fsyncs the journal folder once for all backups."""
    try:
        os.link(source, backup)
    except OSError:  # another file system, or links not allowed: copy
        write_synced(backup, source.read_bytes())


def tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.fixpack-tmp")


def write_synced(path: Path, content: bytes) -> None:
    """Write ``path`` (created or truncated) and fsync it."""
    with open(path, "wb") as fh:
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write(path: Path, content: bytes, like: Path | None = None) -> None:
    """Write via a temporary file in the same folder, rename it over ``path``, fsync the folder."""
    tmp = tmp_name(path)
    write_synced(tmp, content)
    if like is not None:
        keep_mode(tmp, like)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def keep_mode(path: Path, like: Path) -> None:
    """Give ``path`` the mode and owner of ``like``, when it exists."""
    try:
        st = like.stat()
    except FileNotFoundError:
        return
    os.chmod(path, st.st_mode & 0o7777)
    with contextlib.suppress(OSError):  # keep the owner when run as root on another's files
        os.chown(path, st.st_uid, st.st_gid)


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_dir(path.parent)


def stale_bytecode(source: Path) -> list[Path]:
    """The cached ``.pyc`` files of a module."""
    cache = source.parent / "__pycache__"
    if source.suffix != ".py" or not cache.is_dir():
        return []
    prefix = source.stem + "."
    # As cache.glob(f"{stem}.*.pyc"), without compiling a pattern.
    return [cache / n for n in os.listdir(cache) if n.startswith(prefix) and n.endswith(".pyc")]


def remove_bytecode(source: Path, but: set[Path] | frozenset[Path] = frozenset()) -> None:
    """Remove every cached ``.pyc`` of a module (but those in ``but``), so the next import
    compiles the new source."""
    for pyc in stale_bytecode(source):
        if pyc not in but:
            with contextlib.suppress(FileNotFoundError):
                pyc.unlink()
