"""Choosing and building the bed the workloads run on, and describing it for the report."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .beds import Bed, compile_targets, fix_patches, plan, real_cookbook, synth_cookbook, synth_trees, write_site
from .engine import PROFILE, Tools
from .measure import log
from .shape import Shape, derive

__all__ = ["Prepared", "prepare", "source_trees", "describe"]


def source_trees() -> dict[str, Path] | None:
    """The real upstream trees, when ``FIXPACK_SRC_VLLM_GAUDI`` and ``FIXPACK_SRC_VLLM`` are both set."""
    gaudi, vllm = os.environ.get("FIXPACK_SRC_VLLM_GAUDI"), os.environ.get("FIXPACK_SRC_VLLM")
    if not (gaudi and vllm):
        return None
    return {"vllm-gaudi": Path(gaudi).resolve(), "vllm": Path(vllm).resolve()}


@dataclass
class Prepared:
    bed: Bed
    shape: Shape  # of this repository's pack: the synthetic fixes' model, and the scale rows' pins
    real: bool
    env: str  # where the trees, fixes and site came from, for the report
    profile: str  # the plan's size, for the report


def prepare(work: Path, tools: Tools, builders: ModuleType, site_from: Path | None, synthetic: bool) -> Prepared:
    """Real trees and this repository's fixes when the trees are given (and ``synthetic`` is not
    asked for); else synthetic trees and fixes shaped like this repository's pack."""
    from fixpack.cookbook.catalog import Catalog
    from fixpack.cookbook.profiles import load_profile

    trees = source_trees()
    real = trees is not None and not synthetic
    cookbook = work / "cookbook"
    dropped: list[str] = []
    if real:
        assert trees is not None
        src = trees
        if site_from:
            log(f"copying {site_from}")
            site = work / "site"
            shutil.copytree(site_from, site, symlinks=True)
        else:
            log("laying out the site as pip install --target does")
            pins = load_profile(tools.source / "profiles" / f"{PROFILE}.toml").pins
            site = write_site(work, src, pins, builders)
        log("copying and locking the cookbook against the real trees")
        dropped = real_cookbook(cookbook, site, src, tools, builders)
        shape = derive(cookbook, PROFILE, trees)  # the copy: a fix that does not load is left out there
        what = f"real trees (vllm-gaudi={src['vllm-gaudi']}, vllm={src['vllm']}), this repo's fixes"
    else:
        log("writing synthetic trees and fixes of the profile's size and shape")
        shape = derive(tools.source, PROFILE, trees)
        src = synth_trees(work / "src", shape, trees)
        synth_cookbook(cookbook, src, shape, builders, tools)
        site = write_site(work, src, shape.pins, builders)
        sized = "measured from the trees" if trees else "estimated: FIXPACK_SRC_VLLM_GAUDI/FIXPACK_SRC_VLLM unset"
        what = f"synthetic trees ({sized}), synthetic fixes"
    opt_ins = list(Catalog.load(cookbook).profile(PROFILE).opt_ins)
    diffs, patch_file = plan(tools, cookbook, opt_ins, work)
    targets = list(dict.fromkeys(d.path for d in diffs))
    if not site_from:
        compile_targets(site, targets)
    bed = Bed(site, cookbook, src, opt_ins, targets, patch_file, fix_patches(tools, cookbook, opt_ins, site))
    bed.snapshot()
    files = [p for p in site.rglob("*") if p.is_file()]
    where = f"a copy of {site_from}" if site_from else "pip --target layout built from the trees"
    profile = (
        f"{len(tools.listed(cookbook))} fixes (opt-ins named: {', '.join(opt_ins) or 'none'}), {len(diffs)} changes, "
        f"{sum(len(d.hunks) for d in diffs)} hunks, {len(targets)} files ({bed.created} created), "
        f"{bed.target_bytes / 1000:.0f} KB of targets" + (f"; left out: {'; '.join(dropped)}" if dropped else "")
    )
    env = f"{what}; site: {where}, {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.0f} MiB"
    return Prepared(bed, shape, real, env, profile)


def describe(shape: Shape) -> str:
    """The synthetic pack's shape in a line: what it was read from."""
    edits = [e for f in shape.fixes for e in f.edits]
    return (
        f"{len(shape.fixes)} fixes, {len(edits)} changes, {sum(e.hunks for e in edits)} hunks, "
        f"+{sum(e.added for e in edits)} -{sum(e.removed for e in edits)} lines, "
        f"{len(shape.paths)} files ({sum(e.creates for e in edits)} created); sizes: {shape.sized_from}"
    )
