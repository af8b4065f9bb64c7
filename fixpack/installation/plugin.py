"""The runtime check's distribution, ``fixpack-runtime-check``: a vLLM general plugin that
``apply`` installs with the fixes (beside the other dist-info in place; inside the overlay folder
for an overlay), so that every vLLM process checks it runs the patched code and says so in one
line. Its files are written here as bytes; the code is ``fixpack/runtime/check.py`` (with
``agree.py``, the rank agreement, ``fixset.py``, when a digest may be reported, and ``rules.py``,
the recipes' rule evaluator), copied.

Its own dist-info (METADATA, entry_points.txt, INSTALLER, RECORD) makes it a distribution of its
own, found by ``importlib.metadata.entry_points(group="vllm.general_plugins")`` like any other;
its RECORD lists its files."""

from __future__ import annotations

import marshal
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.bytecode import compile_module, hash_based_pyc, pyc_path
from ..runtime import index as index_file
from .distributions import Distribution
from .manifest import Manifest
from .pip_record import render_record, row_for

__all__ = [
    "NAME", "PACKAGE", "DIST_INFO", "RUNTIME", "CODE", "IndexEntry", "module_name", "index", "read_entries", "files",
    "pyc", "in_place", "prune",
]  # fmt: skip

NAME = "fixpack-runtime-check"
PACKAGE = "fixpack_runtime_check"
VERSION = "1"
DIST_INFO = f"{PACKAGE}-{VERSION}.dist-info"
GROUP = "vllm.general_plugins"
RUNTIME = Path(__file__).resolve().parent.parent / "runtime"  # the code copied into the plugin and the overlay
INDEX = f"{PACKAGE}/{index_file.NAME}"
# The plugin's modules (path relative to the site -> file in fixpack/runtime): the check vLLM calls,
# the rank agreement the fix fix-set-agreement calls from vLLM's distributed set-up, the rule for
# when a digest may be reported, which both use, the evaluator of a recipe's rules on the
# environment, which the check runs, and the index's reader, which they and the overlay's hook use.
CODE = {
    f"{PACKAGE}/__init__.py": "check.py",
    f"{PACKAGE}/index.py": "index.py",
    f"{PACKAGE}/agree.py": "agree.py",
    f"{PACKAGE}/fixset.py": "fixset.py",
    f"{PACKAGE}/rules.py": "rules.py",
}


module_name = index_file.module_name  # ``vllm_gaudi/v1/worker/x.py`` -> ``vllm_gaudi.v1.worker.x``


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One patched file in the runtime index, as the runtime check and the overlay's hook read it."""

    path: str  # repository path
    dist: str  # its distribution's canonical name
    module: str | None  # dotted name, None when the file is not a module
    file: str | None  # the patched file (absolute; in an overlay, relative to it); None: a fix removed it
    sha256: str | None  # its hash after the fixes
    original: str | None = None  # the installed file an overlay shadows, or one a fix removed in place
    pristine: str | None = None  # the hash of the installed file an overlay was built over


def index(mode: str, manifest: Manifest, entries: list[IndexEntry], packages: Iterable[str]) -> bytes:
    """The index the runtime check (and an overlay's import hook) reads; see fixpack/runtime. It
    carries the fix-set identity of what ``manifest`` applies (digest and fixes), which the check
    logs, and the import ``packages`` of the pinned distributions, the only ones it may patch."""
    fix_set = manifest.fix_set
    data: dict[str, Any] = {"mode": mode, "profile": manifest.profile, "release": manifest.release}
    data["fixes"] = list(manifest.fixes)
    data["packages"] = sorted(set(packages))
    data["fix_set"] = fix_set.to_json() if fix_set is not None else None
    data["files"] = [asdict(e) for e in sorted(entries, key=lambda e: e.path)]
    if manifest.recipe is not None:
        data["recipe"], data["rules"] = manifest.recipe, list(manifest.rules)
    return index_file.dumps(data)


def read_entries(raw: bytes | None) -> dict[str, IndexEntry]:
    """An index's entries by repository path; {} when there is none or it cannot be read (the
    callers then find every file unaccounted for)."""
    if raw is None:
        return {}
    try:
        return {e["path"]: IndexEntry(**e) for e in index_file.loads(raw).get("files", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def pyc(source_path: str, content: bytes) -> tuple[str, bytes] | None:
    """The hash-based .pyc of a module (path relative to its root) where this Python writes one."""
    path = pyc_path(source_path)
    if path is None:
        return None
    return path, hash_based_pyc(marshal.dumps(compile_module(source_path, content)), content)


def files(index_bytes: bytes) -> dict[str, bytes]:
    """The plugin's files, by path relative to the folder on sys.path that holds it."""
    out = {INDEX: index_bytes}
    for rel, source in CODE.items():
        code = (RUNTIME / source).read_bytes()
        out[rel] = code
        compiled = pyc(rel, code)
        if compiled is not None:
            out[compiled[0]] = compiled[1]
    out[f"{DIST_INFO}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
        "Summary: fixpack's runtime check: every vLLM process checks that it runs the code fixpack applied\n"
    ).encode()
    out[f"{DIST_INFO}/entry_points.txt"] = f"[{GROUP}]\n{PACKAGE} = {PACKAGE}:check\n".encode()
    out[f"{DIST_INFO}/INSTALLER"] = b"fixpack\n"
    rows = [row_for(rel, content) for rel, content in sorted(out.items())]
    out[f"{DIST_INFO}/RECORD"] = render_record([*rows, (f"{DIST_INFO}/RECORD", "", "")], newline="\n")
    return out


def in_place(site: Path, manifest: Manifest, dists: list[Distribution]) -> dict[Path, bytes | None]:
    """The runtime check's files in ``site`` for what ``manifest`` applies in place: path -> bytes,
    None for a file of an earlier one to remove (all of them when nothing is applied)."""
    wanted: dict[Path, bytes | None] = {}
    if not manifest.empty:
        by_name = {d.name: d for d in dists}
        entries = []
        for path, record in manifest.files.items():
            target = str(by_name[record.dist].file(path))
            removed = record.applied is None
            entries.append(
                IndexEntry(
                    path,
                    record.dist,
                    module_name(path),
                    None if removed else target,
                    record.applied,
                    target if removed else None,
                )
            )
        content = index("in-place", manifest, entries, (d.package for d in dists))
        wanted = {site / rel: data for rel, data in files(content).items()}
    for folder in (site / PACKAGE, site / DIST_INFO):
        if folder.is_dir() and not folder.is_symlink():
            for p in folder.rglob("*"):
                if p.is_file() and p not in wanted:
                    wanted[p] = None
    return wanted


def prune(site: Path) -> None:
    """Remove the runtime check's folders once empty (after a revert, or a rolled back apply)."""
    for folder in (site / PACKAGE / "__pycache__", site / PACKAGE, site / DIST_INFO):
        try:
            folder.rmdir()
        except OSError:
            pass
