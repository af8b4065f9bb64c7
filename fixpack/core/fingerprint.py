"""Fingerprints: the sha256 of a file's bytes and of a change's patch text."""

from __future__ import annotations

import functools
import hashlib

__all__ = ["sha256", "of", "patch_digest"]


def sha256(content: bytes | None) -> str | None:
    """The hash of a file, None for an absent one."""
    return None if content is None else hashlib.sha256(content).hexdigest()


def of(content: bytes | None) -> str:
    """A change's fingerprint of a file: an absent file counts as the empty one."""
    return hashlib.sha256(content if content is not None else b"").hexdigest()


@functools.lru_cache(maxsize=512)
def patch_digest(patch: str) -> str:
    """sha256 of a change's patch text, recorded so that a changed cookbook is noticed."""
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()
