"""The compile check of several modules at once: the largest in a forked child while this process
compiles the rest, so that on two cores the check takes about as long as its largest module
(hpu_model_runner.py: 70 of the 105 ms for the v0.26.0 pack). Bytes in, marshalled code out.

The child only compiles and writes its results to a pipe; it never touches a file. Without
``os.fork``, on one core, or when the child fails in any way, everything is compiled here.
"""

from __future__ import annotations

import marshal
import os

from .rebuild import compiled

__all__ = ["Compiled", "compile_all"]

Compiled = tuple[bytes | None, str | None]  # marshalled code object (when kept), or why it does not compile

_WORTH_A_CHILD = 64 * 1024  # bytes of source: about 20 ms to compile, several times a fork's cost


def _compile(path: str, content: bytes | None, keep: bool) -> Compiled:
    code, problem = compiled(path, content)
    return (marshal.dumps(code) if keep and code is not None else None), problem


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _split(sources: dict[str, bytes | None]) -> tuple[list[str], list[str]]:
    """The child's share (largest first, up to half the bytes) and this process's."""
    size = {p: len(c or b"") for p, c in sources.items()}
    child: list[str] = []
    half = sum(size.values()) / 2
    for path in sorted(size, key=size.__getitem__, reverse=True):
        if size[path] < _WORTH_A_CHILD or sum(size[p] for p in child) + size[path] > max(half, size[path]):
            break
        child.append(path)
    return child, [p for p in sources if p not in child]


def compile_all(sources: dict[str, bytes | None], keep: bool = True) -> dict[str, Compiled]:
    """path -> (marshalled code, None) or (None, the compile error), in the order given; a file
    that is not a Python module (or is removed) gives (None, None). ``keep=False``: check only."""
    child, here = _split(sources) if hasattr(os, "fork") and _cores() > 1 else ([], list(sources))
    results: dict[str, Compiled] = {}
    if child:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compile its share, send it, and leave without any clean-up
            status = 1
            try:
                os.close(read)
                data = marshal.dumps([(p, *_compile(p, sources[p], keep)) for p in child])
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        results.update((p, _compile(p, sources[p], keep)) for p in here)
        with os.fdopen(read, "rb") as got:
            data = got.read()
        _, status = os.waitpid(pid, 0)
        try:
            sent = marshal.loads(data) if os.waitstatus_to_exitcode(status) == 0 else []
        except (EOFError, ValueError, TypeError):
            sent = []
        results.update((p, (code, problem)) for p, code, problem in sent)
    for path in sources:  # this process's share, and anything the child did not send
        if path not in results:
            results[path] = _compile(path, sources[path], keep)
    return {p: results[p] for p in sources}
