"""A git-exact unified-diff engine: parse (unidiff reads the patch, parse.py adapts it), apply (and
reverse) and render, these two with the standard library only."""

from __future__ import annotations

from .apply import HunkFailed, apply, apply_chain
from .model import ENC, ERRORS, FileDiff, FileEntry, Hunk, PatchError, UnsupportedPatch, split_lines
from .parse import index, parse, split_files
from .render import as_git_diff, blob_id, render

__all__ = [
    "ENC",
    "ERRORS",
    "FileDiff",
    "FileEntry",
    "Hunk",
    "HunkFailed",
    "PatchError",
    "UnsupportedPatch",
    "apply",
    "apply_chain",
    "as_git_diff",
    "blob_id",
    "index",
    "parse",
    "render",
    "split_files",
    "split_lines",
]
