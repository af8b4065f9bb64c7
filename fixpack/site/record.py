"""A distribution's ``RECORD`` (PEP 376 / the wheel spec): the writer that keeps it true to what is
installed after fixes change, create or remove files, and the policy of which rows an in-place
apply writes (:func:`records_after`). importlib.metadata reads it (``Distribution.files``); the
hash it gives is turned into hex here."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..core.fingerprint import sha256
from .layout import MANIFEST
from .manifest import Manifest
from .state import pristine_copy, read_file
from .transaction import Write

__all__ = ["sha256_hex", "render_record", "row_for", "rewrite_record", "records_after"]


class Distribution(Protocol):
    """What the RECORD policy reads of an installed distribution (``fixpack.site.distributions``
    reads RECORD with this module, so it cannot be imported here)."""

    @property
    def name(self) -> str: ...
    @property
    def dist_info(self) -> Path: ...
    @property
    def site(self) -> Path: ...
    @property
    def editable(self) -> bool: ...


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


def records_after(
    dists: Sequence[Distribution],
    state_dir: Path,
    new: Manifest,
    old: Manifest,
    content: Mapping[str, bytes | None],
    kept: Mapping[str, bytes],
    runtime: Mapping[str, bytes],
) -> tuple[list[Write], dict[str, str]]:
    """Each installed (not editable) distribution's RECORD as pip must find it once ``new`` is
    applied: the hashes of the files fixes changed (``content``: repository path -> bytes after),
    the files they created, and, in the RECORD of the distribution whose site holds the state
    directory, fixpack's state (the pristine copies ``kept``, the manifest, the runtime check's
    files ``runtime`` by site-relative path), so that ``pip uninstall`` leaves nothing of fixpack
    behind. The pip-written RECORD is kept beside the pristine copies and written back, byte for
    byte, when the last fix goes. Returns the writes and each RECORD's hash for the manifest."""
    bases: dict[str, tuple[Distribution, bytes | None, bytes]] = {}
    for d in sorted({d.name: d for d in dists if not d.editable}.values(), key=lambda d: d.name):
        current = read_file(d.dist_info / "RECORD")
        stored = read_file(pristine_copy(state_dir, _kept_as(d)))
        as_left = stored is not None and sha256(current) == old.records.get(d.dist_info.name)
        base = stored if as_left else current  # pip wrote the RECORD that is there now: it is the base
        if base is not None:
            bases[d.dist_info.name] = (d, current, base)
    owner = next((n for n, (d, _, _) in bases.items() if d.site == state_dir.parent), None)
    state_rows = {_state_row(state_dir, p): c for p, c in kept.items()}
    state_rows.update({_state_row(state_dir, _kept_as(d)): base for d, _, base in bases.values()})
    state_rows.update(runtime)  # the runtime check goes with the state when pip uninstalls
    writes, records = [], {}
    for name, (d, current, base) in bases.items():
        if new.empty:
            record, keep = base, None
        else:
            changed = {p: content[p] for p, r in new.files.items() if r.dist == d.name}
            extra = state_rows if name == owner else {}
            unhashed = [_state_row(state_dir, MANIFEST)] if name == owner else []
            record, keep = rewrite_record(base, {**changed, **extra}, unhashed), base
            records[name] = sha256(record) or ""
        if record != current:
            writes.append(Write(d.dist_info / "RECORD", record))
        if keep != read_file(pristine_copy(state_dir, _kept_as(d))):
            writes.append(Write(pristine_copy(state_dir, _kept_as(d)), keep, same_as=d.dist_info / "RECORD"))
    return writes, records


def _kept_as(d: Distribution) -> str:
    """Where a distribution's pip-written RECORD is kept among the pristine copies."""
    return f"{d.dist_info.name}/RECORD"


def _state_row(state_dir: Path, path: str) -> str:
    """A state file's path as RECORD lists it: relative to the site that holds the state directory."""
    full = pristine_copy(state_dir, path) if path != MANIFEST else state_dir / MANIFEST
    return full.relative_to(state_dir.parent).as_posix()
