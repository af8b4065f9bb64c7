"""The compile check of several modules, the largest in a forked child that starts before any
file is built: the child makes that module's content (the same pure function of what the parent
holds), sends it, and compiles it, while the parent builds every other file, takes that content
from the child instead of building it again, and compiles the rest. On two cores the check then
ends about when the largest module would be compiled on its own (hpu_model_runner.py: 70 of the
105 ms for the v0.26.0 pack), and the caller's own work between ``ahead`` and ``theirs`` is
hidden behind it. Bytes in, marshalled code out.

The child only builds, compiles and writes to a pipe: first the content (framed by its length),
then the result with the content's sha256; it never touches a file. Its code is used only for
the very bytes added here. Without ``os.fork``, on one core, or when the child fails in any way
(a change that does not apply included), the parent builds and compiles the module itself.
"""

from __future__ import annotations

import contextlib
import marshal
import os
from collections.abc import Callable
from typing import BinaryIO

from .fingerprint import sha256
from .rebuild import compiled

__all__ = ["Compiled", "Compiler", "WORTH_A_CHILD"]

Compiled = tuple[bytes | None, str | None]  # marshalled code object (when kept), or why it does not compile

WORTH_A_CHILD = 64 * 1024  # bytes of source: about 20 ms to compile, several times a fork's cost

_PIPE = 1 << 20  # what Linux lets any user give a pipe: the child sends a module up to this size without waiting


def _compile(path: str, content: bytes | None, keep: bool) -> Compiled:
    code, problem = compiled(path, content)
    return (marshal.dumps(code) if keep and code is not None else None), problem


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _frame(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def _unframe(got: BinaryIO) -> object:
    """The next framed value from the child; ValueError when it sent none (it failed, or died)."""
    head = got.read(8)
    if len(head) != 8:
        raise ValueError("nothing sent")
    data = got.read(int.from_bytes(head, "little"))
    try:
        return marshal.loads(data)
    except (EOFError, TypeError) as exc:
        raise ValueError("cut short") from exc


class _Child:
    def __init__(self, pid: int, got: BinaryIO, path: str) -> None:
        self.pid, self.got, self.path = pid, got, path
        self.content: tuple[bytes | None] | None = None  # what it sent, once read

    def reap(self) -> int:
        self.got.close()
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


class Compiler:
    """``ahead`` the largest module, ``add`` each module as it is built; then ``results``, or
    ``own`` and later ``theirs`` (the caller works between the two while the child compiles)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep  # False: check only (no bytecode will be written)
        self.sources: dict[str, bytes | None] = {}
        self.done: dict[str, Compiled] = {}
        self.child: _Child | None = None

    def ahead(self, path: str, make: Callable[[], bytes | None]) -> None:
        """Build and compile ``path`` in a child, which makes its content with ``make``; the
        content must still be given to ``add`` (:meth:`built` gives the child's). Nothing is
        started without fork or a second core."""
        if self.child is None and hasattr(os, "fork") and _cores() > 1:
            self.child = self._fork(path, make)

    def built(self, path: str, make: Callable[[], bytes | None]) -> bytes | None:
        """``path``'s content: as the child made it when the child builds it, else ``make()``."""
        child = self.child
        if child is not None and child.path == path:
            if child.content is None:
                with contextlib.suppress(ValueError, OSError):
                    sent = _unframe(child.got)
                    if isinstance(sent, bytes) or sent is None:
                        child.content = (sent,)
            if child.content is not None:
                return child.content[0]
        return make()

    def add(self, path: str, content: bytes | None) -> None:
        self.sources[path] = content

    def _fork(self, path: str, make: Callable[[], bytes | None]) -> _Child:
        read, write = os.pipe()
        with contextlib.suppress(AttributeError, OSError):  # F_SETPIPE_SZ: Linux only
            import fcntl

            fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, _PIPE)
        pid = os.fork()
        if pid == 0:  # the child: build, send, compile, send, and leave without any clean-up
            status = 1
            try:
                os.close(read)
                with os.fdopen(write, "wb") as out:
                    content = make()
                    out.write(_frame(marshal.dumps(content)))
                    out.flush()
                    out.write(_frame(marshal.dumps((sha256(content), *_compile(path, content, self.keep)))))
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        return _Child(pid, os.fdopen(read, "rb"), path)

    def close(self) -> None:
        """Drop the child's result, if any, and reap it: the results are not wanted (a refusal)."""
        if self.child is not None:
            child, self.child = self.child, None
            child.reap()

    @property
    def pending(self) -> str | None:
        """The module the child is compiling, until :meth:`theirs` waits for it."""
        return self.child.path if self.child is not None else None

    def own(self) -> dict[str, Compiled]:
        """Compile here every module added but the child's: path -> (marshalled code, None) or
        (None, the compile error); a file that is not a Python module (or is removed) gives (None, None)."""
        theirs = self.pending
        for p, c in self.sources.items():
            if p not in self.done and p != theirs:
                self.done[p] = _compile(p, c, self.keep)
        return {p: r for p, r in self.done.items() if p != theirs}

    def theirs(self) -> dict[str, Compiled]:
        """Wait for the child: its module's result (compiled here when the child failed, or
        compiled other bytes than were added); empty without a child."""
        if self.child is None:
            return {}
        child, self.child = self.child, None
        sent = None
        with contextlib.suppress(ValueError, OSError):
            if child.content is None:
                _unframe(child.got)
            sent = _unframe(child.got)
        if child.reap() != 0:
            sent = None
        if child.path not in self.sources:
            return {}
        mine = self.sources[child.path]
        fits = isinstance(sent, tuple) and len(sent) == 3 and sent[0] == sha256(mine)
        self.done[child.path] = (sent[1], sent[2]) if fits else _compile(child.path, mine, self.keep)  # type: ignore[index]
        return {child.path: self.done[child.path]}

    def results(self) -> dict[str, Compiled]:
        """:meth:`own` and :meth:`theirs` together, in the order added."""
        self.own()
        self.done.update(self.theirs())
        self.own()  # the child's module, had it not been added when the child was waited for
        return {p: self.done[p] for p in self.sources}
