"""Bytecode: the ``.pyc`` of a module from the code object the compile check made, so that the
first import in every process loads it instead of compiling the source again. Pure."""

from __future__ import annotations

import importlib.util
from types import CodeType

__all__ = ["compile_module", "hash_based_pyc"]

_CHECKED_HASH = 0b11  # PEP 552: hash-based, checked against the source on import


def compile_module(path: str, content: bytes) -> CodeType:
    """Compile a module's source as an import would (raises SyntaxError or ValueError)."""
    return compile(content, path, "exec", dont_inherit=True)


def hash_based_pyc(code: bytes, source: bytes) -> bytes:
    """A checked hash-based ``.pyc`` (PEP 552) of the marshalled ``code``: valid wherever the
    source is copied, and never used once the source changes, since the import system checks the hash."""
    header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH.to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + code
