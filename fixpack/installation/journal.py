"""The journal of a transaction under way, on disk: its one reader and writer.

``journal/journal.json`` lists every file the transaction writes, by a root ("state", "site",
"dist:NAME") and a path relative to it, with its sha256 before and after and the name of its
backup in the journal folder. It is written whole (atomically) before anything it names changes;
reading it trusts nothing: its shape, each name and each backup's bytes are checked."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem
from ..runtime.index import read_regular
from .files import atomic_write, fsync_dir, remove
from .layout import JOURNAL_INDEX

__all__ = ["Entry", "FORMAT", "locate", "write", "read", "parse", "read_backup", "clear"]

FORMAT = 2  # 1 named files by absolute path
_HASH = re.compile(r"^[0-9a-f]{64}$")
_BACKUP = re.compile(r"^[0-9]+\.bak$")
INDEX_LIMIT = 16 << 20  # a journal of the whole pack is a few kB
BACKUP_LIMIT = 256 << 20  # the largest file a transaction could replace


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of a transaction, as the journal names it."""

    root: str
    path: str
    old: str | None  # sha256 before; None: the file did not exist
    new: str | None
    backup: str | None  # the backup's name in the journal folder; None when old is None

    def to_json(self) -> dict[str, str | None]:
        return {"root": self.root, "path": self.path, "old": self.old, "new": self.new, "backup": self.backup}


def locate(path: Path, roots: dict[str, Path]) -> tuple[str, str]:
    """The journal's name of ``path``: the innermost root holding it, and the path inside it."""
    best: tuple[str, str] | None = None
    depth = -1
    for name, root in roots.items():  # in order: the first of equally deep roots wins
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if len(root.parts) > depth:
            best, depth = (name, rel.as_posix()), len(root.parts)
    if best is None:
        raise EnvironmentProblem(f"refusing to write {path}: it is under none of {', '.join(map(str, roots.values()))}")
    return best


def write(journal: Path, entries: list[Entry]) -> None:
    """The index, whole, in place of any earlier one."""
    index = {"format": FORMAT, "entries": [e.to_json() for e in entries]}
    atomic_write(journal / JOURNAL_INDEX, json.dumps(index, indent=1).encode())


def clear(journal: Path) -> None:
    # journal.json goes first: without it the folder's remains mean nothing.
    remove(journal / JOURNAL_INDEX)
    for leftover in journal.iterdir():
        leftover.unlink()
    journal.rmdir()
    fsync_dir(journal.parent)


def read(journal: Path, roots: dict[str, Path]) -> list[Entry]:
    """The entries of the journal's index: OSError when it cannot be opened; ValueError when it is
    not a regular file of at most INDEX_LIMIT bytes (never blocking on a FIFO) or as ``parse``."""
    return parse(read_regular(str(journal / JOURNAL_INDEX), INDEX_LIMIT), roots)


def parse(raw: bytes, roots: dict[str, Path]) -> list[Entry]:
    """The journal's entries; ValueError, saying what is wrong, for anything but fixpack's shape."""
    try:
        data = json.loads(raw)
    except (RecursionError, MemoryError):
        raise ValueError("nested too deep or too large to read") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError("not a fixpack journal (no list of entries)")
    if data.get("format", 1) != FORMAT:  # format 1 (no "format" key) named files by absolute path
        raise ValueError(f"journal format {data.get('format', 1)!r}; this fixpack reads format {FORMAT}")
    entries = []
    for n, e in enumerate(data["entries"]):
        if not isinstance(e, dict) or set(e) != {"root", "path", "old", "new", "backup"}:
            raise ValueError(f"entry {n} is not {{root, path, old, new, backup}}")
        if e["root"] not in roots:
            known = ", ".join(sorted(roots))
            raise ValueError(f"entry {n} names root {e['root']!r}, which this environment does not have ({known})")
        if not isinstance(e["path"], str):
            raise ValueError(f"entry {n}: path is not text")
        for key in ("old", "new"):
            if e[key] is not None and not (isinstance(e[key], str) and _HASH.match(e[key])):
                raise ValueError(f"entry {n}: {key} is not a sha256 hex digest")
        if (e["backup"] is None) != (e["old"] is None):
            raise ValueError(f"entry {n}: a backup is named exactly when the file existed before")
        if e["backup"] is not None and not (isinstance(e["backup"], str) and _BACKUP.match(e["backup"])):
            raise ValueError(f"entry {n}: backup {e['backup']!r} is not a name in the journal folder")
        entries.append(Entry(e["root"], e["path"], e["old"], e["new"], e["backup"]))
    return entries


def read_backup(journal: Path, entry: Entry) -> bytes:
    """The backup's bytes, only from a regular file in the journal folder, and only if they are
    the bytes the journal says the file had."""
    assert entry.backup is not None
    path = journal / entry.backup
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"backup {path} is not a regular file")
        data = read_regular(str(path), BACKUP_LIMIT)
    except OSError as exc:
        raise ValueError(f"backup {path} cannot be read ({exc.strerror})") from None
    if sha256(data) != entry.old:
        raise ValueError(f"backup {path} is not the bytes the journal recorded (its sha256 is not {entry.old})")
    return data
