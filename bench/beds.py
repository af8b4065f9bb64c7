"""Test beds: a scratch site laid out as pip installs it, a cookbook, and a way back to pristine.

Two kinds: real (the upstream trees and a copy of this repository's cookbook, with the fixes that
no longer load or apply left out) and synthetic (trees and fixes of the same size and shape as a
profile's pack, see shape.py). Sites and cookbooks are written with the tests' builders.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.util
import json
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .engine import PROFILE, Tools
from .measure import log, must, run
from .shape import Shape, tree_size

if TYPE_CHECKING:
    from fixpack.core.patch import FileDiff
    from fixpack.models import Pin

__all__ = [
    "Bed",
    "write_site",
    "compile_targets",
    "synth_trees",
    "synth_cookbook",
    "real_cookbook",
    "plan",
    "fix_patches",
]


def write_site(work: Path, trees: dict[str, Path], pins: tuple[Pin, ...], builders: ModuleType) -> Path:
    """``work/site``, as ``pip install --no-deps --target`` leaves it, from repository-layout trees.

    Each ``_version.py`` names the first commit its pin accepts, as a build of that commit writes it.
    """
    files: dict[str, dict[str, str | bytes]] = {}
    for pin in pins:
        root = trees[pin.dist]
        found = (p for p in sorted((root / pin.package).rglob("*")) if p.is_file() and "__pycache__" not in p.parts)
        files[pin.dist] = {p.relative_to(root).as_posix(): p.read_bytes() for p in found}
        files[pin.dist].pop(f"{pin.package}/_version.py", None)  # written by make_site, naming the pin's commit
    commits = {pin.dist: pin.commits[0] for pin in pins}
    versions = {pin.dist: pin.version for pin in pins}
    return builders.make_site(work, files, commits, versions).path


def compile_targets(site: Path, targets: list[str]) -> None:
    """Bytecode for the targets' folders, as pip compiles what it installs (the rest is compiled by
    the first import that needs it)."""
    for folder in sorted({(site / t).parent for t in targets if (site / t).parent.is_dir()}):
        compileall.compile_dir(folder, maxlevels=0, quiet=2)


# --------------------------------------------------------------------------------------------
# Synthetic trees and fixes


def synth_module(tag: str, size: int) -> str:
    """Python source of about ``size`` bytes: small functions, so that any hunk lands between two."""
    lines = [f'"""Synthetic module {tag}."""\n', "\n", "\n"]
    total, i = sum(map(len, lines)), 0
    while total < size:
        block = [
            f"def f_{tag}_{i}(x, y=None):\n",
            f"    value = compute(x, {i}, key='{tag}-{i}', scale=y or {i % 7 + 1})\n",
            "    return value\n",
            "\n",
            "\n",
        ]
        lines += block
        total += sum(map(len, block))
        i += 1
    return "".join(lines)


def _filler(tree: Path, package: str, count: int, size: int, dirs: int) -> None:
    """``count`` python files of ``size`` bytes in total, spread over ``dirs`` folders."""
    body = synth_module("filler", max(1, size // max(count, 1)))
    for d in range(dirs):
        init = tree / f"{package}/_synthetic/d{d:03d}/__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.touch()
    for i in range(count):
        (tree / f"{package}/_synthetic/d{i % dirs:03d}/m{i:05d}.py").write_text(body)


def synth_trees(root: Path, shape: Shape, measured: dict[str, Path] | None) -> dict[str, Path]:
    """Repository-layout trees of the release's size, the pack's targets at their paths and sizes."""
    trees = {}
    for pin in shape.pins:
        tree = root / pin.dist
        (tree / pin.package).mkdir(parents=True, exist_ok=True)
        (tree / pin.package / "__init__.py").touch()
        mine = {p: s for p, s in shape.sizes.items() if shape.dist_of(p) == pin.dist}
        for rel, size in mine.items():
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(synth_module(rel.rsplit("/", 1)[-1].removesuffix(".py"), size))
        count, size, dirs = tree_size(pin.dist, pin.package, measured)
        _filler(tree, pin.package, max(count - len(mine) - 1, 0), max(size - sum(mine.values()), 0), max(dirs, 1))
        trees[pin.dist] = tree
    return trees


def _edit_lines(lines: list[str], tag: str, slot: int, slots: int, hunks: int, added: int, removed: int) -> list[str]:
    """Insert ``added`` lines (and remove about ``removed``) in ``hunks`` places of the file's
    ``slot``-th region of ``slots``, so that the fixes sharing a file edit disjoint parts of it."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")] or [len(lines)]
    lo = len(starts) * slot // slots
    region = starts[lo : max(len(starts) * (slot + 1) // slots, lo + 1)] or starts[-1:]
    out = list(lines)
    per_hunk = [added // hunks + (1 if h < added % hunks else 0) for h in range(hunks)]
    blocks = (removed // hunks + 4) // 5 if removed else 0  # whole 5-line functions, so it still compiles
    places = sorted({region[(len(region) * (2 * h + 1)) // (2 * hunks)] for h in range(hunks)}, reverse=True)
    for h, at in enumerate(places):
        end = at + 5 * blocks if at + 5 * blocks <= len(out) else at
        out[at:end] = [f"_{tag.replace('-', '_')}_{h}_{k} = {k}\n" for k in range(per_hunk[h])]
    return out


def synth_cookbook(root: Path, trees: dict[str, Path], shape: Shape, builders: ModuleType, tools: Tools) -> None:
    """``shape``'s fixes as patches chained over the pristine ``trees``, in a profile, locked by the
    engine under test (whose lock it then reads)."""
    cookbook = builders.Cookbook(root, sources=trees)
    slots: dict[str, int] = {}
    for fix in shape.fixes:
        for e in fix.edits:
            slots[e.path] = slots.get(e.path, 0) + 1
    used: dict[str, int] = {}
    state: dict[str, str | None] = {}
    for fix in shape.fixes:
        edits: dict[str, tuple[str | None, str | None]] = {}
        for e in fix.edits:
            if e.path not in state:
                p = trees[shape.dist_of(e.path)] / e.path
                state[e.path] = p.read_text() if p.exists() else None
            before = state[e.path]
            if e.creates or before is None:
                after = "".join(f"_{fix.id.replace('-', '_')}_{k} = {k}\n" for k in range(e.added))
            else:
                slot = used.get(e.path, 0)
                lines = before.splitlines(keepends=True)
                after = "".join(_edit_lines(lines, fix.id, slot, slots[e.path], e.hunks, e.added, e.removed))
            used[e.path] = used.get(e.path, 0) + 1
            edits[e.path] = (before, after)
            state[e.path] = after
        cookbook.fix(fix.id, edits, opt_in=fix.opt_in, release=shape.release, title=f"Synthetic {fix.id}")
    pack = [f.id for f in shape.fixes]
    opt_ins = [f.id for f in shape.fixes if f.opt_in]
    commits = {pin.dist: list(pin.commits) for pin in shape.pins}
    cookbook.profile(pack, opt_ins, name=shape.profile, release=shape.release, commits=commits)
    lock(tools, root, shape.profile, trees)


def lock(tools: Tools, cookbook: Path, profile: str, trees: dict[str, Path]) -> None:
    sources = [a for dist, tree in trees.items() for a in ("--source", f"{dist}={tree}")]
    must(run(tools.fixpack("lock", "--profile", profile, *sources), env=tools.env(cookbook, True)), "fixpack lock")


# --------------------------------------------------------------------------------------------
# The real cookbook


def real_cookbook(root: Path, site: Path, trees: dict[str, Path], tools: Tools, builders: ModuleType) -> list[str]:
    """Copy this repository's cookbook to ``root`` and lock it against ``trees``, leaving out each
    fix that does not load or does not apply on ``site``; returns what was left out, and why."""
    # All of fixes/: the proofs import their shared harnesses from fixes/_support.
    shutil.copytree(tools.source / "fixes", root / "fixes", ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    shutil.copytree(tools.source / "profiles", root / "profiles")
    if (tools.source / "recipes").is_dir():
        shutil.copytree(tools.source / "recipes", root / "recipes")
    dropped: list[str] = []
    while (culprit := _load_problem(root, trees) or _apply_problem(root, site, tools)) is not None:
        fid, reason = culprit
        dropped.append(f"{fid}: {reason}")
        log(f"leaving out {fid}: {reason}")
        _leave_out(root, fid, builders)
    lock(tools, root, PROFILE, trees)
    return dropped


def _load_problem(root: Path, trees: dict[str, Path]) -> tuple[str, str] | None:
    """The fix that keeps the catalog from loading (transforms rendered first, as lock does)."""
    from fixpack.commands.maintain.authoring.lock import render_cst
    from fixpack.cookbook.catalog import Catalog
    from fixpack.cookbook.profiles import load_profile
    from fixpack.errors import FixpackError

    try:
        render_cst(root, load_profile(root / "profiles" / f"{PROFILE}.toml"), trees)
        Catalog.load(root).profile(PROFILE)
    except FixpackError as exc:
        fid = exc.fix_id or _fix_of(root, exc.path)
        if fid is None:
            raise SystemExit(f"bench: cannot prepare the cookbook copy: {exc.message}") from None
        return fid, exc.message
    return None


def _fix_of(root: Path, path: str | None) -> str | None:
    """The fix whose folder holds ``path``."""
    if path is None:
        return None
    fixes, where = (root / "fixes").resolve(), Path(path).resolve()
    return where.relative_to(fixes).parts[0] if where.is_relative_to(fixes) and where != fixes else None


def _apply_problem(root: Path, site: Path, tools: Tools) -> tuple[str, str] | None:
    """The fix ``fixpack apply --dry-run --json`` refuses on the pristine site, with its reason."""
    from fixpack.cookbook.catalog import Catalog

    opt_ins = list(Catalog.load(root).profile(PROFILE).opt_ins)
    cmd = tools.fixpack("apply", "--profile", PROFILE, *opt_ins, "--dry-run", "--json", "--site", str(site))
    r = run(cmd, env=tools.env(root, True))
    try:
        result = json.loads(r.out)
    except ValueError:
        raise SystemExit(f"bench: fixpack apply --json printed no JSON (exit {r.rc}):\n{r.err.strip()}") from None
    if result["ok"]:
        return None
    # The refusing fix has its own reason; every other fix of the plan shares one, that it was refused.
    refused = [f for f in result["fixes"] if f["action"] == "refused"]
    reasons = Counter(f["reason"] for f in refused)
    named = [f for f in refused if reasons[f["reason"]] == 1]
    if len(named) != 1:
        raise SystemExit(f"bench: the cookbook copy does not apply, and no fix is named: {result['error']}")
    return named[0]["id"], named[0]["reason"]


def _leave_out(root: Path, fid: str, builders: ModuleType) -> None:
    from fixpack.cookbook.profiles import load_profile

    profile = load_profile(root / "profiles" / f"{PROFILE}.toml")
    shutil.rmtree(root / "fixes" / fid, ignore_errors=True)
    builders.Cookbook(root).profile(
        [f for f in profile.pack if f != fid],
        [f for f in profile.opt_ins if f != fid],
        name=profile.name,
        release=profile.release,
        commits={pin.dist: list(pin.commits) for pin in profile.pins},
    )


def plan(tools: Tools, cookbook: Path, opt_ins: list[str], work: Path) -> tuple[list[FileDiff], Path]:
    """The plan's changes in order, as ``fixpack diff`` writes them for git apply and patch: one
    section per change, so a file edited by several fixes appears several times."""
    from fixpack.core.patch import split_files

    diff = tools.fixpack("diff", "--profile", PROFILE, *opt_ins, "--format", "unified")
    r = must(run(diff, env=tools.env(cookbook, True)), "fixpack diff")
    patch = work / "plan.patch"
    patch.write_text(r.out)
    sections = re.split(r"^(?=diff --git )", r.out, flags=re.M)
    return [d for section in sections if section.strip() for d in split_files(section)], patch


def fix_patches(tools: Tools, cookbook: Path, opt_ins: list[str], site: Path) -> list[Path]:
    """Each fix's own patch file in the order the apply takes them (the plan the engine resolves on
    ``site``: ``apply --dry-run --json``), for the peer that patches without fixpack."""
    from fixpack.cookbook.fix_module import rendered_patch_name
    from fixpack.cookbook.profiles import load_profile
    from fixpack.cookbook.tomlfile import read

    release = load_profile(cookbook / "profiles" / f"{PROFILE}.toml").release
    cmd = tools.fixpack("apply", "--profile", PROFILE, *opt_ins, "--dry-run", "--json", "--site", str(site))
    result = json.loads(must(run(cmd, env=tools.env(cookbook, True)), "fixpack apply --dry-run").out)
    out = []
    for fix in result["fixes"]:
        if fix["action"] != "would-apply":
            continue
        folder = cookbook / "fixes" / fix["id"]
        spec = read(folder / "fix.toml")["release"][release]
        out.append(folder / spec.get("patch", rendered_patch_name(release)))
    return out


# --------------------------------------------------------------------------------------------
# A prepared environment


@dataclass
class Bed:
    site: Path
    cookbook: Path
    src: dict[str, Path]
    opt_ins: list[str]
    targets: list[str]  # every path the plan touches
    patch_file: Path | None = None  # the plan as one patch, for the peers (git apply, patch)
    fix_patches: list[Path] = field(default_factory=list)  # each fix's patch in plan order (the peer)
    pristine: dict[str, tuple[bytes, int] | None] = field(default_factory=dict)  # content, mtime (ns)
    pycs: dict[Path, bytes] = field(default_factory=dict)

    def file(self, rel: str) -> Path:
        return self.site / rel

    def snapshot(self) -> None:
        for rel in self.targets:
            p = self.file(rel)
            self.pristine[rel] = (p.read_bytes(), p.stat().st_mtime_ns) if p.exists() else None
            for pyc in self._bytecode(rel):
                self.pycs[pyc] = pyc.read_bytes()

    def _bytecode(self, rel: str) -> list[Path]:
        p = self.file(rel)
        cache = p.parent / "__pycache__"
        return list(cache.glob(f"{p.stem}.*.pyc")) if cache.is_dir() else []

    def reset(self) -> None:
        """Back to the pristine site: targets with their mtimes (which bytecode is checked against)
        and their bytecode, no state folder, no patch leftovers."""
        shutil.rmtree(self.site / ".fixpack", ignore_errors=True)
        for rel, pristine in self.pristine.items():
            p = self.file(rel)
            for leftover in (p.with_name(p.name + ".orig"), p.with_name(p.name + ".rej")):
                leftover.unlink(missing_ok=True)
            for pyc in self._bytecode(rel):  # of a created module, or where the release had none
                if pyc not in self.pycs:
                    pyc.unlink()
            if pristine is None:
                p.unlink(missing_ok=True)
                continue
            content, mtime = pristine
            if not p.exists() or p.read_bytes() != content:
                p.write_bytes(content)
            os.utime(p, ns=(mtime, mtime))
        for pyc, content in self.pycs.items():
            if not pyc.exists() or pyc.read_bytes() != content:
                pyc.write_bytes(content)
        # An image's files are on disk when a container starts: without this, the first fsync of
        # the measured run would also flush what the reset just wrote.
        os.sync()

    def bytecode_of(self, modules: list[str]) -> dict[str, bytes | None]:
        """The .pyc an import of each module would read (this interpreter's cache tag)."""
        out = {}
        for rel in modules:
            pyc = Path(importlib.util.cache_from_source(str(self.file(rel))))
            out[rel] = pyc.read_bytes() if pyc.exists() else None
        return out

    def existing(self) -> list[Path]:
        return [self.file(t) for t in self.targets if self.file(t).exists()]

    def hashes(self) -> dict[str, str | None]:
        return {
            t: hashlib.sha256(self.file(t).read_bytes()).hexdigest() if self.file(t).exists() else None
            for t in self.targets
        }

    def pristine_hashes(self) -> dict[str, str | None]:
        return {t: None if c is None else hashlib.sha256(c[0]).hexdigest() for t, c in self.pristine.items()}

    @property
    def created(self) -> int:
        return sum(1 for c in self.pristine.values() if c is None)

    @property
    def target_bytes(self) -> int:
        return sum(len(c[0]) for c in self.pristine.values() if c)


def recipe_for(cookbook: Path, opt_ins: list[str]) -> str | None:
    """The slug of a recipe in ``cookbook`` whose fix set is the bed's (the profile and these
    opt-ins), for the ``--recipe`` rows; None when there is none."""
    import yaml

    for path in sorted((cookbook / "recipes").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        fixes = data.get("fixes", {}) if isinstance(data, dict) else {}
        if fixes.get("profile") == PROFILE and set(fixes.get("opt_ins", [])) == set(opt_ins):
            return data["meta"]["slug"]
    return None
