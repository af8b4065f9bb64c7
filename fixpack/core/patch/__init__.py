"""The unified-diff engine: parse, apply, render. Pure: no file system."""

from ._legacy import ENC, ERRORS, FileDiff, FileEntry, Hunk, HunkFailed, apply, apply_chain, index, render, split_files

__all__ = [
    "ENC",
    "ERRORS",
    "FileDiff",
    "FileEntry",
    "Hunk",
    "HunkFailed",
    "apply",
    "apply_chain",
    "index",
    "render",
    "split_files",
]
