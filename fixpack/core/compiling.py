"""The compile check of several modules, the largest in a forked child that starts before any
file is built: the child makes that module's content itself (the same pure function of what the
parent holds) and compiles it, while the parent builds every file and compiles the rest. On two
cores the check then ends about when the largest module would be compiled on its own
(hpu_model_runner.py: 70 of the 105 ms for the v0.26.0 pack), and the caller's own work between
``ahead`` and ``results`` is hidden behind it. Bytes in, marshalled code out.

The child only builds, compiles and writes its result to a pipe; it never touches a file. Its
code is used only for the very bytes the parent built (their sha256 is sent with it). Without
``os.fork``, on one core, or when the child fails in any way, everything is compiled here.
"""

from __future__ import annotations

import contextlib
import marshal
import os
from collections.abc import Callable

from .fingerprint import sha256
from .rebuild import compiled

__all__ = ["Compiled", "Compiler", "WORTH_A_CHILD"]

Compiled = tuple[bytes | None, str | None]  # marshalled code object (when kept), or why it does not compile

WORTH_A_CHILD = 64 * 1024  # bytes of source: about 20 ms to compile, several times a fork's cost


def _compile(path: str, content: bytes | None, keep: bool) -> Compiled:
    code, problem = compiled(path, content)
    return (marshal.dumps(code) if keep and code is not None else None), problem


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Compiler:
    """``ahead`` the largest module, ``add`` each module as it is built; then ``results``, or
    ``own`` and later ``theirs`` (the caller works between the two while the child compiles)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep  # False: check only (no bytecode will be written)
        self.sources: dict[str, bytes | None] = {}
        self.done: dict[str, Compiled] = {}
        self.child: tuple[int, int, str] | None = None  # pid, the pipe's read end, the module it compiles

    def ahead(self, path: str, make: Callable[[], bytes | None]) -> None:
        """Compile ``path`` in a child, which makes its content with ``make``; the content must
        still be given to ``add``. Nothing is started without fork or a second core."""
        if self.child is None and hasattr(os, "fork") and _cores() > 1:
            self.child = self._fork(path, make)

    def add(self, path: str, content: bytes | None) -> None:
        self.sources[path] = content

    def _fork(self, path: str, make: Callable[[], bytes | None]) -> tuple[int, int, str]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: build, compile, send, and leave without any clean-up
            status = 1
            try:
                os.close(read)
                content = make()
                data = marshal.dumps((sha256(content), *_compile(path, content, self.keep)))
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        return pid, read, path

    def close(self) -> None:
        """Drop the child's result, if any, and reap it: the results are not wanted (a refusal)."""
        if self.child is not None:
            pid, read, _ = self.child
            self.child = None
            os.close(read)
            os.waitpid(pid, 0)

    @property
    def pending(self) -> str | None:
        """The module the child is compiling, until :meth:`theirs` waits for it."""
        return self.child[2] if self.child is not None else None

    def own(self) -> dict[str, Compiled]:
        """Compile here every module added but the child's: path -> (marshalled code, None) or
        (None, the compile error); a file that is not a Python module (or is removed) gives (None, None)."""
        theirs = self.pending
        for p, c in self.sources.items():
            if p not in self.done and p != theirs:
                self.done[p] = _compile(p, c, self.keep)
        return {p: r for p, r in self.done.items() if p != theirs}

    def theirs(self) -> dict[str, Compiled]:
        """Wait for the child: its module's result (compiled here when the child failed, or made
        other bytes than were added); empty without a child."""
        if self.child is None:
            return {}
        pid, read, path = self.child
        self.child = None
        with os.fdopen(read, "rb") as got:
            data = got.read()
        _, status = os.waitpid(pid, 0)
        sent = None
        if os.waitstatus_to_exitcode(status) == 0:
            with contextlib.suppress(EOFError, ValueError, TypeError):
                sent = marshal.loads(data)
        if path not in self.sources:
            return {}
        mine = self.sources[path]
        fits = isinstance(sent, tuple) and len(sent) == 3 and sent[0] == sha256(mine)
        self.done[path] = (sent[1], sent[2]) if fits else _compile(path, mine, self.keep)  # type: ignore[index]
        return {path: self.done[path]}

    def results(self) -> dict[str, Compiled]:
        """:meth:`own` and :meth:`theirs` together, in the order added."""
        self.own()
        self.done.update(self.theirs())
        self.own()  # the child's module, had it not been added when the child was waited for
        return {p: self.done[p] for p in self.sources}
