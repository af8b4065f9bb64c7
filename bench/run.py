#!/usr/bin/env python3
"""fixpack's benchmark: each workload beside its floor and its peers, measured in the same run.

    python3 bench/run.py [--site-from SITE] [--repeat 7] [--verify-repeat 1] [--no-scale] [--json FILE]

Builds a scratch site and cookbook (bench/prepare.py), times whole processes, start-up included,
as the container runs them: the median of ``--repeat`` runs, interleaved round by round so that
all contenders of a row see the same machine (bench/workloads.py, bench/scale.py); judges the goals
(bench/goals.py), then prints them with the table (bench/report.py). bench/README.md says more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Run as a script: the package is found beside the checkout's other folders. Nothing imports
# fixpack before bench.engine.load_builders puts the engine's snapshot first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.engine import Tools, load_builders, snapshot  # noqa: E402
from bench.goals import goals  # noqa: E402
from bench.measure import log, must, run  # noqa: E402
from bench.prepare import describe, prepare, source_trees  # noqa: E402
from bench.report import as_json, table  # noqa: E402
from bench.scale import bench_scale  # noqa: E402
from bench.workloads import bench_first_import, bench_main, bench_verify, imports_on, missing_tools  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=7, help="runs per contender (median; default 7)")
    ap.add_argument("--verify-repeat", type=int, default=1, help="fixpack verify runs (10-15 s each; 0: skip)")
    ap.add_argument("--scale-repeat", type=int, help="runs per scale row (default: --repeat)")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale rows")
    ap.add_argument("--site-from", type=Path, metavar="DIR", help="copy this pristine installed site (never written)")
    ap.add_argument("--synthetic", action="store_true", help="synthetic trees even when FIXPACK_SRC_* are set")
    ap.add_argument(
        "--repo",
        type=Path,
        default=REPO,
        help="the checkout whose engine (fixpack/, fixes/apply_all.py) is measured on this checkout's "
        "workloads (default: this one)",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for fixpack and the floor (default: this)")
    ap.add_argument("--workdir", type=Path, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    ap.add_argument(
        "--dont-write-bytecode",
        action="store_true",
        help="run every contender with PYTHONDONTWRITEBYTECODE=1, as some images do (default: unset, "
        "whatever the shell has: apply writes the patched modules' bytecode)",
    )
    args = ap.parse_args(argv)
    if args.site_from and (args.synthetic or source_trees() is None):
        ap.error(
            "--site-from needs the real fixes: set FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM, without --synthetic"
        )
    repo = args.repo.resolve()
    if not (repo / "fixpack").is_dir() or not (repo / "fixes" / "apply_all.py").is_file():
        ap.error(f"--repo {args.repo}: not a fixpack checkout (no fixpack/ or fixes/apply_all.py)")
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fixpack-bench-", dir=args.workdir))
    try:
        return _bench(args, repo, work)
    finally:
        if args.keep:
            log(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, repo: Path, work: Path) -> int:
    t_start = time.perf_counter()
    # The engine under test is --repo's; the workloads (cookbook, profile, sites) are this checkout's,
    # read with this checkout's own fixpack, so that two engines are measured on the same work.
    engine = snapshot(repo, work / "engine")
    own = engine if repo == REPO else snapshot(REPO, work / "bench-fixpack")
    tools = Tools(args.python, engine, REPO, write_bytecode=not args.dont_write_bytecode)
    builders = load_builders(own, REPO)
    prepared = prepare(work, tools, builders, args.site_from, args.synthetic)
    bed = prepared.bed
    missing = missing_tools()
    for why in missing.values():
        log(f"skipped: {why}")
    ctx = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": platform.node(),
        "python": f"Python {platform.python_version()} ({args.python})",
        "engine": _describe(repo),
        "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "env": prepared.env,
        "profile": prepared.profile,
        "shape": describe(prepared.shape),
        "repeat": args.repeat,
        "verify_repeat": args.verify_repeat,
        "real": prepared.real,
        "skipped": list(missing.values()),
        "bytecode": "written (PYTHONDONTWRITEBYTECODE unset)"
        if tools.write_bytecode
        else "not written (PYTHONDONTWRITEBYTECODE=1)",
    }
    series = bench_main(bed, tools, args.repeat, missing)
    apply_cmd = tools.apply_all(bed.site, bed.opt_ins)
    imports = {kind: imports_on(apply_cmd, tools.env(bed.cookbook), work) for kind in ("cold", "warm")}
    revert = tools.fixpack("revert", "--site", str(bed.site))
    must(run(revert, env=tools.env(bed.cookbook, True)), "revert")
    series |= bench_first_import(bed, tools, args.repeat, work / "first_import.py")
    if args.verify_repeat > 0:
        series |= bench_verify(bed, tools, args.verify_repeat)
    scale = (
        [] if args.no_scale else bench_scale(prepared.shape, work, tools, builders, args.scale_repeat or args.repeat)
    )
    judged = goals(series, scale, imports)
    ctx["bench_s"] = round(time.perf_counter() - t_start, 1)
    print(table(ctx, series, scale, imports, judged))
    print(f"\n(bench took {ctx['bench_s']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(as_json(ctx, series, scale, imports, judged), indent=2) + "\n")
    return 0


def _describe(repo: Path) -> str:
    """The checkout whose engine is measured, and its commit (with + when its tree has changes)."""
    head = run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]) if shutil.which("git") else None
    if head is None or head.rc != 0:
        return str(repo)
    dirty = run(["git", "-C", str(repo), "status", "--porcelain", "--", "fixpack", "fixes/apply_all.py"])
    return f"{repo} at {head.out.strip()}{'+' if dirty.out.strip() else ''}"


if __name__ == "__main__":
    sys.exit(main())
