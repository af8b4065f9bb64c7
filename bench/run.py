#!/usr/bin/env python3
"""fixpack's benchmark: each workload beside its floor and its peers, measured in the same run.

    python3 bench/run.py [--repeat 7] [--verify-repeat 1] [--site-from DIR] [--json FILE]

It builds a realistic environment in a scratch folder and times whole processes (start-up
included), as the container runs them: the median of ``--repeat`` runs, interleaved round by
round so that all contenders of a row see the same machine.

Environment, best first:
- ``--site-from DIR``: a copy of an installed site (e.g. one ``fixpack build-site`` made);
- else, with ``FIXPACK_SRC_VLLM_GAUDI`` and ``FIXPACK_SRC_VLLM`` set: a site laid out as
  ``pip install --no-deps --target SITE`` leaves it (packages, dist-info with METADATA and RECORD,
  ``_version.py``, bytecode beside the targets), built from those trees;
- else: a synthetic tree of the same size (file count and bytes per distribution), whose target
  files have the real targets' paths and sizes, and a synthetic cookbook of the same shape as the
  v0.26.0 profile (fixes, files, hunks, lines, created files, opt-ins).

With real trees the cookbook is a copy of this repository's ``fixes/`` and ``profiles/``, locked
against the trees (the repository's own locks are never written); a fix that does not load or lock
is left out, and said so. The scale rows always use synthetic fixes.

Rows: cold apply (``fixes/apply_all.py`` on a pristine site) against the floor (python3 reading
and sha256-hashing the same target files) and ``git apply`` / ``patch -p1`` of the same patches
(``fixpack diff``); warm re-run against the same floor and ``git apply --check -R``; ``fixpack
verify`` against cold apply + revert; scale rows. Peak memory is each process's max RSS, from
one extra untimed run under GNU time (or a minimal launcher), so that the bench's own size stays
out; a process's waited-for children count (verify's proofs). The goals are checked at the end.

Scratch goes to a new temporary folder (``--workdir``; ``--keep`` keeps it); the engine is run
from a snapshot of ``--repo`` taken at the start, so edits made meanwhile do not mix in.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import hashlib
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
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROFILE = "v0.26.0"
RELEASE = "v0.26.0"
GAUDI_COMMIT = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
VLLM_COMMIT = "568afb3a13806beb53bb2e6bd518269357b237c0"
PACKAGES = {"vllm-gaudi": "vllm_gaudi", "vllm": "vllm"}
DIST_INFO_NAME = {"vllm-gaudi": "vllm_gaudi", "vllm": "vllm"}
VERSION_COMMIT = {"vllm-gaudi": "gb059f9c95", "vllm": "gffd46bfab"}  # as the v0.26.0 builds write them

# The v0.26.0 trees, measured (python files, their bytes, folders) for the synthetic stand-in.
TREE_SIZE = {"vllm-gaudi": (127, 1_749_705, 30), "vllm": (2234, 33_153_954, 279)}
# The real targets' sizes in bytes (v0.26.0) and the profile's shape: per fix, per file,
# (path, hunks, lines added, lines removed, creates); measured from fixes/ on 2026-12-02.
TARGET_SIZE = {
    "vllm/tokenizers/detokenizer_utils.py": 10186,
    "vllm/v1/engine/logprobs.py": 12935,
    "vllm/v1/executor/multiproc_executor.py": 43066,
    "vllm_gaudi/envs.py": 4443,
    "vllm_gaudi/ops/hpu_fp8.py": 12567,
    "vllm_gaudi/ops/hpu_rotary_embedding.py": 34331,
    "vllm_gaudi/patches.py": 29965,
    "vllm_gaudi/v1/core/sched/hpu_async_scheduler.py": 8636,
    "vllm_gaudi/v1/worker/hpu_input_batch.py": 38516,
    "vllm_gaudi/v1/worker/hpu_model_runner.py": 398797,
}
MR, IB = "vllm_gaudi/v1/worker/hpu_model_runner.py", "vllm_gaudi/v1/worker/hpu_input_batch.py"
SHAPE = [
    ("prompt-order", False, [(MR, 2, 33, 0, False)]),
    ("sampling-rows-refresh", False, [(IB, 4, 12, 0, False)]),
    ("structured-output-rows", False, [(MR, 4, 7, 4, False)]),
    ("bad-words-index", False, [(IB, 1, 5, 1, False)]),
    ("logitsprocs-rows", False, [(IB, 6, 52, 1, False)]),
    ("async-discard-counter", False, [("vllm_gaudi/v1/core/sched/hpu_async_scheduler.py", 1, 5, 4, False)]),
    ("resumed-prefill-logits", False, [(MR, 1, 12, 12, False)]),
    ("hybrid-decode-pad", False, [(MR, 3, 9, 2, False)]),
    (
        "gdn-prefix-cache",
        True,
        [("vllm_gaudi/v1/worker/hpu_gdn_prefix_cache.py", 1, 191, 0, True), (MR, 6, 19, 1, False)],
    ),
    ("gather-logprobs-int32", False, [("vllm_gaudi/patches.py", 1, 3, 2, False), (MR, 1, 3, 1, False)]),
    ("prompt-logprobs", False, [(MR, 3, 15, 12, False)]),
    (
        "logprobs-decode-guard",
        False,
        [("vllm/tokenizers/detokenizer_utils.py", 1, 11, 0, False), ("vllm/v1/engine/logprobs.py", 1, 4, 0, False)],
    ),
    (
        "fp8-moe-gather",
        True,
        [
            ("vllm_gaudi/envs.py", 2, 16, 0, False),
            ("vllm_gaudi/ops/hpu_fp8.py", 3, 38, 7, False),
            ("vllm_gaudi/ops/hpu_moe_combine.py", 1, 124, 0, True),
        ],
    ),
    ("rope-cpu-cache", False, [("vllm_gaudi/ops/hpu_rotary_embedding.py", 3, 38, 0, False)]),
    ("rank-exception-fatal", False, [("vllm/v1/executor/multiproc_executor.py", 1, 6, 0, False)]),
    ("seeded-sampling", False, [("vllm_gaudi/patches.py", 3, 43, 0, False), (MR, 1, 3, 1, False)]),
]
SCALE_FIXES = (1, 4, 16, 64)
SCALE_SIZES = {"1x": 60_000, "4x": 240_000}  # 1x: about the real targets' mean size
GOALS = {"warm": 2.0, "cold": 3.0, "peak_mib": 100.0, "stacked_growth": 1.5}


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Processes


@dataclass
class Run:
    seconds: float
    peak_kib: int
    rc: int
    out: str
    err: str


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """One whole process: wall time (perf_counter around it) and its peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(
            seconds,
            usage.ru_maxrss,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


GNU_TIME = "/usr/bin/time"
LAUNCHER = (
    "import os,sys\n"
    "pid=os.fork()\n"
    "if pid==0:\n"
    "    os.execvp(sys.argv[2],sys.argv[2:])\n"
    "_,st,ru=os.wait4(pid,0)\n"
    "open(sys.argv[1],'w').write(str(ru.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(st))\n"
)


def peak(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run once for its peak RSS, forked from a small process so that the bench's own RSS stays out.

    (A process's max RSS starts at its parent's at fork-and-exec, so wait4 from the bench would
    report at least the bench's size.) GNU time where installed, else a minimal python -S launcher.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if os.access(GNU_TIME, os.X_OK):
            wrapped = [GNU_TIME, "-q", "-f", "%M", "-o", rss.name, *cmd]
        else:
            wrapped = [sys.executable, "-S", "-c", LAUNCHER, rss.name, *cmd]
        r = run(wrapped, env=env, cwd=cwd)
        text = open(rss.name).read().strip().splitlines()
        r.peak_kib = int(text[-1]) if text and text[-1].isdigit() else 0
        return r


def must(r: Run, what: str, ok: tuple[int, ...] = (0,)) -> Run:
    if r.rc not in ok:
        tail = "\n".join((r.out + r.err).strip().splitlines()[-20:])
        raise SystemExit(f"bench: {what} failed (exit {r.rc}):\n{tail}")
    return r


@dataclass
class Series:
    """Repeated measurements of one contender."""

    name: str
    runs: list[Run] = field(default_factory=list)
    peak_kib: int = 0  # from peak() runs, not the timed ones

    def measure(self, r: Run) -> Run:
        self.peak_kib = max(self.peak_kib, r.peak_kib)
        return r

    def add(self, r: Run) -> Run:
        self.runs.append(r)
        return r

    @property
    def median(self) -> float:
        return statistics.median(r.seconds for r in self.runs) if self.runs else float("nan")

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

    def json(self) -> dict:
        return {
            "median_s": self.median,
            "runs_s": [r.seconds for r in self.runs],
            "peak_rss_mib": self.peak_mib,
            "rc": sorted({r.rc for r in self.runs}),
        }


class Tools:
    def __init__(self, python: str, engine: Path, repo: Path) -> None:
        self.python = python
        self.repo = engine  # where fixpack/ and fixes/apply_all.py are run from (a snapshot)
        self.source = repo  # the checkout: its fixes/ and profiles/ are the cookbook copied
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
        self.base_env.pop("PYTHONPATH", None)

    def env(self, cookbook: Path, module: bool = False) -> dict[str, str]:
        env = dict(self.base_env, FIXPACK_COOKBOOK=str(cookbook))
        if module:
            env["PYTHONPATH"] = str(self.repo)
        return env

    def apply_all(self, site: Path, opt_ins: list[str]) -> list[str]:
        script = str(self.repo / "fixes" / "apply_all.py")
        return [self.python, script, "--profile", PROFILE, *opt_ins, "--site", str(site)]

    def listed(self, cookbook: Path) -> list[str]:
        r = must(run(self.fixpack("list", "--profile", PROFILE, "--json"), env=self.env(cookbook, True)), "list")
        return [f["id"] for f in json.loads(r.out)["fixes"]]

    def fixpack(self, *args: str) -> list[str]:
        return [self.python, "-m", "fixpack", *args]

    def floor(self, files: list[Path]) -> list[str]:
        code = (
            "import hashlib,sys\n"
            "for p in sys.argv[1:]:\n"
            "    with open(p,'rb') as f: hashlib.sha256(f.read()).hexdigest()\n"
        )
        return [self.python, "-c", code, *map(str, files)]


# --------------------------------------------------------------------------------------------
# Trees, sites and cookbooks


def _record_line(rel: str, content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(content)}"


def write_site(site: Path, trees: dict[str, Path], targets: list[str]) -> None:
    """Lay out ``site`` as ``pip install --no-deps --target`` does, from repository-layout trees."""
    site.mkdir(parents=True)
    for dist, tree in trees.items():
        package = PACKAGES[dist]
        shutil.copytree(tree / package, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        version_py = site / package / "_version.py"
        if not version_py.exists():
            version_py.write_text(
                f"__version__ = version = '0.26.0'\n__commit_id__ = commit_id = '{VERSION_COMMIT[dist]}'\n"
            )
        dist_info = site / f"{DIST_INFO_NAME[dist]}-0.26.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {DIST_INFO_NAME[dist]}\nVersion: 0.26.0\n")
        (dist_info / "INSTALLER").write_text("pip\n")
        (dist_info / "top_level.txt").write_text(f"{package}\n")
        url = {"url": tree.resolve().as_uri(), "dir_info": {}}
        (dist_info / "direct_url.json").write_text(json.dumps(url))
        record = []
        for p in sorted((site / package).rglob("*")):
            if p.is_file():
                record.append(_record_line(p.relative_to(site).as_posix(), p.read_bytes()))
        for p in sorted(dist_info.iterdir()):
            record.append(_record_line(p.relative_to(site).as_posix(), p.read_bytes()))
        record.append(f"{dist_info.name}/RECORD,,")
        (dist_info / "RECORD").write_text("\n".join(record) + "\n")
    # pip compiles what it installs; the targets' folders get their bytecode (the rest is never read).
    for folder in sorted({(site / t).parent for t in targets if (site / t).parent.is_dir()}):
        compileall.compile_dir(folder, maxlevels=0, quiet=2)


def synth_block(tag: str, i: int) -> list[str]:
    return [
        f"def f_{tag}_{i}(x, y=None):\n",
        f"    value = compute(x, {i}, key='{tag}-{i}', scale=y or {i % 7 + 1})\n",
        "    return value\n",
        "\n",
        "\n",
    ]


def synth_module(tag: str, size: int) -> str:
    lines = [f'"""Synthetic module {tag}."""\n', "\n", "\n"]
    total, i = sum(map(len, lines)), 0
    while total < size:
        block = synth_block(tag, i)
        lines += block
        total += sum(map(len, block))
        i += 1
    return "".join(lines)


def synth_filler(folder: Path, package: str, count: int, size: int, dirs: int, avoid: set[str]) -> None:
    """``count`` python files of ``size`` bytes in total, spread over ``dirs`` folders."""
    each = max(1, size // max(count, 1))
    body = synth_module("filler", each)
    for i in range(count):
        rel = f"{package}/_synthetic/d{i % dirs:03d}/m{i:05d}.py"
        if rel in avoid:
            continue
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    for d in range(dirs):
        init = folder / f"{package}/_synthetic/d{d:03d}/__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.touch()


def _edit_lines(lines: list[str], tag: str, slot: int, slots: int, hunks: int, added: int, removed: int) -> list[str]:
    """Insert ``added`` lines (and remove about ``removed``) in ``hunks`` places of one region."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")]
    if not starts:
        starts = [len(lines)]
    lo, hi = len(starts) * slot // slots, max(len(starts) * (slot + 1) // slots, len(starts) * slot // slots + 1)
    region = starts[lo:hi] or starts[-1:]
    out = list(lines)
    per_hunk = [added // hunks + (1 if h < added % hunks else 0) for h in range(hunks)]
    rm_blocks = [(removed // hunks + 4) // 5 if removed else 0 for _ in range(hunks)]
    places = sorted({region[(len(region) * (2 * h + 1)) // (2 * hunks)] for h in range(hunks)}, reverse=True)
    for h, at in enumerate(places):
        new = [f"_{tag.replace('-', '_')}_{h}_{k} = {k}\n" for k in range(per_hunk[h])]
        end = at
        for _ in range(rm_blocks[h]):  # whole blocks, so that the result still compiles
            end += 5
        if end > len(out):
            end = at
        out[at:end] = new
    return out


def synth_cookbook(
    root: Path,
    src: dict[str, Path],
    shape: list[tuple[str, bool, list[tuple[str, int, int, int, bool]]]],
    tools: Tools,
) -> None:
    """Write ``shape``'s fixes as patches chained over the pristine ``src`` trees, then lock them."""
    sys.path.insert(0, str(tools.repo))
    from fixpack.core.patch import render

    slots: dict[str, int] = {}
    for _, _, files in shape:
        for path, *_ in files:
            slots[path] = slots.get(path, 0) + 1
    used: dict[str, int] = {}
    state: dict[str, str | None] = {}
    for fid, opt_in, files in shape:
        patch = []
        for path, hunks, added, removed, creates in files:
            dist = "vllm-gaudi" if path.startswith("vllm_gaudi/") else "vllm"
            if path not in state:
                p = src[dist] / path
                state[path] = p.read_text() if p.exists() else None
            before = state[path]
            if creates:
                after = "".join(f"_{fid.replace('-', '_')}_{k} = {k}\n" for k in range(added))
            else:
                assert before is not None, path
                lines = _edit_lines(
                    before.splitlines(keepends=True), fid, used.get(path, 0), slots[path], hunks, added, removed
                )
                after = "".join(lines)
            used[path] = used.get(path, 0) + 1
            patch.append(render(path, None if before is None else before.encode(), after.encode()))
            state[path] = after
        d = root / "fixes" / fid
        d.mkdir(parents=True)
        (d / f"{RELEASE}.patch").write_text("".join(patch))
        (d / "fix.toml").write_text(
            f'id = "{fid}"\ntitle = "Synthetic {fid}"\n'
            f'why = "A synthetic fix of the same shape as the real one, for the benchmark."\n'
            f"opt_in = {str(opt_in).lower()}\n"
            f'[upstream]\nstatus = "pending"\n[proof]\nlevel = "none"\nreason = "synthetic"\n'
            f'[release."{RELEASE}"]\npatch = "{RELEASE}.patch"\n'
        )
    pack = [fid for fid, _, _ in shape]
    opt_ins = [fid for fid, opt, _ in shape if opt]
    write_profile(root, pack, opt_ins)
    lock(root, src, tools)


def write_profile(root: Path, pack: list[str], opt_ins: list[str]) -> None:
    pins = (
        f'[[pin]]\ndist = "vllm-gaudi"\npackage = "vllm_gaudi"\nversion = "0.26.0"\ncommits = ["{GAUDI_COMMIT}"]\n\n'
        f'[[pin]]\ndist = "vllm"\npackage = "vllm"\nversion = "0.26.0"\n'
        f'commits = ["{VLLM_COMMIT}", "ffd46bfab", "f2654939e"]\n'
    )
    (root / "profiles").mkdir(parents=True, exist_ok=True)
    (root / "profiles" / f"{PROFILE}.toml").write_text(
        f'release = "{RELEASE}"\npack = {json.dumps(pack)}\nopt_ins = {json.dumps(opt_ins)}\n\n{pins}'
    )


def lock(cookbook: Path, src: dict[str, Path], tools: Tools) -> Run:
    sources = [a for dist, tree in src.items() for a in ("--source", f"{dist}={tree}")]
    return run(tools.fixpack("lock", "--profile", PROFILE, *sources), env=tools.env(cookbook, module=True))


def synth_trees(root: Path, targets: dict[str, int]) -> dict[str, Path]:
    """Repository-layout trees of the v0.26.0 trees' size; ``targets`` (path -> bytes) at their paths."""
    trees = {}
    for dist, package in PACKAGES.items():
        tree = root / dist
        count, size, dirs = TREE_SIZE[dist]
        mine = {p: s for p, s in targets.items() if p.startswith(package + "/")}
        for rel, bytes_ in mine.items():
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(synth_module(rel.rsplit("/", 1)[-1].removesuffix(".py"), bytes_))
        (tree / package).mkdir(parents=True, exist_ok=True)
        (tree / package / "__init__.py").touch()
        rest = max(count - len(mine) - 1, 0)
        synth_filler(tree, package, rest, max(size - sum(mine.values()), 0), dirs, set(mine))
        trees[dist] = tree
    return trees


def real_cookbook(root: Path, src: dict[str, Path], tools: Tools) -> tuple[list[str], list[str]]:
    """Copy the repository's cookbook, lock it against ``src``; leave out fixes that fail."""
    # All of fixes/: the proofs import their shared harnesses from fixes/_support.
    shutil.copytree(tools.source / "fixes", root / "fixes", ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    shutil.copytree(tools.source / "profiles", root / "profiles")
    dropped: list[str] = []
    for _ in range(40):
        listed = run(tools.fixpack("list", "--profile", PROFILE, "--json"), env=tools.env(root, module=True))
        problem = listed.err if listed.rc else ""
        if not problem:
            locked = lock(root, src, tools)
            if locked.rc == 0:
                fixes = json.loads(listed.out)["fixes"]
                return [f["id"] for f in fixes], dropped
            problem = locked.err
        fid = _culprit(problem, root)
        if fid is None:
            raise SystemExit(f"bench: cannot prepare the cookbook copy:\n{problem.strip()}")
        reason = problem.strip().splitlines()[0] if problem.strip() else "?"
        dropped.append(f"{fid}: {reason}")
        log(f"leaving out {fid}: {reason}")
        shutil.rmtree(root / "fixes" / fid, ignore_errors=True)
        prof = root / "profiles" / f"{PROFILE}.toml"
        prof.write_text(re.sub(rf'"{re.escape(fid)}"\s*,?', "", prof.read_text()))
    raise SystemExit("bench: too many fixes left out; giving up")


def _culprit(message: str, root: Path) -> str | None:
    for pattern in (
        rf"{re.escape(str(root / 'fixes'))}/([a-z0-9][a-z0-9-]*)/",
        r"unknown fix '([a-z0-9][a-z0-9-]*)'",
        r"fix '([a-z0-9][a-z0-9-]*)'",
        r"error: ([a-z0-9][a-z0-9-]*): ",
    ):
        m = re.search(pattern, message)
        if m:
            return m.group(1)
    return None


# --------------------------------------------------------------------------------------------
# A prepared environment: a site, a cookbook, its targets, and a way back to pristine


@dataclass
class Bed:
    site: Path
    cookbook: Path
    src: dict[str, Path]
    opt_ins: list[str]
    targets: list[str]  # every path the plan touches
    pristine: dict[str, bytes | None] = field(default_factory=dict)
    pycs: dict[Path, bytes] = field(default_factory=dict)
    patch_file: Path | None = None

    def file(self, rel: str) -> Path:
        return self.site / rel

    def snapshot(self) -> None:
        for rel in self.targets:
            p = self.file(rel)
            self.pristine[rel] = p.read_bytes() if p.exists() else None
            cache = p.parent / "__pycache__"
            if cache.is_dir():
                for pyc in cache.glob(f"{p.stem}.*.pyc"):
                    self.pycs[pyc] = pyc.read_bytes()

    def reset(self) -> None:
        """Back to the pristine site: targets, their bytecode, no state folder, no patch leftovers."""
        shutil.rmtree(self.site / ".fixpack", ignore_errors=True)
        for rel, content in self.pristine.items():
            p = self.file(rel)
            for leftover in (p.with_name(p.name + ".orig"), p.with_name(p.name + ".rej")):
                leftover.unlink(missing_ok=True)
            if content is None:
                p.unlink(missing_ok=True)
            elif not p.exists() or p.read_bytes() != content:
                p.write_bytes(content)
        for pyc, content in self.pycs.items():
            if not pyc.exists():
                pyc.write_bytes(content)

    def existing(self) -> list[Path]:
        return [self.file(t) for t in self.targets if self.file(t).exists()]

    def hashes(self) -> dict[str, str | None]:
        out = {}
        for t in self.targets:
            p = self.file(t)
            out[t] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
        return out


def plan_targets(tools: Tools, cookbook: Path, opt_ins: list[str], work: Path) -> tuple[list[str], Path]:
    """The paths the plan touches and its patch (``fixpack diff``), as git apply and patch get it."""
    diff = tools.fixpack("diff", "--profile", PROFILE, *opt_ins, "--format", "unified")
    r = must(run(diff, env=tools.env(cookbook, True)), "fixpack diff")
    patch = work / "plan.patch"
    patch.write_text(r.out)
    paths = list(dict.fromkeys(m.group(1) for m in re.finditer(r"^diff --git a/(\S+) b/", r.out, re.M)))
    return paths, patch


def opt_ins_of(cookbook: Path) -> list[str]:
    text = (cookbook / "profiles" / f"{PROFILE}.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return list(tomllib.loads(text).get("opt_ins", []))


# --------------------------------------------------------------------------------------------
# Workloads


def bench_main(bed: Bed, tools: Tools, repeat: int) -> dict[str, Series]:
    """Cold apply, warm re-run and revert with their floors and peers, interleaved per round."""
    s = {
        name: Series(name)
        for name in (
            "cold",
            "cold_floor",
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
    }
    env, menv = tools.env(bed.cookbook), tools.env(bed.cookbook, module=True)
    cwd = bed.site.parent
    apply_cmd = tools.apply_all(bed.site, bed.opt_ins)
    assert bed.patch_file is not None
    git_apply = ["git", "apply", "-p1", str(bed.patch_file)]
    git_check = ["git", "apply", "--check", "-R", "-p1", str(bed.patch_file)]
    patch_apply = ["patch", "-p1", "-s", "-N", "-i", str(bed.patch_file)]
    patch_check = ["patch", "-p1", "-s", "-R", "--dry-run", "-i", str(bed.patch_file)]
    revert_cmd = tools.fixpack("revert", "--site", str(bed.site))

    # Warm-up round (not timed): peak RSS of each contender, and the peers must leave the same bytes.
    bed.reset()
    s["cold_floor"].measure(must(peak(tools.floor(bed.existing()), cwd=cwd), "floor"))
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
        if bed.hashes() != {t: (None if c is None else hashlib.sha256(c).hexdigest()) for t, c in bed.pristine.items()}:
            log("warning: revert did not give back the pristine files")
    bed.reset()
    return s


def imports_on(cmd: list[str], env: dict[str, str], cwd: Path) -> dict:
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


def bench_verify(bed: Bed, tools: Tools, repeat: int) -> Series:
    s = Series("verify")
    sources = [a for dist, tree in bed.src.items() for a in ("--source", f"{dist}={tree}")]
    cmd = tools.fixpack("verify", "--profile", PROFILE, *sources)
    for i in range(repeat):
        log(f"verify: run {i + 1}/{repeat} (slow)")
        r = s.add(peak(cmd, env=tools.env(bed.cookbook, module=True), cwd=bed.site.parent))
        s.measure(r)
        if r.rc != 0:
            tail = [ln for ln in r.out.splitlines() if ln.startswith(("FAIL", "fixpack verify"))]
            log(f"verify exit {r.rc}: " + "; ".join(tail[-6:]))
    return s


@dataclass
class ScaleRow:
    fixes: int
    size: str
    shape: str  # spread: one file per fix; stacked: every fix on one file
    files: int
    changes: int
    cold: Series
    cold_floor: Series
    warm: Series
    warm_floor: Series


def scale_shape(n: int, shape: str) -> list[tuple[str, bool, list[tuple[str, int, int, int, bool]]]]:
    out = []
    for i in range(n):
        path = f"vllm_gaudi/bench_scale/target_{i if shape == 'spread' else 0:03d}.py"
        out.append((f"scale-{i:03d}", False, [(path, 2, 16, 0, False)]))
    return out


def bench_scale(work: Path, tools: Tools, repeat: int) -> list[ScaleRow]:
    rows = []
    for size_name, size in SCALE_SIZES.items():
        for shape in ("spread", "stacked"):
            for n in SCALE_FIXES:
                base = work / f"scale-{size_name}-{shape}-{n}"
                spec = scale_shape(n, shape)
                files = sorted({p for _, _, fs in spec for p, *_ in fs})
                src = {}
                for dist, package in PACKAGES.items():
                    tree = base / "src" / dist
                    (tree / package).mkdir(parents=True)
                    (tree / package / "__init__.py").touch()
                    src[dist] = tree
                for rel in files:
                    (src["vllm-gaudi"] / rel).parent.mkdir(parents=True, exist_ok=True)
                    (src["vllm-gaudi"] / rel).write_text(synth_module(rel.rsplit("/", 1)[-1][:-3], size))
                cookbook = base / "cookbook"
                synth_cookbook(cookbook, src, spec, tools)
                site = base / "site"
                write_site(site, src, files)
                bed = Bed(site, cookbook, src, [], files)
                bed.snapshot()
                env = tools.env(cookbook)
                cmd = tools.apply_all(site, [])
                row = ScaleRow(
                    n, size_name, shape, len(files), n, Series("cold"), Series("floor"), Series("warm"), Series("floor")
                )
                bed.reset()
                row.cold.measure(must(peak(cmd, env=env, cwd=base), f"scale {size_name} {shape} {n}: cold apply"))
                row.warm.measure(must(peak(cmd, env=env, cwd=base), f"scale {size_name} {shape} {n}: warm re-run"))
                for _ in range(repeat):
                    bed.reset()
                    row.cold_floor.add(must(run(tools.floor(bed.existing()), cwd=base), "floor"))
                    row.cold.add(must(run(cmd, env=env, cwd=base), "scale cold apply"))
                    row.warm_floor.add(must(run(tools.floor(bed.existing()), cwd=base), "floor"))
                    row.warm.add(must(run(cmd, env=env, cwd=base), "scale warm re-run"))
                log(
                    f"scale {size_name} {shape:<7} {n:>2} fixes: cold {row.cold.median * 1000:.0f} ms, "
                    f"warm {row.warm.median * 1000:.0f} ms"
                )
                rows.append(row)
                shutil.rmtree(base)
    return rows


# --------------------------------------------------------------------------------------------
# Report


def ms(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "-"


def report(ctx: dict, s: dict[str, Series], verify: Series | None, scale: list[ScaleRow], imports: dict) -> dict:
    lines: list[str] = []
    p = lines.append
    p(f"fixpack bench, {ctx['when']} on {ctx['host']}: {ctx['python']}, {ctx['cpus']} CPUs, load {ctx['load']}")
    p(f"environment: {ctx['env']}")
    p(f"profile {PROFILE}: {ctx['profile']}")
    p(f"medians of {ctx['repeat']} whole-process runs (verify: {ctx['verify_repeat']}), start-up included")
    p("")
    p("| workload | fixpack | floor | fixpack/floor | peers (fixpack/peer) | peak RSS |")
    p("|---|---|---|---|---|---|")
    cold, warm, revert = s["cold"], s["warm"], s["revert"]
    p(
        f"| cold apply, full {PROFILE} + opt-ins | {ms(cold.median)} | {ms(s['cold_floor'].median)} "
        f"| {ratio(cold.median, s['cold_floor'].median)} "
        f"| git apply {ms(s['git_apply'].median)} ({ratio(cold.median, s['git_apply'].median)}); "
        f"patch -p1 {ms(s['patch'].median)} ({ratio(cold.median, s['patch'].median)}) "
        f"| {cold.peak_mib:.0f} MiB (floor {s['cold_floor'].peak_mib:.0f}) |"
    )
    p(
        f"| warm re-run (all applied) | {ms(warm.median)} | {ms(s['warm_floor'].median)} "
        f"| {ratio(warm.median, s['warm_floor'].median)} "
        f"| git apply --check -R {ms(s['git_check_r'].median)} ({ratio(warm.median, s['git_check_r'].median)}); "
        f"patch -R --dry-run {ms(s['patch_check_r'].median)} ({ratio(warm.median, s['patch_check_r'].median)}) "
        f"| {warm.peak_mib:.0f} MiB |"
    )
    p(f"| revert (all) | {ms(revert.median)} | | | | {revert.peak_mib:.0f} MiB |")
    startup = (
        f"(interpreter start-up in these runs: python -c pass {ms(s['py_start'].median)}, "
        f"python -I -S -c pass {ms(s['py_start_bare'].median)}; the floor includes the first)"
    )
    if verify is not None and verify.runs:
        vfloor = cold.median + revert.median
        rcs = ",".join(str(r.rc) for r in verify.runs)
        p(
            f"| verify, whole profile (exit {rcs}) | {ms(verify.median)} | {ms(vfloor)} (cold apply + revert) "
            f"| {ratio(verify.median, vfloor)} | none | {verify.peak_mib:.0f} MiB (proofs included) |"
        )
    p("")
    p(startup)
    p("")
    if scale:
        p("scale (synthetic fixes of 1 change, 2 hunks, +16 lines each; spread: a file per fix, stacked: one file)")
        p("")
        p("| fixes | target size | shape | files | changes | cold | cold/floor | warm | warm/floor | peak RSS |")
        p("|---|---|---|---|---|---|---|---|---|---|")
        for r in scale:
            p(
                f"| {r.fixes} | {r.size} ({SCALE_SIZES[r.size] // 1000} KB) | {r.shape} | {r.files} | {r.changes} "
                f"| {ms(r.cold.median)} | {ratio(r.cold.median, r.cold_floor.median)} "
                f"| {ms(r.warm.median)} | {ratio(r.warm.median, r.warm_floor.median)} "
                f"| {max(r.cold.peak_mib, r.warm.peak_mib):.0f} MiB |"
            )
        p("")
    loaded = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in imports["cold"]["loaded"].items())
    p(f"imports, cold apply: {imports['cold']['modules']} modules, {ms(imports['cold']['import_s'])}; {loaded}")
    loaded = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in imports["warm"]["loaded"].items())
    p(f"imports, warm re-run: {imports['warm']['modules']} modules, {ms(imports['warm']['import_s'])}; {loaded}")
    p("")

    goals = []

    def goal(name: str, met: bool, figure: str) -> None:
        goals.append({"goal": name, "met": met, "figure": figure})
        p(f"  [{'MET   ' if met else 'MISSED'}] {name}: {figure}")

    p("goals")
    wr = warm.median / s["warm_floor"].median
    goal(f"warm re-run within {GOALS['warm']:g}x of the floor", wr <= GOALS["warm"], f"{wr:.2f}x")
    cr = cold.median / s["cold_floor"].median
    goal(f"cold apply within {GOALS['cold']:g}x of the floor", cr <= GOALS["cold"], f"{cr:.2f}x")
    goal(
        "no libcst on the pinned path",
        not imports["cold"]["loaded"]["libcst"] and not imports["warm"]["loaded"]["libcst"],
        f"libcst imported: cold {'yes' if imports['cold']['loaded']['libcst'] else 'no'}, "
        f"warm {'yes' if imports['warm']['loaded']['libcst'] else 'no'}",
    )
    if scale:
        parts, ok = [], True
        for size in SCALE_SIZES:
            for kind in ("cold", "warm"):
                by = {(r.shape, r.fixes): getattr(r, kind).median for r in scale if r.size == size}
                top = max(SCALE_FIXES)
                st = by[("stacked", top)] / by[("stacked", 1)]
                sp = by[("spread", top)] / by[("spread", 1)]
                ok &= st <= GOALS["stacked_growth"]
                per_change = (by[("stacked", top)] - by[("stacked", 1)]) / (top - 1) * 1000
                per_file = (by[("spread", top)] - by[("spread", 1)]) / (top - 1) * 1000
                parts.append(
                    f"{size} {kind}: {top} changes on 1 file {st:.2f}x of 1 ({per_change:.1f} ms/change), "
                    f"{top} files {sp:.2f}x ({per_file:.1f} ms/file)"
                )
        goal(
            f"cost grows with distinct files, not changes ({max(SCALE_FIXES)} stacked changes within "
            f"{GOALS['stacked_growth']:g}x of 1)",
            ok,
            "; ".join(parts),
        )
    peaks = [cold.peak_mib, warm.peak_mib, revert.peak_mib] + [max(r.cold.peak_mib, r.warm.peak_mib) for r in scale]
    goal(
        f"peak memory under {GOALS['peak_mib']:g} MiB (apply, re-run, revert)",
        max(peaks) < GOALS["peak_mib"],
        f"{max(peaks):.0f} MiB",
    )
    print("\n".join(lines))
    return {
        "context": ctx,
        "main": {k: v.json() for k, v in s.items()},
        "verify": verify.json() if verify is not None else None,
        "scale": [
            {
                "fixes": r.fixes,
                "size": r.size,
                "shape": r.shape,
                "files": r.files,
                "changes": r.changes,
                "cold": r.cold.json(),
                "cold_floor": r.cold_floor.json(),
                "warm": r.warm.json(),
                "warm_floor": r.warm_floor.json(),
            }
            for r in scale
        ],
        "imports": imports,
        "goals": goals,
    }


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=7, help="runs per contender (median; default 7)")
    ap.add_argument("--verify-repeat", type=int, default=1, help="fixpack verify runs (about 100 s each; 0: skip)")
    ap.add_argument("--scale-repeat", type=int, help="runs per scale row (default: --repeat)")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale rows")
    ap.add_argument("--site-from", type=Path, metavar="DIR", help="copy this pristine installed site (never written)")
    ap.add_argument("--synthetic", action="store_true", help="synthetic trees even when FIXPACK_SRC_* are set")
    ap.add_argument("--repo", type=Path, default=REPO, help="the fixpack checkout to bench (default: this one)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for fixpack and the floor (default: this)")
    ap.add_argument("--workdir", type=Path, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    if args.site_from and (
        args.synthetic or not (os.environ.get("FIXPACK_SRC_VLLM_GAUDI") and os.environ.get("FIXPACK_SRC_VLLM"))
    ):
        ap.error(
            "--site-from needs the real fixes: set FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM, without --synthetic"
        )
    for tool in ("git", "patch"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} is not installed (a peer)")
    repo = args.repo.resolve()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fixpack-bench-", dir=args.workdir))
    t_start = time.perf_counter()
    # A snapshot of the engine, so that edits made to the checkout while the bench runs do not mix in.
    engine = work / "engine"
    shutil.copytree(repo / "fixpack", engine / "fixpack", ignore=shutil.ignore_patterns("__pycache__"))
    (engine / "fixes").mkdir()
    shutil.copy2(repo / "fixes" / "apply_all.py", engine / "fixes" / "apply_all.py")
    tools = Tools(args.python, engine, repo)
    try:
        return _bench(args, tools, work, t_start)
    finally:
        if args.keep:
            log(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, tools: Tools, work: Path, t_start: float) -> int:
    gaudi, vllm = os.environ.get("FIXPACK_SRC_VLLM_GAUDI"), os.environ.get("FIXPACK_SRC_VLLM")
    real = bool(gaudi and vllm) and not args.synthetic
    cookbook = work / "cookbook"
    dropped: list[str] = []
    if real:
        src = {"vllm-gaudi": Path(gaudi).resolve(), "vllm": Path(vllm).resolve()}  # type: ignore[arg-type]
        log("copying and locking the cookbook against the real trees")
        _, dropped = real_cookbook(cookbook, src, tools)
        what = f"real trees (vllm-gaudi={src['vllm-gaudi']}, vllm={src['vllm']}), this repo's fixes"
    else:
        log("writing synthetic trees of the v0.26.0 trees' size and a cookbook of the profile's shape")
        src = synth_trees(work / "src", TARGET_SIZE)
        synth_cookbook(cookbook, src, SHAPE, tools)
        what = "synthetic trees of the v0.26.0 size (FIXPACK_SRC_VLLM_GAUDI/FIXPACK_SRC_VLLM unset), synthetic fixes"
    opt_ins = opt_ins_of(cookbook)
    targets, patch_file = plan_targets(tools, cookbook, opt_ins, work)
    site = work / "site"
    if args.site_from:
        log(f"copying {args.site_from}")
        shutil.copytree(args.site_from, site, symlinks=True)
        where = f"a copy of {args.site_from}"
    else:
        log("laying out the site as pip install --target does")
        write_site(site, src, targets)
        where = "pip --target layout built from the trees"
    nfiles = sum(1 for x in site.rglob("*") if x.is_file())
    nbytes = sum(x.stat().st_size for x in site.rglob("*") if x.is_file())
    bed = Bed(site, cookbook, src, opt_ins, targets, patch_file=patch_file)
    bed.snapshot()
    created = sum(1 for t in targets if bed.pristine[t] is None)
    tbytes = sum(len(c) for c in bed.pristine.values() if c)
    changes = len(re.findall(r"^diff --git ", patch_file.read_text(), re.M))
    hunks = len(re.findall(r"^@@ ", patch_file.read_text(), re.M))
    n_fixes = len(tools.listed(cookbook))
    ctx = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": platform.node(),
        "python": f"Python {platform.python_version()} ({args.python})",
        "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "env": f"{what}; site: {where}, {nfiles} files, {nbytes / 2**20:.0f} MiB",
        "profile": (
            f"{n_fixes} fixes (opt-ins named: {', '.join(opt_ins) or 'none'}), {changes} changes, {hunks} hunks, "
            f"{len(targets)} files ({created} created), {tbytes / 1000:.0f} KB of targets"
            + (f"; left out: {'; '.join(dropped)}" if dropped else "")
        ),
        "repeat": args.repeat,
        "verify_repeat": args.verify_repeat,
        "real": real,
    }
    s = bench_main(bed, tools, args.repeat)
    bed.reset()
    imports = {"cold": imports_on(tools.apply_all(site, opt_ins), tools.env(cookbook), work)}
    imports["warm"] = imports_on(tools.apply_all(site, opt_ins), tools.env(cookbook), work)
    must(run(tools.fixpack("revert", "--site", str(site)), env=tools.env(cookbook, True)), "revert")
    bed.reset()
    verify = bench_verify(bed, tools, args.verify_repeat) if args.verify_repeat > 0 else None
    scale = [] if args.no_scale else bench_scale(work, tools, args.scale_repeat or args.repeat)
    ctx["bench_s"] = round(time.perf_counter() - t_start, 1)
    data = report(ctx, s, verify, scale, imports)
    print(f"\n(bench took {ctx['bench_s']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
