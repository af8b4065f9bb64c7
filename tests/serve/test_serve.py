"""fixpack inside a real ``vllm serve`` (vLLM 0.26.0's CPU build, vllm-gaudi v0.26.0 beside it).

Each scenario starts the server the way a container would, through the entry point
(``fixes/apply_all.py ... --exec vllm serve ...``, under the serve environment's interpreter), and
checks, from the server's own log, that the runtime check ran in every vLLM process (the API
server, the engine core, each worker) with that process's pid and the fix set's digest that
``fixpack status`` reports, that the workers agreed on it (TP 2), and that the server answers
``/v1/completions`` and ``/v1/chat/completions`` with the same greedy tokens and logprobs as the
same server started without fixpack. One server runs at a time; each is bounded in time and
stopped by its process group; a failure prints the tail of each server's log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import build_env
from build_env import ServeEnv
from server import Server, free_port, logs_on_failure

REPO = build_env.REPO
LOGPROB_TOLERANCE = 1e-4
MAX_TOKENS = 16
TOP = 5

CHECK_LINE = re.compile(
    r"fixpack: profile (?P<profile>\S+), fix set (?P<digest>[0-9a-f]{16}), (?P<count>\d+) fixes "
    r"\((?P<fixes>[^)]*)\), mode (?P<mode>.+?), pid (?P<pid>\d+), \d+ files checked"
)
AGREE_LINE = re.compile(
    r"^\((?P<role>Worker\w*) pid=(?P<pid>\d+)\) .*fixpack: ranks (?P<ranks>\S+) agree on fix set "
    r"(?P<digest>[0-9a-f]{16})",
    re.MULTILINE,
)
ROLE = re.compile(r"^\((?P<role>APIServer|EngineCore\w*|Worker\w*) pid=(?P<pid>\d+)\)", re.MULTILINE)


def vllm_environ(bin_dir: Path, tp: int) -> dict[str, str]:
    """A vLLM process's environment: the venv's bin first, fixpack's plugin only, CPU settings."""
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
    if tp == 2:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"  # else "Not enough allowed NUMA nodes"
    return env


def serve_args(model: Path, port: int, tp: int) -> list[str]:
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
        str(port),
    ]


def entry_point(python: Path, site: Path, *extra: str) -> list[str]:
    return [
        str(python),
        str(REPO / "fixes" / "apply_all.py"),
        "--profile",
        build_env.PROFILE,
        *build_env.OPT_INS,
        "--site",
        str(site),
        *extra,
    ]


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


# --- what a server answers -----------------------------------------------------------------------


def ask(server: Server, model: Path) -> dict:
    """Greedy answers with logprobs, token ids (not strings) compared: /v1/models, /v1/completions
    (two prompts in one request) and /v1/chat/completions."""
    models = [m["id"] for m in server.get("/v1/models")["data"]]
    assert models == [str(model)], models
    completion = server.post(
        "/v1/completions",
        {
            "model": str(model),
            "prompt": ["The model server answers the request", "Hello world, the tiny cat"],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "logprobs": TOP,
            "return_tokens_as_token_ids": True,
        },
    )
    chat = server.post(
        "/v1/chat/completions",
        {
            "model": str(model),
            "messages": [{"role": "user", "content": "Which fix did the site apply?"}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": TOP,
            "return_tokens_as_token_ids": True,
        },
    )
    answers = {}
    for choice in completion["choices"]:
        lp = choice["logprobs"]
        answers[f"completion {choice['index']}"] = {
            "text": choice["text"],
            "tokens": [_token_id(t) for t in lp["tokens"]],
            "logprobs": lp["token_logprobs"],
            "top": [{_token_id(t): v for t, v in top.items()} for top in lp["top_logprobs"]],
        }
    for choice in chat["choices"]:
        content = choice["logprobs"]["content"]
        answers[f"chat {choice['index']}"] = {
            "text": choice["message"]["content"],
            "tokens": [_token_id(c["token"]) for c in content],
            "logprobs": [c["logprob"] for c in content],
            "top": [{_token_id(t["token"]): t["logprob"] for t in c["top_logprobs"]} for c in content],
        }
    for name, answer in answers.items():
        assert answer["tokens"], (name, answer)
    return answers


def _token_id(token: str) -> int:
    assert token.startswith("token_id:"), token
    return int(token.partition(":")[2])


def assert_same_answers(fixed: dict, stock: dict) -> None:
    """Tokens identical, logprobs (chosen and top) within LOGPROB_TOLERANCE."""
    assert fixed.keys() == stock.keys()
    for name in fixed:
        a, b = fixed[name], stock[name]
        assert a["tokens"] == b["tokens"], f"{name}: tokens {a['tokens']} with fixpack, {b['tokens']} without"
        assert a["text"] == b["text"], name
        for i, (x, y) in enumerate(zip(a["logprobs"], b["logprobs"])):
            assert abs(x - y) <= LOGPROB_TOLERANCE, f"{name}: token {i}: logprob {x} with fixpack, {y} without"
        for i, (x, y) in enumerate(zip(a["top"], b["top"])):
            assert x.keys() == y.keys(), f"{name}: token {i}: top {sorted(x)} with fixpack, {sorted(y)} without"
            for t in x:
                assert abs(x[t] - y[t]) <= LOGPROB_TOLERANCE, f"{name}: token {i}: top {t}: {x[t]} vs {y[t]}"


# --- what a server logged ------------------------------------------------------------------------


def assert_checked_everywhere(server: Server, tree: set[int], fix_set: dict, mode: str, workers: int) -> None:
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
        assert m["profile"] == build_env.PROFILE, m[0]
        assert m["digest"] == fix_set["digest"], m[0]
        assert m["fixes"].split(", ") == fix_set["fixes"] and int(m["count"]) == len(fix_set["fixes"]), m[0]
        assert m["mode"] == mode, m[0]

    agreed = list(AGREE_LINE.finditer(log))
    if workers > 1:
        assert sorted(int(m["pid"]) for m in agreed) == sorted(roles["worker"]), [m[0] for m in agreed]
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


def serve_and_ask(server: Server, model: Path) -> tuple[dict, set[int]]:
    with server:
        tree = server.descendants()
        answers = ask(server, model)
    return answers, tree


# --- the scenarios -------------------------------------------------------------------------------


def test_overlay_tp2(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """Overlay, TP 2, through the entry point: the API server, the engine core and two workers each
    check the overlay; both workers agree; the answers are the stock server's."""
    overlay = tmp_path / "overlay"
    port = free_port()
    argv = entry_point(
        serve_env.python, serve_env.site, "--overlay", str(overlay), "--exec", "vllm", *serve_args(tiny_model, port, 2)
    )
    fixed = Server(
        argv,
        env=vllm_environ(serve_env.bin, 2),
        port=port,
        log=tmp_path / "fixpack-tp2.log",
        name="TP 2 with the overlay",
    )
    port = free_port()
    stock = Server(
        [str(serve_env.bin / "vllm"), *serve_args(tiny_model, port, 2)],
        env=vllm_environ(serve_env.bin, 2),
        port=port,
        log=tmp_path / "stock-tp2.log",
        name="TP 2 without fixpack",
    )
    start = time.monotonic()
    with logs_on_failure(fixed, stock):
        answers, tree = serve_and_ask(fixed, tiny_model)
        fixed_s = time.monotonic() - start
        digest = fix_set(serve_env.python, serve_env.site, "--overlay", str(overlay))
        assert_checked_everywhere(fixed, tree, digest, f"overlay {overlay}", workers=2)
        stock_answers, _ = serve_and_ask(stock, tiny_model)
        assert_no_fixpack(stock)
        assert_same_answers(answers, stock_answers)
    print(
        f"serve: overlay TP 2: ready in {fixed.ready_s:.1f} s (stock: {stock.ready_s:.1f} s); "
        f"fix set {digest['digest']}; scenario {time.monotonic() - start:.1f} s (with fixpack {fixed_s:.1f} s)"
    )


def copy_env(env: ServeEnv, dest: Path) -> ServeEnv:
    """A copy of the environment to apply in place to: hard links (cp -al) for what an apply never
    writes, real copies of the two packages and their dist-info (what it writes; it replaces files by
    renaming, so even a link would leave the original alone), and ``bin/vllm`` pointing at the copy's
    interpreter."""
    subprocess.run(["cp", "-al", str(env.root), str(dest)], check=True)
    copy = ServeEnv(dest)
    for name in ("vllm", "vllm_gaudi", f"vllm-{build_env.RELABELLED_VERSION}.dist-info", "vllm_gaudi-0.26.0.dist-info"):
        shutil.rmtree(copy.site / name)
        shutil.copytree(env.site / name, copy.site / name, symlinks=True)
    script = copy.bin / "vllm"
    text = script.read_text().replace(f"#!{env.python}\n", f"#!{copy.python}\n", 1)
    assert text.startswith(f"#!{copy.python}\n"), text[:200]
    script.unlink()
    script.write_text(text)
    script.chmod(0o755)
    (copy.root / build_env.STAMP).unlink()  # not the environment the builder checked
    return copy


def test_in_place_tp1(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """In place, TP 1, on a copy of the environment (the original stays unpatched whatever happens):
    the API server, the engine core and the worker each check the site; the answers are the stock
    server's."""
    start = time.monotonic()
    copy = copy_env(serve_env, tmp_path / "env")
    copied_s = time.monotonic() - start
    port = free_port()
    argv = entry_point(copy.python, copy.site, "--exec", "vllm", *serve_args(tiny_model, port, 1))
    fixed = Server(
        argv, env=vllm_environ(copy.bin, 1), port=port, log=tmp_path / "fixpack-tp1.log", name="TP 1 patched in place"
    )
    port = free_port()
    stock = Server(
        [str(serve_env.bin / "vllm"), *serve_args(tiny_model, port, 1)],
        env=vllm_environ(serve_env.bin, 1),
        port=port,
        log=tmp_path / "stock-tp1.log",
        name="TP 1 without fixpack",
    )
    with logs_on_failure(fixed, stock):
        answers, tree = serve_and_ask(fixed, tiny_model)
        fixed_s = time.monotonic() - start
        digest = fix_set(copy.python, copy.site)
        assert_checked_everywhere(fixed, tree, digest, "in-place", workers=1)
        stock_answers, _ = serve_and_ask(stock, tiny_model)
        assert_no_fixpack(stock)
        assert_same_answers(answers, stock_answers)
    assert build_env.ready(serve_env.root) is None, "the original environment changed"
    build_env.check_fixes(serve_env.root)  # its patched files still hold the release's bytes
    print(
        f"serve: in place TP 1: copy {copied_s:.1f} s; ready in {fixed.ready_s:.1f} s "
        f"(stock: {stock.ready_s:.1f} s); "
        f"fix set {digest['digest']}; scenario {time.monotonic() - start:.1f} s (with fixpack {fixed_s:.1f} s)"
    )
