"""The workloads on a prepared bed, each beside its floor and peers, interleaved round by round so
that all contenders of a row see the same machine: cold apply, warm re-run, revert, apply followed
by the workers' first import, and verify."""

from __future__ import annotations

import re
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .beds import Bed, recipe_for
from .engine import PROFILE, Tools
from .measure import Series, log, must, peak, run, run_together

__all__ = ["bench_main", "bench_first_import", "bench_verify", "imports_on", "missing_tools", "IMPORT_PROCESSES"]

MAIN = (
    "cold",
    "hash_floor",
    "compile_floor",
    "peer",
    "git_apply",
    "warm",
    "warm_floor",
    "git_check_r",
    "patch_check_r",
    "revert",
    "py_start",
    "py_start_bare",
    "recipe_cold",
    "recipe_rerun",
)

# The peers' tools: a row whose tool is not installed is skipped, and the report says why.
PEER_TOOLS = {
    "patch": ("peer", "patch_check_r"),
    "git": ("git_apply", "git_check_r"),
}


def missing_tools() -> dict[str, str]:
    """Each peer tool that is not installed, with the rows it costs."""
    return {
        tool: f"{tool} is not installed: {', '.join(rows)} not run"
        for tool, rows in PEER_TOOLS.items()
        if shutil.which(tool) is None
    }


def bench_main(bed: Bed, tools: Tools, repeat: int, missing: Collection[str] = ()) -> dict[str, Series]:
    """Cold apply, warm re-run and revert with their floors and peers (a peer whose tool is in
    ``missing`` is left out)."""
    assert bed.patch_file is not None, "the peers need the plan's patch"
    s = {name: Series(name) for name in MAIN}
    env, menv = tools.env(bed.cookbook), tools.env(bed.cookbook, module=True)
    cwd = bed.site.parent
    apply_cmd = tools.apply_all(bed.site, bed.opt_ins)
    git_apply = ["git", "apply", "-p1", str(bed.patch_file)]
    git_check = ["git", "apply", "--check", "-R", "-p1", str(bed.patch_file)]
    patch_check = ["patch", "-p1", "-s", "-R", "--dry-run", "-i", str(bed.patch_file)]
    revert_cmd = tools.fixpack("revert", "--site", str(bed.site))
    has_git, has_patch = "git" not in missing, "patch" not in missing
    # A --recipe start of the same fix set: always the full path (its rules read the environment).
    slug = recipe_for(bed.cookbook, bed.opt_ins) if tools.knows_recipes() else None
    recipe_cmd = tools.apply_recipe(bed.site, slug) if slug else None

    # Warm-up round (not timed): peak RSS of each contender, and the peers must leave the same bytes.
    bed.reset()
    s["cold"].measure(must(peak(apply_cmd, env=env, cwd=cwd), "cold apply"))
    by_fixpack = bed.hashes()
    modules = [t for t, h in by_fixpack.items() if h is not None and t.endswith(".py")]  # what the peer compiles
    pycs = bed.bytecode_of(modules)
    peer = tools.peer(bed.fix_patches, modules)
    s["warm_floor"].measure(must(peak(tools.floor(bed.existing()), cwd=cwd), "hash floor"))
    s["warm"].measure(must(peak(apply_cmd, env=env, cwd=cwd), "warm re-run"))
    if has_git:
        s["git_check_r"].measure(must(peak(git_check, cwd=bed.site), "git apply --check -R"))
    if has_patch:
        s["patch_check_r"].measure(must(peak(patch_check, cwd=bed.site), "patch -R --dry-run"))
    s["revert"].measure(must(peak(revert_cmd, env=menv, cwd=cwd), "revert"))
    bed.reset()
    s["hash_floor"].measure(must(peak(tools.floor(bed.existing()), cwd=cwd), "hash floor"))
    s["compile_floor"].measure(must(peak(tools.compile_floor(bed.existing()), cwd=cwd), "compile floor"))
    if has_git:
        bed.reset()
        s["git_apply"].measure(must(peak(git_apply, cwd=bed.site), "git apply"))
        _same(bed, "git apply", by_fixpack)
    if has_patch:
        bed.reset()
        s["peer"].measure(must(peak(peer, cwd=bed.site), "patch loop + compileall"))
        _same(bed, "patch loop", by_fixpack)
        if tools.write_bytecode and bed.bytecode_of(modules) != pycs:
            log("warning: compileall writes other bytecode than fixpack")

    for i in range(repeat):
        log(f"main workloads: round {i + 1}/{repeat}")
        bed.reset()
        s["hash_floor"].add(must(run(tools.floor(bed.existing()), cwd=cwd), "hash floor"))
        s["compile_floor"].add(must(run(tools.compile_floor(bed.existing()), cwd=cwd), "compile floor"))
        if has_git:
            bed.reset()
            s["git_apply"].add(must(run(git_apply, cwd=bed.site), "git apply"))
        if has_patch:
            bed.reset()
            s["peer"].add(must(run(peer, cwd=bed.site), "patch loop + compileall"))
        bed.reset()
        s["cold"].add(must(run(apply_cmd, env=env, cwd=cwd), "cold apply"))
        s["warm_floor"].add(must(run(tools.floor(bed.existing()), cwd=cwd), "hash floor"))
        s["warm"].add(must(run(apply_cmd, env=env, cwd=cwd), "warm re-run"))
        if has_git:
            s["git_check_r"].add(must(run(git_check, cwd=bed.site), "git apply --check -R"))
        if has_patch:
            s["patch_check_r"].add(must(run(patch_check, cwd=bed.site), "patch -R --dry-run"))
        s["revert"].add(must(run(revert_cmd, env=menv, cwd=cwd), "revert"))
        s["py_start"].add(must(run([tools.python, "-c", "pass"], cwd=cwd), "python -c pass"))
        s["py_start_bare"].add(must(run([tools.python, "-I", "-S", "-c", "pass"], cwd=cwd), "python -I -S"))
        if bed.hashes() != bed.pristine_hashes():
            log("warning: revert did not give back the pristine files")
        if recipe_cmd is not None:
            bed.reset()
            s["recipe_cold"].add(must(run(recipe_cmd, env=env, cwd=cwd), "cold --recipe start"))
            s["recipe_rerun"].add(must(run(recipe_cmd, env=env, cwd=cwd), "--recipe re-run"))
    bed.reset()
    return s


def _same(bed: Bed, name: str, by_fixpack: dict[str, str | None]) -> None:
    got = bed.hashes()
    if got != by_fixpack:
        bad = [t for t in bed.targets if got[t] != by_fixpack[t]]
        log(f"warning: {name} leaves other bytes than fixpack in {', '.join(bad)}")


# --------------------------------------------------------------------------------------------
# Apply, then the workers' first import

# A server starts this many worker processes (tensor-parallel ranks), each importing the patched
# modules; after an apply the first of them finds stale bytecode.
IMPORT_PROCESSES = 4

# What each worker's first import of the targets costs, without vLLM's dependencies (not installed
# where the bench runs, and MagicMock stand-ins for them break inside vllm's own imports): torch,
# which every worker imports before these modules, then each target module's code found and loaded
# by the import system itself: its fresh bytecode read, or its source compiled and the bytecode
# written, as a first import does. Module bodies, the parent packages' included, are not run: they
# are the same code before and after the fixes.
FIRST_IMPORT = """\
import importlib.util, sys, types
import torch  # noqa: F401
site = sys.argv[1]
for name in sys.argv[2:]:
    parts = name.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in sys.modules:
            sys.modules[package] = types.ModuleType(package)
            sys.modules[package].__path__ = [site + "/" + "/".join(parts[:i])]
    importlib.util.find_spec(name).loader.get_code(name)
"""


def module_names(bed: Bed) -> list[str]:
    """The import names of the targets the release has (created ones are not imported by stock code)."""
    names = []
    for rel in bed.targets:
        if rel.endswith(".py") and bed.pristine.get(rel) is not None:
            names.append(rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
    return names


def bench_first_import(bed: Bed, tools: Tools, repeat: int, script: Path) -> dict[str, Series]:
    """Apply + the workers' first import of the patched modules, against their first import of the
    stock ones (the release's bytecode, as pip compiled it, is fresh). Not run without torch."""
    has_torch = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    if run([tools.python, "-c", has_torch]).rc != 0:
        log(f"apply + first import: skipped, torch is not installed for {tools.python}")
        return {}
    script.write_text(FIRST_IMPORT)
    cwd = bed.site.parent
    workers = [[tools.python, str(script), str(bed.site), *module_names(bed)]] * IMPORT_PROCESSES
    apply_cmd = tools.apply_all(bed.site, bed.opt_ins)
    env = tools.env(bed.cookbook)
    s = {"stock_import": Series("stock_import"), "apply_import": Series("apply_import")}
    for i in range(repeat):
        log(f"apply + first import in {IMPORT_PROCESSES} processes: round {i + 1}/{repeat}")
        bed.reset()
        s["stock_import"].add(must(run_together(workers, cwd=cwd), "first import, stock"))
        bed.reset()
        applied = must(run(apply_cmd, env=env, cwd=cwd), "cold apply")
        imported = must(run_together(workers, cwd=cwd), "first import, patched")
        imported.seconds += applied.seconds
        s["apply_import"].add(imported)
    bed.reset()
    return s


# --------------------------------------------------------------------------------------------


def imports_on(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run once with -X importtime: which heavy modules load, and the import share of the time."""
    r = run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, cwd=cwd)
    mods, total = [], 0
    for line in r.err.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            mods.append(m.group(4).strip())
            if len(m.group(3)) <= 1:  # top level
                total += int(m.group(2))
    watch = ("libcst", "unidiff", "click", "packaging", "importlib.metadata", "difflib", "tomllib", "email")
    return {
        "rc": r.rc,
        "modules": len(mods),
        "import_s": total / 1e6,
        "loaded": {w: any(x == w or x.startswith(w + ".") for x in mods) for w in watch},
    }


def bench_verify(bed: Bed, tools: Tools, repeat: int) -> dict[str, Series]:
    """``fixpack verify`` of the whole profile, beside its floor: importing torch, which the proofs
    each do in a process of their own; and ``verify --coverage`` in the same rounds (left out, saying
    so, where coverage.py is not installed)."""
    s = {"verify": Series("verify"), "torch_import": Series("torch_import")}
    sources = [a for dist, tree in bed.src.items() for a in ("--source", f"{dist}={tree}")]
    cmds = {"verify": tools.fixpack("verify", "--profile", PROFILE, *sources)}
    cwd = bed.site.parent
    if run([tools.python, "-c", "import coverage"], cwd=cwd).rc == 0:
        s["verify_coverage"] = Series("verify_coverage")
        cmds["verify_coverage"] = tools.fixpack("verify", "--profile", PROFILE, "--coverage", *sources)
    else:
        log("verify --coverage: not measured, coverage.py is not installed (pip install 'fixpack[coverage]')")
    for i in range(repeat):
        log(f"verify: run {i + 1}/{repeat} (slow)")
        s["torch_import"].add(must(run([tools.python, "-c", "import torch"], cwd=cwd), "python -c 'import torch'"))
        for name, cmd in cmds.items():
            r = s[name].add(peak(cmd, env=tools.env(bed.cookbook, module=True), cwd=cwd))
            s[name].measure(r)
            if r.rc != 0:
                tail = [ln for ln in r.out.splitlines() if ln.startswith(("FAIL", "fixpack verify"))]
                log(f"{name} exit {r.rc}: " + "; ".join(tail[-6:]))
    return s
