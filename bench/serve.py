#!/usr/bin/env python3
"""What fixpack costs a real ``vllm serve`` start on a CPU: vLLM 0.26.0 from the serve tier's venv
(``tests/serve/build_env.py``), the tiny model of ``tests/serve/make_model.py``.

    FIXPACK_SERVE_ENV=DIR python3 bench/serve.py [--runs 5] [--tp 1 2] [--apply-runs 7] [--hook-runs 1] [--json FILE]

fixpack's own parts, each measured where it runs:

- the apply through the entry point (``fixes/apply_all.py --profile v0.26.0 gdn-prefix-cache
  fp8-moe-gather --site SITE --overlay DIR``, the serve venv's interpreter, as a container runs
  it): cold (a new overlay each run) and warm (the overlay already there: the stamped fast path),
  whole processes, ``--apply-runs`` each, after one untimed run (fixpack's own bytecode written);
- the overlay's import hook in each process of the server (API server, engine core, workers, and
  the other Python processes the server starts: multiprocessing's resource tracker and the short
  ``python -c "import torch; ..."`` processes torch's inductor starts during vLLM's warm-up to probe
  the CPU's vector instructions): ``--hook-runs`` servers started with a timing shim first on
  ``PYTHONPATH`` (``bench/serve_shim/sitecustomize.py``), which loads the overlay's
  ``sitecustomize.py`` as ``site`` would and times it, then each call of its finder (every import
  of the process asks it first) and each read of a patched file by its loader (the read and the
  hash); the shim's own wrapper is inside the figure, so it is an upper bound;
- the runtime check's milliseconds and the rank agreement's, from their own log lines in each
  process of the fixpack servers below.

Their sum (every process's share added, as if none ran beside another) is set against the stock
server's median time to first answer: from the process's start to the first ``/v1/completions``
answer (16 tokens, greedy), ``/health`` polled every 50 ms. Goals: within 2% on the warm path
(warm apply) and 5% cold (cold apply).

End to end: ``--runs`` rounds per TP size, each a stock server and a fixpack server (the entry point
with a new overlay, ``--exec vllm serve``: the cold path) one after the other, the order swapped
every round; the difference of each round's times to first answer, its median and spread.

One server at a time, each stopped by its process group. Not part of bench/run.py: it needs the serve
venv (6.4 GB) and takes about 20 minutes on 2 cores. Run it with the development environment's
interpreter (it reuses the serve tier's helpers in tests/serve/, which import pytest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIM = Path(__file__).resolve().parent / "serve_shim"
sys.path.insert(0, str(REPO / "tests" / "serve"))

import build_env  # noqa: E402
from build_env import ServeEnv  # noqa: E402
from server import Server, ServerError  # noqa: E402
from vllm_serve import ROLE, Pack, entry_point, serve_args, vllm_server  # noqa: E402

CHECK_MS = re.compile(
    r"fixpack: profile \S+, fix set .+?, mode .+?, pid (?P<pid>\d+), \d+ files checked in (?P<ms>[\d.]+) ms"
)
AGREE_MS = re.compile(
    r"fixpack: ranks \S+ agree on fix set \S+ \(\d+ fixes\) in (?P<ms>[\d.]+) ms, rank \d+, pid (?P<pid>\d+)"
)
POLL = 0.05  # the server's /health poll: a start is timed to within it
GOALS = {"warm": 0.02, "cold": 0.05}


def log(message: str) -> None:
    print(f"bench/serve: {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def plain_env() -> dict[str, str]:
    """A container's environment for the entry point: no fixpack variables, no PYTHONPATH, bytecode
    written (as the servers below run: the cold apply writes its modules' .pyc)."""
    drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_") and k not in drop}


# --- the apply -----------------------------------------------------------------------------------


def time_apply(env: ServeEnv, overlay: Path) -> float:
    argv = entry_point(env.python, env.site, "--overlay", str(overlay))
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=plain_env())
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench/serve: the apply failed (exit {done.returncode}): {done.stderr.strip()}")
    return took


def bench_apply(env: ServeEnv, work: Path, runs: int) -> dict:
    time_apply(env, work / "apply-warm")  # untimed: fixpack's bytecode written, the warm overlay made
    cold, warm = [], []
    for i in range(runs):
        cold.append(time_apply(env, work / f"apply-cold-{i}"))
        warm.append(time_apply(env, work / "apply-warm"))
        shutil.rmtree(work / f"apply-cold-{i}")
    return {"cold_s": cold, "warm_s": warm, "cold_median_s": median(cold), "warm_median_s": median(warm)}


# --- one server to its first answer --------------------------------------------------------------


def first_answer(server: Server, model: Path) -> tuple[float, float]:
    """Start it; (seconds to the first 200 from /health, seconds to the first completion's answer)."""
    start = time.monotonic()
    server.start()
    try:
        server.wait_ready()
    except ServerError as exc:
        raise SystemExit(str(exc)) from None
    ready = time.monotonic() - start
    answer = server.post(
        "/v1/completions",
        {"model": str(model), "prompt": "The model server answers the request", "max_tokens": 16, "temperature": 0},
    )
    assert answer["choices"][0]["text"] is not None
    return ready, time.monotonic() - start


def roles(text: str, leader: int) -> dict[int, str]:
    """pid -> the vLLM process it is (the leader is the API server: --exec keeps its pid)."""
    found = {leader: "APIServer"}
    for m in ROLE.finditer(text):
        role = m["role"]
        found.setdefault(int(m["pid"]), "Worker" if role.startswith("Worker") else role.split("_")[0])
    return found


def fixpack_figures(server: Server) -> dict:
    text = server.text()
    who = roles(text, server.pid)
    checks = {int(m["pid"]): float(m["ms"]) for m in CHECK_MS.finditer(text)}
    agrees = {int(m["pid"]): float(m["ms"]) for m in AGREE_MS.finditer(text)}
    return {
        "check_ms": {f"{who.get(pid, 'other')} {pid}": ms for pid, ms in checks.items()},
        "agree_ms": {f"{who.get(pid, 'other')} {pid}": ms for pid, ms in agrees.items()},
        "check_total_ms": sum(checks.values()),
        "agree_total_ms": sum(agrees.values()),
    }


def bench_end_to_end(env: ServeEnv, model: Path, work: Path, tp: int, runs: int, control: bool = False) -> dict:
    """``runs`` rounds of a stock and a fixpack server, the order swapped every round; with
    ``control``, a second stock server in each round too (the three in turn), whose difference from
    the first is what two stock starts differ by on this machine."""
    rounds = []
    for i in range(runs):
        if control:
            sides = ("stock", "fixpack", "control")
            order = sides[i % 3 :] + sides[: i % 3]
        else:
            order = ("stock", "fixpack") if i % 2 == 0 else ("fixpack", "stock")
        row: dict = {}
        for side in order:
            pack = Pack(work / f"overlay-tp{tp}-{i}") if side == "fixpack" else None
            server_log, name = work / "logs" / f"tp{tp}-{i}-{side}.log", f"{side} TP {tp} round {i}"
            server = vllm_server(env, serve_args(model, tp), server_log, name, pack=pack, tp=tp, poll=POLL)
            try:
                ready, first = first_answer(server, model)
            finally:
                server.stop()
            row[side] = {"ready_s": ready, "first_answer_s": first}
            if side == "fixpack":
                row[side].update(fixpack_figures(server))
                shutil.rmtree(work / f"overlay-tp{tp}-{i}")
            log(f"TP {tp} round {i + 1}/{runs} {side}: first answer after {first:.2f} s (ready {ready:.2f} s)")
        row["difference_s"] = row["fixpack"]["first_answer_s"] - row["stock"]["first_answer_s"]
        if control:
            row["control_difference_s"] = row["control"]["first_answer_s"] - row["stock"]["first_answer_s"]
        rounds.append(row)
    diffs = [r["difference_s"] for r in rounds]
    controls = [r["control_difference_s"] for r in rounds if "control_difference_s" in r]
    return {
        "control_differences_s": controls,
        "rounds": rounds,
        "stock_first_answer_median_s": median([r["stock"]["first_answer_s"] for r in rounds]),
        "fixpack_first_answer_median_s": median([r["fixpack"]["first_answer_s"] for r in rounds]),
        "difference_median_s": median(diffs),
        "difference_min_s": min(diffs),
        "difference_max_s": max(diffs),
        "check_total_median_ms": median([r["fixpack"]["check_total_ms"] for r in rounds]),
        "agree_total_median_ms": median([r["fixpack"]["agree_total_ms"] for r in rounds]),
    }


# --- the import hook, per process ----------------------------------------------------------------


def bench_hook(env: ServeEnv, model: Path, work: Path, tp: int, runs: int) -> dict:
    totals, owns, per_run = [], [], []
    for i in range(runs):
        overlay = work / f"hook-overlay-tp{tp}-{i}"
        time_apply(env, overlay)
        records = work / f"hook-records-tp{tp}-{i}"
        records.mkdir()
        environ = {
            "PYTHONPATH": f"{SHIM}{os.pathsep}{overlay}",
            "FIXPACK_BENCH_OVERLAY": str(overlay),
            "FIXPACK_BENCH_HOOK_DIR": str(records),
        }
        server_log = work / "logs" / f"hook-tp{tp}-{i}.log"
        server = vllm_server(env, serve_args(model, tp), server_log, f"hook TP {tp}", tp=tp, environ=environ, poll=POLL)
        try:
            first_answer(server, model)
        finally:
            server.stop()
        who = roles(server.text(), server.pid)
        processes = {}
        for file in sorted(records.glob("*.json")):
            record = json.loads(file.read_text())
            own = record["install_ms"] + record["find_spec_ms"] + record["load_ms"]
            ms = own + record["stdlib_ms"]
            processes[f"{who.get(record['pid'], 'other')} {record['pid']}"] = {**record, "total_ms": ms, "own_ms": own}
        checked = {int(m["pid"]) for m in CHECK_MS.finditer(server.text())}
        missing = sorted(checked - {r["pid"] for r in processes.values()})
        if missing:
            log(f"TP {tp}: no hook record from the vLLM processes {missing} (ended without their exit handlers)")
        total = sum(p["total_ms"] for p in processes.values())
        totals.append(total)
        owns.append(sum(p["own_ms"] for p in processes.values()))
        per_run.append(processes)
        log(f"TP {tp} hook run {i + 1}/{runs}: {len(processes)} processes, {total:.1f} ms in all")
    return {"runs": per_run, "total_median_ms": median(totals), "own_median_ms": median(owns)}


# --- the report ----------------------------------------------------------------------------------


def judge(result: dict) -> None:
    """Each TP size's sums, warm and cold, against the stock server's median first answer."""
    apply = result["apply"]
    for row in result["tp"].values():
        e2e, hook = row["end_to_end"], row["hook"]
        stock_ms = e2e["stock_first_answer_median_s"] * 1000
        in_processes = hook["total_median_ms"] + e2e["check_total_median_ms"] + e2e["agree_total_median_ms"]
        row["sums"] = {}
        for path in ("warm", "cold"):
            apply_ms = apply[f"{path}_median_s"] * 1000
            total = apply_ms + in_processes
            row["sums"][path] = {
                "apply_ms": apply_ms,
                "in_processes_ms": in_processes,
                "total_ms": total,
                "share": total / stock_ms,
                "goal": GOALS[path],
                "met": total / stock_ms <= GOALS[path],
            }


def report(result: dict) -> str:
    apply = result["apply"]
    lines = [
        f"fixpack on a real vllm serve start, {result['machine']} (load {result['load_at_start']:.1f} at the "
        f"start, {result['load_at_end']:.1f} at the end), {result['date']}",
        f"apply through the entry point (overlay, {len(apply['cold_s'])} runs each): cold median "
        f"{apply['cold_median_s'] * 1000:.0f} ms (min {min(apply['cold_s']) * 1000:.0f}, max "
        f"{max(apply['cold_s']) * 1000:.0f}), warm median {apply['warm_median_s'] * 1000:.0f} ms (min "
        f"{min(apply['warm_s']) * 1000:.0f}, max {max(apply['warm_s']) * 1000:.0f})",
    ]
    for tp, row in result["tp"].items():
        e2e, hook = row["end_to_end"], row["hook"]
        lines.append(f"TP {tp}:")
        for name, p in (hook["runs"][-1] if hook["runs"] else {}).items():
            lines.append(
                f"  hook in {name} (parent {p['ppid']}): {p['total_ms']:.1f} ms (its standard library imports "
                f"{p['stdlib_ms']:.1f} ms, sitecustomize {p['install_ms']:.1f} ms, finder "
                f"{p['find_spec_ms']:.1f} ms over {p['find_spec_calls']} calls, {len(p['loads'])} patched "
                f"files read and hashed {p['load_ms']:.1f} ms)"
            )
        last = e2e["rounds"][-1]["fixpack"]
        lines.append("  runtime check (last run): " + ", ".join(f"{k} {v:.1f} ms" for k, v in last["check_ms"].items()))
        if last["agree_ms"]:
            lines.append("  agreement (last run): " + ", ".join(f"{k} {v:.1f} ms" for k, v in last["agree_ms"].items()))
        lines.append(
            f"  per start, in the server's processes (medians): hook {hook['total_median_ms']:.1f} ms (without the "
            f"standard library modules it imports first: {hook['own_median_ms']:.1f} ms), check "
            f"{e2e['check_total_median_ms']:.1f} ms, agreement {e2e['agree_total_median_ms']:.1f} ms"
        )
        for path, sum_ in row["sums"].items():
            lines.append(
                f"  {path}: apply {sum_['apply_ms']:.0f} ms + {sum_['in_processes_ms']:.1f} ms = "
                f"{sum_['total_ms']:.0f} ms, "
                f"{sum_['share'] * 100:.2f}% of the stock server's median first answer "
                f"({e2e['stock_first_answer_median_s']:.2f} s); goal {sum_['goal'] * 100:.0f}%: "
                + ("met" if sum_["met"] else "MISSED")
            )
        lines.append(
            f"  end to end ({len(e2e['rounds'])} rounds, the fixpack side cold): first answer stock median "
            f"{e2e['stock_first_answer_median_s']:.2f} s, fixpack median {e2e['fixpack_first_answer_median_s']:.2f} s; "
            f"difference per round median {e2e['difference_median_s']:+.2f} s (min {e2e['difference_min_s']:+.2f}, "
            f"max {e2e['difference_max_s']:+.2f})"
        )
        if e2e.get("control_differences_s"):
            c = e2e["control_differences_s"]
            lines.append(
                f"  control (a second stock server each round): second stock minus stock median {median(c):+.2f} s "
                f"(min {min(c):+.2f}, max {max(c):+.2f})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/serve.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--env", type=Path, default=os.environ.get("FIXPACK_SERVE_ENV"), help="the serve venv (FIXPACK_SERVE_ENV)"
    )
    parser.add_argument("--runs", type=int, default=5, help="end-to-end rounds per TP size (default 5)")
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--apply-runs", type=int, default=7, help="cold and warm applies (default 7)")
    parser.add_argument("--hook-runs", type=int, default=1, help="servers with the hook's timing shim per TP size")
    parser.add_argument(
        "--control", action="store_true", help="a second stock server in each round: the noise of a paired difference"
    )
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a new temporary one, removed)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    ns = parser.parse_args(argv)
    if ns.env is None:
        parser.error("the serve venv: --env DIR or FIXPACK_SERVE_ENV (tests/serve/build_env.py DIR builds it)")
    env = ServeEnv(ns.env.absolute())
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "serve" / "build_env.py"), str(env.root)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"bench/serve: build_env.py {env.root} exited {done.returncode}: {done.stdout}{done.stderr}")
    work = ns.workdir or Path(tempfile.mkdtemp(prefix="fixpack-bench-serve-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        model = work / "tiny-qwen3"
        if not model.exists():
            subprocess.run(
                [str(env.python), str(REPO / "tests" / "serve" / "make_model.py"), str(model)],
                check=True, capture_output=True, env={**plain_env(), "HF_HUB_OFFLINE": "1"},
            )  # fmt: skip
        cores = len(os.sched_getaffinity(0))
        result: dict = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{cores} CPU cores, Python {platform.python_version()}",
            "load_at_start": os.getloadavg()[0],
            "profile": build_env.PROFILE,
            "opt_ins": list(build_env.OPT_INS),
        }
        log("the apply, cold and warm")
        result["apply"] = bench_apply(env, work, ns.apply_runs)
        result["tp"] = {}
        for tp in ns.tp:
            log(f"TP {tp}: the import hook")
            hook = bench_hook(env, model, work, tp, ns.hook_runs)
            log(f"TP {tp}: end to end, {ns.runs} rounds")
            e2e = bench_end_to_end(env, model, work, tp, ns.runs, ns.control)
            result["tp"][str(tp)] = {"hook": hook, "end_to_end": e2e}
        result["load_at_end"] = os.getloadavg()[0]
        judge(result)
        text = report(result)
        print(text)
        if ns.json:
            ns.json.write_text(json.dumps(result, indent=1))
    finally:
        if ns.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
