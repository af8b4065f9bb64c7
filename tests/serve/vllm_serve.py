"""vLLM's side of the serve harness: ``vllm_server`` builds a ``server.Server`` of ``vllm serve``
from an environment, its arguments and what fixpack does first (``Pack``: in place, an overlay, a
profile or a recipe); two nodes of one deployment (``two_nodes``); a vLLM process's environment; a
copy of the serve venv to apply in place to; the runtime check's lines that every process logs. The
serve tier's tests and the bench build their servers here, not by hand."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import build_env
from build_env import ServeEnv
from server import POLL, PORT, Server, free_port

REPO = build_env.REPO


CHECK_LINE = re.compile(
    r"fixpack: profile (?P<profile>\S+), fix set (?P<digest>[0-9a-f]{16}), (?P<count>\d+) fixes "
    r"\((?P<fixes>[^)]*)\), mode (?P<mode>.+?), pid (?P<pid>\d+), \d+ files checked"
)


# the line names its own pid: workers share one stdout, and another worker's line can come between
# vLLM's "(Worker pid=N)" prefix and the message it belongs to
AGREE_LINE = re.compile(
    r"fixpack: ranks (?P<ranks>\S+) agree on fix set (?P<digest>[0-9a-f]{16}) \(\d+ fixes\) "
    r"in [\d.]+ ms, rank (?P<rank>\d+), pid (?P<pid>\d+)"
)


# What a documented log line leaves open: "..." any text, a pid or rank given as N, R or P, a time,
# and the page's overlay folder (the test's own is put in its place)
_OPEN = re.compile(r"(\.\.\.|(?:pid|rank) [NRP]\b|in [\d.]+ ms|/tmp/fixpack-overlay)")


def documented_lines(page: Path, overlay: Path) -> list[re.Pattern[str]]:
    """The fixpack log lines a docs page shows (its ``text`` blocks that are one line starting
    "fixpack: "), each a pattern a real server's line matches: what the line leaves open (``_OPEN``)
    read as such, all else as shown."""

    def part(piece: str) -> str:
        if piece == "...":
            return ".*"
        if piece == "/tmp/fixpack-overlay":
            return re.escape(str(overlay))
        if _OPEN.fullmatch(piece):
            return re.escape(piece.split()[0]) + (r" [\d.]+ ms" if piece.startswith("in ") else r" \d+")
        return re.escape(piece)

    shown = re.findall(r"```text\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S)
    lines = [b for b in shown if b.startswith("fixpack: ") and "\n" not in b]
    return [re.compile("".join(part(piece) for piece in _OPEN.split(line))) for line in lines]


ROLE = re.compile(r"^\((?P<role>APIServer|EngineCore\w*|Worker\w*) pid=(?P<pid>\d+)\)", re.MULTILINE)


def vllm_environ(bin_dir: Path, tp: int, bind: str | None = None) -> dict[str, str]:
    """A vLLM process's environment: the venv's bin first, fixpack's plugin only, CPU settings
    (``bind``: the node's cores, one list per local rank)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FIXPACK_", "VLLM_"))
        and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        VLLM_PLUGINS=build_env.PLUGIN,  # vllm-gaudi's plugins import habana_frameworks
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    if bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    elif tp == 2:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"  # else "Not enough allowed NUMA nodes"
    return env


def serve_args(model: Path, tp: int = 1) -> list[str]:
    """``serve MODEL`` for the tiny model on this host's loopback, on the server's own port."""
    return [
        "serve",
        str(model),
        "--tensor-parallel-size",
        str(tp),
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--host",
        "127.0.0.1",
        "--port",
        PORT,
    ]


def node_args(model: Path, master_port: int, rank: int) -> list[str]:
    """``serve`` arguments for node ``rank`` of a TP 2 deployment over two nodes on this host (vLLM's
    multi-node multiprocessing): node 0 serves, node 1 is headless."""
    args = [
        "serve",
        str(model),
        "--tensor-parallel-size",
        "2",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(master_port),
    ]
    return args + (["--host", "127.0.0.1", "--port", PORT] if rank == 0 else ["--headless"])


@dataclass(frozen=True)
class Pack:
    """What fixpack does before ``vllm serve``, through the entry point (``apply_all.py ... --exec``):
    in place on the environment's site, or into ``overlay``; a ``profile`` with its ``opt_ins``, or
    a ``recipe`` by its slug."""

    overlay: Path | None = None
    profile: str = build_env.PROFILE
    opt_ins: tuple[str, ...] = build_env.OPT_INS
    recipe: str | None = None

    def argv(self, python: Path, site: Path) -> list[str]:
        """The entry point's command line up to ``--exec``."""
        chosen = ["--recipe", self.recipe] if self.recipe else ["--profile", self.profile, *self.opt_ins]
        where = ["--overlay", str(self.overlay)] if self.overlay is not None else []
        return [str(python), str(REPO / "fixes" / "apply_all.py"), *chosen, "--site", str(site), *where]


def entry_point(
    python: Path,
    site: Path,
    *extra: str,
    opt_ins: tuple[str, ...] = build_env.OPT_INS,
    profile: str = build_env.PROFILE,
) -> list[str]:
    """The entry point alone (no server): ``apply_all.py --profile ... --site SITE EXTRA``."""
    return [*Pack(profile=profile, opt_ins=opt_ins).argv(python, site), *extra]


def vllm_server(
    env: ServeEnv,
    args: list[str],
    log: Path,
    name: str,
    *,
    pack: Pack | None = None,
    tp: int = 1,
    bind: str | None = None,
    environ: Mapping[str, str] = {},
    poll: float = POLL,
) -> Server:
    """``vllm ARGS`` of ``env`` (``args`` from ``serve_args``, ``node_args`` or the tiny recipe), after
    ``pack`` if one is given, else stock; its process environment ``vllm_environ``'s with ``environ``
    over it."""
    vllm = [*pack.argv(env.python, env.site), "--exec", "vllm"] if pack is not None else [str(env.bin / "vllm")]
    return Server([*vllm, *args], env={**vllm_environ(env.bin, tp, bind), **environ}, log=log, name=name, poll=poll)


def stock_server(serve_env: ServeEnv, model: Path, tp: int, log: Path, name: str) -> Server:
    """``vllm serve`` of the environment as built, without fixpack."""
    return vllm_server(serve_env, serve_args(model, tp), log, name, tp=tp)


def two_nodes(
    env: ServeEnv,
    model: Path,
    logs: Path,
    names: tuple[str, str],
    packs: tuple[Pack | None, Pack | None],
    environ: Mapping[str, str] = {},
) -> tuple[Server, Server]:
    """Nodes 0 and 1 of a TP 2 deployment on this host, one local rank each, each bound to a core of
    its own: node 0 serves, node 1 is headless; started by the caller, together."""
    master = free_port()
    node0, node1 = (
        vllm_server(
            env,
            node_args(model, master, rank),
            logs / f"node{rank}.log",
            names[rank],
            pack=packs[rank],
            tp=2,
            bind=str(rank),
            environ=environ,
        )
        for rank in (0, 1)
    )
    return node0, node1


def fix_set(python: Path, site: Path, *extra: str) -> dict:
    """``fixpack status --site SITE [--overlay DIR] --json``'s fix set, under the serve env's interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [str(python), "-m", "fixpack", "status", "--site", str(site), *extra, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["fix_set"], status["notes"]
    return status["fix_set"]


def assert_checked_everywhere(
    server: Server, tree: set[int], fix_set: dict, mode: str, workers: int, profile: str = build_env.PROFILE
) -> None:
    """One runtime check line per vLLM process (API server, engine core, each worker), each with its
    own pid and the status's digest; with more than one worker, each logs the ranks' agreement."""
    log = server.text()
    roles: dict[str, set[int]] = {}
    for m in ROLE.finditer(log):
        role = "worker" if m["role"].startswith("Worker") else m["role"].split("_")[0]
        roles.setdefault(role, set()).add(int(m["pid"]))
    assert roles.get("APIServer") == {server.pid}, roles  # --exec: the entry point's pid is the API server's
    assert len(roles.get("EngineCore", ())) == 1, roles
    assert len(roles.get("worker", ())) == workers, roles
    processes = roles["APIServer"] | roles["EngineCore"] | roles["worker"]
    assert processes <= tree, f"{sorted(processes)} not all in the server's process tree {sorted(tree)}"

    lines = [m for m in CHECK_LINE.finditer(log)]
    assert sorted(int(m["pid"]) for m in lines) == sorted(processes), (
        f"runtime check lines from pids {[m['pid'] for m in lines]}, vLLM processes {roles}"
    )
    for m in lines:
        assert m["profile"] == profile, m[0]
        assert m["digest"] == fix_set["digest"], m[0]
        assert m["fixes"].split(", ") == fix_set["fixes"] and int(m["count"]) == len(fix_set["fixes"]), m[0]
        assert m["mode"] == mode, m[0]

    agreed = list(AGREE_LINE.finditer(log))
    if workers > 1:
        assert sorted(int(m["pid"]) for m in agreed) == sorted(roles["worker"]), [m[0] for m in agreed]
        assert sorted(int(m["rank"]) for m in agreed) == list(range(workers)), [m[0] for m in agreed]
        for m in agreed:
            assert m["ranks"] == f"0-{workers - 1}" and m["digest"] == fix_set["digest"], m[0]
    else:
        assert not agreed, "one rank has nothing to agree with"


# fixpack's own log lines (the runtime check's, the agreement's, the overlay hook's), never a path
# that happens to hold the word (CI's work folder is /tmp/fixpack-ci.XXXXXX)
FIXPACK_LINE = re.compile(r"(?:^|[\]\s])fixpack(?: overlay)?: ")


def assert_no_fixpack(server: Server) -> None:
    lines = [line for line in server.text().splitlines() if FIXPACK_LINE.search(line)]
    assert not lines, f"the server without fixpack logged: {lines[:3]}"


GAUDI = ("vllm_gaudi", "vllm_gaudi-0.26.0.dist-info")  # vllm-gaudi as the environment installs it


def copy_env(env: ServeEnv, dest: Path, gaudi: bool = True) -> ServeEnv:
    """A copy of the environment to apply in place to: hard links (cp -al) for what an apply never
    writes, real copies of the packages and their dist-info (what it writes; it replaces files by
    renaming, so even a link would leave the original alone), and ``bin/vllm`` pointing at the copy's
    interpreter. ``gaudi=False``: without vllm-gaudi, as vLLM's own builds are installed."""
    subprocess.run(["cp", "-al", str(env.root), str(dest)], check=True)
    copy = ServeEnv(dest)
    for name in GAUDI:
        shutil.rmtree(copy.site / name)
    for name in ("vllm", f"vllm-{build_env.RELABELLED_VERSION}.dist-info", *(GAUDI if gaudi else ())):
        shutil.rmtree(copy.site / name, ignore_errors=True)
        shutil.copytree(env.site / name, copy.site / name, symlinks=True)
    script = copy.bin / "vllm"
    text = script.read_text().replace(f"#!{env.python}\n", f"#!{copy.python}\n", 1)
    assert text.startswith(f"#!{copy.python}\n"), text[:200]
    script.unlink()
    script.write_text(text)
    script.chmod(0o755)
    (copy.root / build_env.STAMP).unlink()  # not the environment the builder checked
    return copy
