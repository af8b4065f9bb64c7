"""Durable file operations: write via a temporary file and rename, keep a backup by hard link,
fsync folders, and find a module's cached bytecode.

Every file fixpack writes goes through here, and none is written through a link: a file is created
afresh (``O_CREAT | O_EXCL | O_NOFOLLOW``) after whatever had its name is removed, never opened for
writing where it stands, and renamed into place. Its mode is set explicitly (0644 files, 0755
folders, or the mode of the file it replaces), whatever the umask: a vLLM process of another uid
reads what root wrote. A temporary file the transaction's recovery must find keeps the name
``.NAME.fixpack-tmp`` beside its target (inside the site or the state directory, whose writers are
the site's); a file named on the command line (``--output``) gets an unpredictable one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "CrashCounter",
    "FILE_MODE",
    "FOLDER_MODE",
    "NotARegularFile",
    "fsync_dir",
    "make_folders",
    "backup",
    "tmp_name",
    "atomic_write",
    "write_synced",
    "write_output",
    "keep_mode",
    "remove",
    "stale_bytecode",
    "remove_bytecode",
]


FILE_MODE, FOLDER_MODE = 0o644, 0o755
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFile(OSError):
    """A file named to be written is a link, a folder, a device, a FIFO or a socket."""


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


def _write_fd(fd: int, content: bytes, mode: int) -> None:
    """Write all of ``content`` to ``fd``, give it ``mode`` and fsync it; closes ``fd``."""
    try:
        os.fchmod(fd, mode)  # not the umask's: a process of another uid reads it
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, content: bytes, mode: int = FILE_MODE) -> None:
    """Create ``path`` afresh with ``content`` and ``mode``, fsynced. Whatever had the name (a link
    included) is removed first, never followed; one put there meanwhile makes this fail."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    _write_fd(os.open(path, _CREATE, mode), content, mode)


def make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents, each with FOLDER_MODE whatever the umask; the
    folders made, outermost first."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    made = []
    for f in reversed(missing):
        f.mkdir(mode=FOLDER_MODE)
        os.chmod(f, FOLDER_MODE)
        made.append(f)
    return made


def write_output(path: Path, content: bytes) -> None:
    """``path``, a file named on the command line, holds ``content`` whole or is as it was: written
    to a temporary file of an unpredictable name beside it and renamed over it, with the mode of
    the file it replaces (FILE_MODE for a new one). NotARegularFile when ``path`` is a link, a
    folder or a special file: it is never written through, nor replaced."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(f"{path}: {_kind(st.st_mode)}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".fixpack-tmp", dir=path.parent)
    try:
        _write_fd(fd, content, stat.S_IMODE(st.st_mode) & 0o777 if st is not None else FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_changed(path: Path, content: bytes) -> bool:
    """``write_output``, only when ``path`` does not hold ``content`` already; whether it wrote."""
    try:
        if os.path.isfile(path) and not os.path.islink(path) and path.read_bytes() == content:
            return False
    except OSError:
        pass
    write_output(path, content)
    return True


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "is a symbolic link (fixpack does not write through links: name the file itself)"
    if stat.S_ISDIR(mode):
        return "is a directory"
    return "is not a regular file (a device, a FIFO or a socket), which fixpack does not replace"


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
