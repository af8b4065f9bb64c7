"""The workloads on a prepared bed, each beside its floor and peers, interleaved round by round so
that all contenders of a row see the same machine: cold apply, warm re-run, revert, apply followed
by the workers' first import, and verify."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .beds import Bed
from .engine import PROFILE, Tools
from .measure import Series, log, must, peak, run, run_together

__all__ = ["bench_main", "bench_first_import", "bench_verify", "imports_on", "IMPORT_PROCESSES"]

MAIN = (
    "cold",
    "cold_floor",
    "cold_compile_floor",
    "git_apply",
    "patch",
    "warm",
    "warm_floor",
    "git_check_r",
    "patch_check_r",
    "revert",
    "py_start",
    "py_start_bare",
)


def bench_main(bed: Bed, tools: Tools, repeat: int) -> dict[str, Series]:
    """Cold apply, warm re-run and revert with their floors and peers."""
    assert bed.patch_file is not None, "the peers need the plan's patch"
    s = {name: Series(name) for name in MAIN}
    env, menv = tools.env(bed.cookbook), tools.env(bed.cookbook, module=True)
    cwd = bed.site.parent
    apply_cmd = tools.apply_all(bed.site, bed.opt_ins)
    git_apply = ["git", "apply", "-p1", str(bed.patch_file)]
    git_check = ["git", "apply", "--check", "-R", "-p1", str(bed.patch_file)]
    patch_apply = ["patch", "-p1", "-s", "-N", "-i", str(bed.patch_file)]
    patch_check = ["patch", "-p1", "-s", "-R", "--dry-run", "-i", str(bed.patch_file)]
    revert_cmd = tools.fixpack("revert", "--site", str(bed.site))

    # Warm-up round (not timed): peak RSS of each contender, and the peers must leave the same bytes.
    bed.reset()
    s["cold_floor"].measure(must(peak(tools.floor(bed.existing()), cwd=cwd), "floor"))
    s["cold_compile_floor"].measure(must(peak(tools.compile_floor(bed.existing()), cwd=cwd), "compile floor"))
    s["git_apply"].measure(must(peak(git_apply, cwd=bed.site), "git apply"))
    by_git = bed.hashes()
    bed.reset()
    s["patch"].measure(must(peak(patch_apply, cwd=bed.site), "patch -p1"))
    by_patch = bed.hashes()
    bed.reset()
    s["cold"].measure(must(peak(apply_cmd, env=env, cwd=cwd), "cold apply"))
    by_fixpack = bed.hashes()
    s["warm_floor"].measure(must(peak(tools.floor(bed.existing()), cwd=cwd), "floor"))
    s["warm"].measure(must(peak(apply_cmd, env=env, cwd=cwd), "warm re-run"))
    s["git_check_r"].measure(must(peak(git_check, cwd=bed.site), "git apply --check -R"))
    s["patch_check_r"].measure(must(peak(patch_check, cwd=bed.site), "patch -R --dry-run"))
    s["revert"].measure(must(peak(revert_cmd, env=menv, cwd=cwd), "revert"))
    for name, got in (("git apply", by_git), ("patch -p1", by_patch)):
        if got != by_fixpack:
            bad = [t for t in bed.targets if got[t] != by_fixpack[t]]
            log(f"warning: {name} leaves other bytes than fixpack in {', '.join(bad)}")

    for i in range(repeat):
        log(f"main workloads: round {i + 1}/{repeat}")
        bed.reset()
        s["cold_floor"].add(must(run(tools.floor(bed.existing()), cwd=cwd), "floor"))
        s["cold_compile_floor"].add(must(run(tools.compile_floor(bed.existing()), cwd=cwd), "compile floor"))
        s["git_apply"].add(must(run(git_apply, cwd=bed.site), "git apply"))
        bed.reset()
        s["patch"].add(must(run(patch_apply, cwd=bed.site), "patch -p1"))
        bed.reset()
        s["cold"].add(must(run(apply_cmd, env=env, cwd=cwd), "cold apply"))
        s["warm_floor"].add(must(run(tools.floor(bed.existing()), cwd=cwd), "floor"))
        s["warm"].add(must(run(apply_cmd, env=env, cwd=cwd), "warm re-run"))
        s["git_check_r"].add(must(run(git_check, cwd=bed.site), "git apply --check -R"))
        s["patch_check_r"].add(must(run(patch_check, cwd=bed.site), "patch -R --dry-run"))
        s["revert"].add(must(run(revert_cmd, env=menv, cwd=cwd), "revert"))
        s["py_start"].add(must(run([tools.python, "-c", "pass"], cwd=cwd), "python -c pass"))
        s["py_start_bare"].add(must(run([tools.python, "-I", "-S", "-c", "pass"], cwd=cwd), "python -I -S"))
        if bed.hashes() != bed.pristine_hashes():
            log("warning: revert did not give back the pristine files")
    bed.reset()
    return s


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
    each do in a process of their own."""
    s = {"verify": Series("verify"), "torch_import": Series("torch_import")}
    sources = [a for dist, tree in bed.src.items() for a in ("--source", f"{dist}={tree}")]
    cmd = tools.fixpack("verify", "--profile", PROFILE, *sources)
    cwd = bed.site.parent
    for i in range(repeat):
        log(f"verify: run {i + 1}/{repeat} (slow)")
        s["torch_import"].add(must(run([tools.python, "-c", "import torch"], cwd=cwd), "python -c 'import torch'"))
        r = s["verify"].add(peak(cmd, env=tools.env(bed.cookbook, module=True), cwd=cwd))
        s["verify"].measure(r)
        if r.rc != 0:
            tail = [ln for ln in r.out.splitlines() if ln.startswith(("FAIL", "fixpack verify"))]
            log(f"verify exit {r.rc}: " + "; ".join(tail[-6:]))
    return s
