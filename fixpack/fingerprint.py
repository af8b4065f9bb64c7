"""Hashes of files, and the state each installed file is in with respect to a change."""

from __future__ import annotations

import enum
import functools
import hashlib


def sha256(content: bytes | None) -> str | None:
    return None if content is None else hashlib.sha256(content).hexdigest()


def of(content: bytes | None) -> str:
    """A change's fingerprint of a file: an absent file counts as the empty one."""
    return hashlib.sha256(content if content is not None else b"").hexdigest()


@functools.lru_cache(maxsize=512)
def patch_digest(patch: str) -> str:
    """sha256 of a change's patch text, recorded so that a changed cookbook is noticed."""
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()


class State(str, enum.Enum):
    PRISTINE = "pristine"  # the hash before the change: it can be applied
    APPLIED = "applied"  # the hash after it: nothing to do
    DRIFTED = "drifted"  # neither: refuse, and show how it differs
    MISSING = "missing"  # absent, and the change does not create it
