"""A distribution's ``RECORD`` (PEP 376 / the wheel spec): the one reader, and the writer that keeps
it true to what is installed after fixes change, create or remove files."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "read_record", "render_record", "row_for"]


@dataclass(frozen=True)
class Row:
    path: str  # relative to the folder that holds the dist-info, '/'-separated
    sha256: str | None  # hex, None when RECORD gives no hash (the RECORD file itself, .pyc files)
    size: str  # as written, '' when absent


def _hex(field: str) -> str | None:
    algo, _, digest = field.partition("=")
    if algo != "sha256" or not digest:
        return None
    try:
        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    except ValueError:
        return None


def read_record(dist_info: Path) -> list[Row]:
    """The rows of ``dist_info/RECORD`` (csv: quoted paths with commas are one field); [] if absent."""
    try:
        text = (dist_info / "RECORD").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    rows = []
    for fields in csv.reader(io.StringIO(text)):
        if fields:
            fields += [""] * (3 - len(fields))
            rows.append(Row(fields[0], _hex(fields[1]), fields[2]))
    return rows


def row_for(path: str, content: bytes) -> tuple[str, str, str]:
    """The RECORD fields pip writes for a file with ``content``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return (path, f"sha256={digest}", str(len(content)))


def render_record(rows: list[tuple[str, str, str]]) -> bytes:
    """RECORD text as pip writes it (csv, '\\n' line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")
