"""A distribution's ``RECORD`` (PEP 376 / the wheel spec), the format alone: its rows as pip writes
them, and a RECORD rewritten to stay true to what is installed after fixes change, create or
remove files. importlib.metadata reads it (``Distribution.files``); the hash it gives is turned
into hex here. Which rows an in-place apply writes is the in-place destination's policy
(``inplace.records_after``)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io

__all__ = ["sha256_hex", "render_record", "row_for", "rewrite_record"]


def sha256_hex(mode: str, value: str) -> str | None:
    """The hex digest of a RECORD hash (``sha256=<urlsafe base64, unpadded>``); None for another
    algorithm or a digest that is not base64."""
    if mode != "sha256" or not value:
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    except ValueError:
        return None


def row_for(path: str, content: bytes) -> tuple[str, str, str]:
    """The RECORD fields pip writes for a file with ``content``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return (path, f"sha256={digest}", str(len(content)))


def render_record(rows: list[tuple[str, str, str]], newline: str = "\r\n") -> bytes:
    """RECORD text as pip writes it (csv; pip's csv.writer ends lines with CRLF)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=newline)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def rewrite_record(pristine: bytes, files: dict[str, bytes | None], unhashed: list[str]) -> bytes:
    """RECORD as it must be once ``files`` (path -> new bytes, None: removed) are written, with
    ``unhashed`` paths listed too (a file whose hash cannot be known when RECORD is written): the
    rows of ``pristine`` in their order, then the new files. Pip uninstalls what RECORD lists.

    Rows no file changes keep their bytes: only the few a plan touches are parsed and rewritten
    (a RECORD has thousands of rows, and this runs on every cold start)."""
    text = pristine.decode("utf-8", "surrogateescape")  # every byte of a row kept as it was
    newline = "\r\n" if "\r\n" in text or not text else "\n"
    spans = sorted((start, end, path) for path in files for start, end in _rows_of(text, path))
    out: list[str] = []
    at = 0
    for start, end, path in spans:
        out.append(text[at:start])
        content = files[path]
        if content is not None:
            out.append(render_record([row_for(path, content)], newline).decode("utf-8"))
        at = end
    out.append(text[at:])
    kept = "".join(out)
    if kept and not kept.endswith("\n"):
        kept += newline
    seen = {path for _, _, path in spans}
    added = [row_for(path, content) for path, content in files.items() if path not in seen and content is not None]
    added += [(path, "", "") for path in unhashed if path not in seen]
    return kept.encode("utf-8", "surrogateescape") + render_record(added, newline)


def _rows_of(text: str, path: str) -> list[tuple[int, int]]:
    """Where each row of ``path`` is in RECORD's text (start, end, its newline included): a line
    whose first field is ``path``, plain or quoted as csv quotes it."""
    spans = []
    for head in {path + ",", '"' + path.replace('"', '""') + '",'}:
        start = text.find(head)
        while start != -1:
            if start == 0 or text[start - 1] == "\n":
                end = text.find("\n", start)
                spans.append((start, len(text) if end == -1 else end + 1))
            start = text.find(head, start + 1)
    return spans
