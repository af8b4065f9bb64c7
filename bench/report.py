"""The report: a table of medians beside floors and peers, the scale rows, the imports, the goals
(judged beforehand, see goals.py), and the same figures as JSON."""

from __future__ import annotations

from typing import Any

from .engine import PROFILE
from .goals import Goal
from .measure import Series
from .scale import SCALE_SIZES, ScaleRow
from .workloads import IMPORT_PROCESSES

__all__ = ["table", "as_json"]


def ms(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "-"


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return ms(value) if unit == "s" else f"{value:.0f} {unit}".rstrip()


def _ran(s: dict[str, Series], name: str) -> bool:
    return name in s and bool(s[name].runs)


def _peer(s: dict[str, Series], name: str, label: str, against: float) -> str:
    """A peer's median and fixpack's ratio to it, or that it was not run (its tool is missing)."""
    if not _ran(s, name):
        return f"{label}: not run"
    return f"{label} {ms(s[name].median)} ({ratio(against, s[name].median)})"


def _main_rows(s: dict[str, Series]) -> list[str]:
    cold, warm, revert = s["cold"], s["warm"], s["revert"]
    compile_floor, hash_floor = s["compile_floor"], s["hash_floor"]
    cold_peers = "; ".join(
        (
            _peer(s, "peer", "patch -p1 of each fix + compileall", cold.median),
            _peer(s, "git_apply", "git apply", cold.median),
        )
    )
    warm_peers = "; ".join(
        (
            _peer(s, "git_check_r", "git apply --check -R", warm.median),
            _peer(s, "patch_check_r", "patch -R --dry-run", warm.median),
        )
    )
    rows = [
        f"| cold apply, full {PROFILE} + opt-ins | {ms(cold.median)} | {ms(compile_floor.median)} (compile floor) "
        f"| {ratio(cold.median, compile_floor.median)} | {cold_peers} "
        f"| {cold.peak_mib:.0f} MiB (compile floor {compile_floor.peak_mib:.0f}) |",
        f"| (the same, against the hash floor) | | {ms(hash_floor.median)} (hash floor) "
        f"| {ratio(cold.median, hash_floor.median)} | | (hash floor {hash_floor.peak_mib:.0f} MiB) |",
        f"| warm re-run (all applied) | {ms(warm.median)} | {ms(s['warm_floor'].median)} (hash floor) "
        f"| {ratio(warm.median, s['warm_floor'].median)} | {warm_peers} | {warm.peak_mib:.0f} MiB |",
        f"| revert (all) | {ms(revert.median)} | | | | {revert.peak_mib:.0f} MiB |",
    ]
    if _ran(s, "recipe_cold"):
        rc, rr = s["recipe_cold"].median, s["recipe_rerun"].median
        rows += [
            f"| cold `--recipe` start (the same fix set) | {ms(rc)} | {ms(cold.median)} (cold `--profile` apply) "
            f"| {ratio(rc, cold.median)} | | |",
            f"| `--recipe` re-run (all applied: the full path) | {ms(rr)} | {ms(warm.median)} (warm re-run) "
            f"| {ratio(rr, warm.median)} | | |",
        ]
    if _ran(s, "apply_import"):
        both, stock = s["apply_import"].median, s["stock_import"].median
        rows.append(
            f"| apply + first import in {IMPORT_PROCESSES} processes | {ms(both)} "
            f"| {ms(stock)} (first import of the stock modules) | {ratio(both, stock)} | none | |"
        )
    if _ran(s, "verify"):
        verify, torch = s["verify"], s["torch_import"].median
        rcs = ",".join(str(r.rc) for r in verify.runs)
        rows.append(
            f"| verify, whole profile (exit {rcs}) | {ms(verify.median)} | {ms(torch)} (import torch) "
            f"| {ratio(verify.median, torch)} | none | {verify.peak_mib:.0f} MiB (proofs included) |"
        )
    if _ran(s, "verify_coverage"):
        covered, rcs = s["verify_coverage"], ",".join(str(r.rc) for r in s["verify_coverage"].runs)
        rows.append(
            f"| verify --coverage, whole profile (exit {rcs}) | {ms(covered.median)} | {ms(s['verify'].median)} "
            f"(verify, same rounds) | {ratio(covered.median, s['verify'].median)} | none "
            f"| {covered.peak_mib:.0f} MiB (proofs included) |"
        )
    return rows


def _scale_rows(scale: list[ScaleRow]) -> list[str]:
    rows = [
        "scale (synthetic fixes of 1 change, 2 hunks, +16 lines each; spread: a file per fix, stacked: one file)",
        "",
        "| fixes | target size | shape | files | cold | cold/floor | warm | warm/floor | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in scale:
        rows.append(
            f"| {r.fixes} | {r.size} ({SCALE_SIZES[r.size] // 1000} KB) | {r.shape} | {r.files} "
            f"| {ms(r.cold.median)} | {ratio(r.cold.median, r.cold_floor.median)} "
            f"| {ms(r.warm.median)} | {ratio(r.warm.median, r.warm_floor.median)} "
            f"| {max(r.cold.peak_mib, r.warm.peak_mib):.0f} MiB |"
        )
    return [*rows, ""]


def _goal_line(g: Goal) -> str:
    mark = {True: "MET   ", False: "MISSED", None: "NOT RUN"}[g.met]
    against = f"{figure(g.floor, g.unit)} x {g.limit_ratio:g}" if g.limit_ratio != 1 else "budget"
    below = "below " if g.strict else ""
    return f"  [{mark}] {g.name}: {figure(g.measured, g.unit)}, limit {below}{figure(g.limit, g.unit)} ({against})"


def table(ctx: dict[str, Any], s: dict[str, Series], scale: list[ScaleRow], imports: dict, goals: list[Goal]) -> str:
    lines = [
        f"fixpack bench, {ctx['when']} on {ctx['host']}: {ctx['python']}, {ctx['cpus']} CPUs, load {ctx['load']}",
        f"engine: {ctx['engine']}",
        f"environment: {ctx['env']}",
        f"bytecode of the patched modules: {ctx['bytecode']}",
        f"profile {PROFILE}: {ctx['profile']}",
        *([] if ctx["real"] else [f"synthetic fixes of the shape of this repository's: {ctx['shape']}"]),
        f"medians of {ctx['repeat']} whole-process runs (verify: {ctx['verify_repeat']}), start-up included",
        *(f"skipped: {why}" for why in ctx.get("skipped", [])),
        "",
        "| workload | fixpack | floor | fixpack/floor | peers (fixpack/peer) | peak RSS |",
        "|---|---|---|---|---|---|",
        *_main_rows(s),
        "",
        f"(interpreter start-up in these runs: python -c pass {ms(s['py_start'].median)}, "
        f"python -I -S -c pass {ms(s['py_start_bare'].median)}; each floor includes the first)",
        "",
        *(_scale_rows(scale) if scale else []),
    ]
    for kind in ("cold", "warm"):
        loaded = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in imports[kind]["loaded"].items())
        what = "cold apply" if kind == "cold" else "warm re-run"
        lines.append(f"imports, {what}: {imports[kind]['modules']} modules, {ms(imports[kind]['import_s'])}; {loaded}")
    lines += ["", "goals", *map(_goal_line, goals)]
    return "\n".join(lines)


def as_json(
    ctx: dict[str, Any], s: dict[str, Series], scale: list[ScaleRow], imports: dict, goals: list[Goal]
) -> dict[str, Any]:
    return {
        "context": ctx,
        "main": {k: v.json() for k, v in s.items()},
        "scale": [
            {
                "fixes": r.fixes,
                "size": r.size,
                "shape": r.shape,
                "files": r.files,
                "cold": r.cold.json(),
                "cold_floor": r.cold_floor.json(),
                "warm": r.warm.json(),
                "warm_floor": r.warm_floor.json(),
            }
            for r in scale
        ],
        "imports": imports,
        "goals": [g.json() for g in goals],
    }
