"""Bytecode: the ``.pyc`` of a module from the code object the compile check made, so that the
first import in every process loads it instead of compiling the source again. Pure."""

from __future__ import annotations

import importlib.util
import sys
from types import CodeType

__all__ = ["compile_module", "hash_based_pyc", "pyc_path", "writes_bytecode"]

_CHECKED_HASH = 0b11  # PEP 552: hash-based, checked against the source on import


def compile_module(path: str, content: bytes) -> CodeType:
    """Compile a module's source as an import would (raises SyntaxError or ValueError)."""
    return compile(content, path, "exec", dont_inherit=True)


def hash_based_pyc(code: bytes, source: bytes) -> bytes:
    """A checked hash-based ``.pyc`` (PEP 552) of the marshalled ``code``: valid wherever the
    source is copied, and never used once the source changes, since the import system checks the hash."""
    header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH.to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + code


def pyc_path(source_path: str) -> str | None:
    """Where the import system looks for a module's bytecode (``source_path`` relative or
    absolute, the answer alike); None when this Python writes none beside its sources
    (PYTHONDONTWRITEBYTECODE, or a pycache prefix that puts it elsewhere)."""
    if not writes_bytecode() or not source_path.endswith(".py"):
        return None
    return importlib.util.cache_from_source(source_path)


def writes_bytecode() -> bool:
    """This Python writes bytecode beside the sources it imports."""
    return not (sys.dont_write_bytecode or sys.pycache_prefix)
