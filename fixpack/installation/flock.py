"""The state folder's flock: one fixpack at a time on a site, a wait that is said, and a timeout
(``FIXPACK_LOCK_TIMEOUT``). Not the cookbook's lock files (fingerprints: ``cookbook/lockfile.py``)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import EnvironmentProblem, UsageError

__all__ = ["lock_timeout", "locked"]


def lock_timeout() -> float:
    raw = os.environ.get("FIXPACK_LOCK_TIMEOUT", "300")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"FIXPACK_LOCK_TIMEOUT={raw!r}: expected a number of seconds, e.g. 300")
    return value


def _holder(fd: int) -> int | None:
    """The pid holding a flock on ``fd``'s file, from /proc/locks (Linux); None when unknown."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 4242 00:2f:1234 0 EOF"
        fields = line.split()
        if "FLOCK" in fields and "->" not in fields and key in fields:
            pid = fields[fields.index(key) - 1]
            return int(pid) if pid.isdigit() else None
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def locked(state_dir: Path, timeout: float | None = None, notify: Callable[[str], None] = _say) -> Iterator[None]:
    """Hold the environment's lock; a second fixpack waits for the first, then goes on.

    The lock is taken on the folder that holds the state directory, so taking it writes nothing.
    A wait longer than a second is said once (``notify``), so that a slow start is explained."""
    if timeout is None:
        timeout = lock_timeout()
    try:
        fd = os.open(state_dir.parent, os.O_RDONLY)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot open {state_dir.parent} to lock it: {exc.strerror}") from None
    start = time.monotonic()
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                waited = time.monotonic() - start
                if waited >= timeout:
                    raise EnvironmentProblem(
                        f"another fixpack holds the lock on {state_dir.parent} (waited {timeout:g} s)"
                    ) from None
                if not told and waited >= 1.0:
                    pid = _holder(fd)
                    who = f" (pid {pid})" if pid is not None else ""
                    notify(
                        f"fixpack: waiting for another fixpack{who} holding the lock on {state_dir.parent}, "
                        f"up to {timeout:g} s"
                    )
                    told = True
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock
