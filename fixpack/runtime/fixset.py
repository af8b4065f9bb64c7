"""When a fix-set digest may be reported: the one rule, for ``fixpack status``, the runtime check's
line and the rank agreement alike.

A digest names the code a site runs only while that code is there. So it is reported only for a
site (or overlay) whose patched files all hold, as read now, the hashes recorded when they were
patched: a file a fix created or changed has its after-hash, a file a fix removed is absent, and,
in an overlay, each installed file it shadows still has the hash the overlay was built from (else
the overlay's import hook runs the installed file, or nothing). Otherwise there is no digest, and
the reason names the files: ``none (2 files drifted: vllm_gaudi/a.py, vllm_gaudi/b.py)``.

Standard library only: copied into the runtime check's package with ``check.py`` and ``agree.py``.
The hashes the runtime check reads are kept for the rest of the process (:func:`remember`), so the
agreement, later in the same process, hashes nothing again.
"""

from __future__ import annotations

import hashlib
import json
import os

from . import index as index_file

# Copied into every vLLM process, run after torch loaded ``__future__``: the names
# below are for mypy only, never imported there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable
    from typing import Any, TypeVar

    Digest = TypeVar("Digest")  # a str in the runtime, fixpack's FixSet in ``fixpack status``

__all__ = [
    "drifted",
    "reason",
    "vouched",
    "sha256_of",
    "canonical",
    "digest",
    "digest_of",
    "index_rows",
    "remember",
    "remembered",
]

TAG, VERSION, DIGEST_LENGTH = "fixpack-fix-set", 1, 16
READ_LIMIT = 64 << 20  # a patched module is a few MB at most
# this process's (digest or None, drifted paths), as the runtime check read them
_held: list[tuple[str | None, list[str]]] = []


def drifted(rows: Iterable[tuple[str, str | None, str | None]]) -> list[str]:
    """The paths, sorted and each once, of the rows whose file does not hold its recorded hash.

    ``rows``: (path, recorded sha256 or None, sha256 read now or None); None recorded is a file a
    fix removed, None read is an absent file."""
    return sorted({path for path, recorded, now in rows if recorded != now})


def vouched(digest: Digest, drifted_paths: Collection[str]) -> Digest | None:
    """``digest`` where nothing drifted, else None."""
    return None if drifted_paths else digest


def reason(drifted_paths: Collection[str]) -> str:
    """Why there is no digest, in one phrase: ``2 files drifted: a.py, b.py``."""
    n = len(drifted_paths)
    return f"{n} file{'' if n == 1 else 's'} drifted: {', '.join(drifted_paths)}"


def sha256_of(path: str) -> str | None:
    """The sha256 of a regular file's bytes, or None when it is absent or not a regular file (a
    FIFO or a device is never read: it could block or never end)."""
    try:
        return hashlib.sha256(index_file.read_regular(path, READ_LIMIT)).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
        return None


def canonical(release: str, fixes: Iterable[str], files: Iterable[Iterable[str | None]]) -> bytes:
    """A fix set's canonical form (fixpack.core.identity says what goes in): the release, the
    fixes in applied order and the (dist, path, sha256 or None) rows, sorted here."""
    rows = sorted(list(f) for f in files)
    value = [TAG, VERSION, release, list(fixes), rows]
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def digest(release: str, fixes: Iterable[str], files: Iterable[Iterable[str | None]]) -> str:
    """The fix-set digest: the first DIGEST_LENGTH hex digits of the canonical form's sha256."""
    return hashlib.sha256(canonical(release, fixes, files)).hexdigest()[:DIGEST_LENGTH]


def digest_of(index: dict[str, Any]) -> str:
    """The fix-set digest of what a runtime index lists: recomputed from its release, fixes and
    each file's distribution, path and hash, never taken from the index's own record."""
    return digest(index["release"], index["fixes"], ([e["dist"], e["path"], e.get("sha256")] for e in index["files"]))


def index_rows(
    index: dict[str, Any], root: str, hashes: dict[str, str | None]
) -> list[tuple[str, str | None, str | None]]:
    """The rule's rows for a runtime index (``fixpack_runtime_check/index.json``), keyed by the
    repository path; ``hashes``: absolute path -> sha256 now, filled as files are read.

    In place, a file's row is the patched file (or, for a removed one, the original's path, which
    must stay absent); in an overlay, the overlay's copy and the installed file it shadows."""
    overlay = index.get("mode") == "overlay"

    def now(path: str) -> str | None:
        if path not in hashes:
            hashes[path] = sha256_of(path)
        return hashes[path]

    rows = []
    for entry in index.get("files", []):
        path, file, original = entry.get("path"), entry.get("file"), entry.get("original")
        if file is not None:
            rows.append((path, entry.get("sha256"), now(os.path.join(root, file) if overlay else file)))
        elif not overlay and original:
            rows.append((path, None, now(original)))
        if overlay and original:
            rows.append((path, entry.get("pristine"), now(original)))
    return rows


def remember(digest: str | None, drifted_paths: Iterable[str]) -> None:
    """Keep what the runtime check found for the rest of this process."""
    _held[:] = [(digest, list(drifted_paths))]


def remembered(index: dict[str, Any], root: str) -> tuple[str | None, list[str]]:
    """(digest or None, drifted paths) of this process: the runtime check's, or read now when it
    did not run here (a process that does not load vLLM's plugins)."""
    if _held:
        return _held[0]
    found = drifted(index_rows(index, root, {}))
    return vouched(digest_of(index), found), found
