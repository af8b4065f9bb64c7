"""``fixes/<id>/<release>.lock.json``: a fix's fingerprints on one release, read and written here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..models import Fingerprint
from .tomlfile import invalid

__all__ = ["lock_path", "read_lock", "write_lock"]

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def lock_path(fix_dir: Path, release: str) -> Path:
    return fix_dir / f"{release}.lock.json"


def read_lock(path: Path) -> dict[str, Fingerprint]:
    if not path.exists():
        return {}
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        prints = {p: Fingerprint(v["pristine"], v["before"], v["after"]) for p, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise invalid(path, f"unreadable fingerprints ({exc})") from None
    for p, fp in prints.items():
        if not all(SHA256.match(h) for h in (fp.pristine, fp.before, fp.after)):
            raise invalid(path, f"{p}: fingerprints must be sha256 hex digests")
    return prints


def write_lock(fix_dir: Path, release: str, files: dict[str, Fingerprint]) -> Path | None:
    """Write the fingerprints of one fix's files; the path when the file changed, else None."""
    target = lock_path(fix_dir, release)
    data = {
        "release": release,
        "files": {p: {"pristine": fp.pristine, "before": fp.before, "after": fp.after} for p, fp in files.items()},
    }
    text = json.dumps(data, indent=2) + "\n"
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return None
    target.write_text(text, encoding="utf-8")
    return target
