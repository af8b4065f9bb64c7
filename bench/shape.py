"""The shape of a profile's pack, read from a cookbook: which files each fix touches, how (hunks,
lines added and removed, created or not), and how large those files are in the release.

Sizes, best first: the files themselves in the real trees (``FIXPACK_SRC_*``); else a lower bound
from the patches alone. The ``@@ -start,len`` headers of a file's first change are positions in
the pristine file; a later change's positions are in the file after the changes before it, so
subtracting every line those added still bounds the pristine length from below. Lines become bytes
at the mean length of the pristine lines the patches show (context and removed lines).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fixpack.models import Pin

__all__ = ["Edit", "FixShape", "Shape", "derive", "tree_size"]


@dataclass(frozen=True)
class Edit:
    """One change of one fix to one file."""

    path: str
    hunks: int
    added: int
    removed: int
    creates: bool = False


@dataclass(frozen=True)
class FixShape:
    id: str
    opt_in: bool
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class Shape:
    """A pack's shape and what a synthetic stand-in needs to be installed like the release."""

    profile: str
    release: str
    pins: tuple[Pin, ...]
    fixes: tuple[FixShape, ...]
    sizes: dict[str, int]  # bytes of each file the pack edits and the release has
    sized_from: str  # how ``sizes`` were found, for the report

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(e.path for f in self.fixes for e in f.edits))

    def dist_of(self, path: str) -> str:
        pin = next((p for p in self.pins if path.startswith(p.package + "/")), None)
        if pin is None:
            raise ValueError(f"{path}: no pin's package holds it")
        return pin.dist


def derive(cookbook: Path, profile_name: str, trees: dict[str, Path] | None) -> Shape:
    """``profile_name``'s pack in ``cookbook``, sized from ``trees`` when given."""
    from fixpack.cookbook.catalog import Catalog
    from fixpack.core.rebuild import line_counts, parsed

    catalog = Catalog.load(cookbook)
    profile = catalog.profile(profile_name)
    fixes: list[FixShape] = []
    lower: dict[str, int] = {}  # path -> pristine lines, at least
    seen: dict[str, tuple[int, int]] = {}  # path -> (bytes, lines) of the pristine lines the patches show
    added_before: dict[str, int] = {}  # path -> lines added by the pack's earlier changes to it
    for fid in profile.pack:
        fix = catalog.fixes[fid]
        edits = []
        for change in fix.changes[profile.release]:
            diff = parsed(change)
            added, removed = line_counts(change)
            edits.append(Edit(change.path, len(diff.hunks), added, removed, change.creates))
            if change.creates:
                continue
            for hunk in diff.hunks:
                end = hunk.old_start + len(hunk.old) - 1
                lower[change.path] = max(lower.get(change.path, 0), end - added_before.get(change.path, 0))
                nbytes, nlines = seen.get(change.path, (0, 0))
                seen[change.path] = (nbytes + sum(map(len, hunk.old)), nlines + len(hunk.old))
            added_before[change.path] = added_before.get(change.path, 0) + added
        fixes.append(FixShape(fid, fix.opt_in, tuple(edits)))
    if trees:
        sizes, how = _sizes_on_disk(profile.pins, trees, list(lower)), "the target files in the trees"
    else:
        sizes = {path: lines * round(seen[path][0] / max(seen[path][1], 1)) for path, lines in lower.items()}
        how = "a lower bound from the patches' @@ headers (no trees given)"
    return Shape(profile.name, profile.release, profile.pins, tuple(fixes), sizes, how)


def _sizes_on_disk(pins: tuple[Pin, ...], trees: dict[str, Path], paths: list[str]) -> dict[str, int]:
    sizes = {}
    for path in paths:
        pin = next(p for p in pins if path.startswith(p.package + "/"))
        target = trees[pin.dist] / path
        if target.is_file():
            sizes[path] = target.stat().st_size
    return sizes


# Measured on the v0.26.0 trees (python files, their bytes, folders under the package): the size of
# the rest of each tree cannot be read from the cookbook, so without the trees these stand in.
TREE_SIZE = {"vllm-gaudi": (127, 1_749_705, 30), "vllm": (2234, 33_153_954, 279)}


def tree_size(dist: str, package: str, trees: dict[str, Path] | None) -> tuple[int, int, int]:
    """(python files, their bytes, folders) of ``dist``'s package: measured when its tree is given."""
    if not trees or dist not in trees:
        return TREE_SIZE[dist]
    root = trees[dist] / package
    files = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    folders = {p.parent for p in files}
    return len(files), sum(p.stat().st_size for p in files), len(folders)
