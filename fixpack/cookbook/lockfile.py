"""``fixes/<id>/<release>.lock.json``: a fix's fingerprints on one release, read and written here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..models import Fingerprint
from ..runtime.index import read_regular
from .tomlfile import invalid

__all__ = ["lock_path", "read_lock", "lock_text"]

LOCK_LIMIT = 4 << 20  # a lock is a few hundred bytes per file

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def lock_path(fix_dir: Path, release: str) -> Path:
    return fix_dir / f"{release}.lock.json"


def read_lock(path: Path) -> dict[str, Fingerprint]:
    if not path.exists():
        return {}
    try:
        files = json.loads(read_regular(str(path), LOCK_LIMIT))["files"]
        prints = {p: Fingerprint(v["pristine"], v["before"], v["after"]) for p, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise invalid(path, f"unreadable fingerprints ({exc})") from None
    except (RecursionError, MemoryError):
        raise invalid(path, "unreadable fingerprints (nested too deep or too large)") from None
    for p, fp in prints.items():
        if not all(SHA256.match(h) for h in (fp.pristine, fp.before, fp.after)):
            raise invalid(path, f"{p}: fingerprints must be sha256 hex digests")
    return prints


def lock_text(release: str, files: dict[str, Fingerprint]) -> str:
    """The text of one fix's ``<release>.lock.json``."""
    data = {
        "release": release,
        "files": {p: {"pristine": fp.pristine, "before": fp.before, "after": fp.after} for p, fp in files.items()},
    }
    return json.dumps(data, indent=2) + "\n"
