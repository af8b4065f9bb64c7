"""fixpack inside a real ``vllm serve`` (vLLM 0.26.0's CPU build, vllm-gaudi v0.26.0 beside it).

Each scenario starts the server the way a container would, through the entry point
(``fixes/apply_all.py ... --exec vllm serve ...``, under the serve environment's interpreter), and
checks, from the server's own log, that the runtime check ran in every vLLM process (the API
server, the engine core, each worker) with that process's pid and the fix set's digest that
``fixpack status`` reports, that the workers agreed on it (TP 2), and that the server answers
``/v1/completions`` and ``/v1/chat/completions`` with the same greedy tokens and logprobs as the
same server started without fixpack.

Then what must stop a start, each from the processes' own log lines and exit codes: TP 2 as two
nodes on this host (vLLM's multi-node multiprocessing, node 1 headless, each node with an overlay
of its own), where node 1 lacks an opt-in (both nodes stop before the model loads, naming rank 1 and
the fix) or runs no fixpack (node 0 stops after ``FIXPACK_AGREE_TIMEOUT`` naming the silent rank);
a patched file edited after the apply (the server exits before it is ready with the runtime check's
line; under ``FIXPACK_RUNTIME_CHECK=warn`` it starts, logging ``fix set none (drifted)``); a recipe's
rule (lazy mode) refusing ``apply_all.py --recipe SLUG --exec vllm serve ...`` before vLLM starts.

One server (or one two-node deployment) runs at a time; each is bounded in time and stopped by its
process group; a failure prints the tail of each server's log.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import build_env
import pytest
from build_env import ServeEnv
from killers import (
    assert_issue_55_fixed,
    assert_refused,
    choice_answer,
    issue_55_answers,
    not_object_answers,
    post,
    stop_id_requests,
)
from server import Server, ServerError, logs_on_failure, wait_exits
from vllm_serve import (
    CHECK_LINE,
    FIXPACK_LINE,
    ROLE,
    Pack,
    assert_checked_everywhere,
    assert_no_fixpack,
    copy_env,
    documented_lines,
    entry_point,
    fix_set,
    serve_args,
    stock_server,
    two_nodes,
    vllm_server,
)

REPO = build_env.REPO
LOGPROB_TOLERANCE = 1e-4
MAX_TOKENS = 16
TOP = 5


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
    log, name = tmp_path / "fixpack-tp2.log", "TP 2 with the overlay"
    fixed = vllm_server(serve_env, serve_args(tiny_model, 2), log, name, pack=Pack(overlay), tp=2)
    stock = stock_server(serve_env, tiny_model, 2, tmp_path / "stock-tp2.log", "TP 2 without fixpack")
    start = time.monotonic()
    with logs_on_failure(fixed, stock):
        answers, tree = serve_and_ask(fixed, tiny_model)
        fixed_s = time.monotonic() - start
        digest = fix_set(serve_env.python, serve_env.site, "--overlay", str(overlay))
        assert_checked_everywhere(fixed, tree, digest, f"overlay {overlay}", workers=2)
        page = REPO / "docs" / "operators" / "try-on-a-cpu.md"
        shown = documented_lines(page, overlay)
        assert len(shown) == 2 and [p.pattern for p in shown if not p.search(fixed.text())] == [], (
            f"{page.name}: a line it shows that this server did not log"
        )
        stock_answers, _ = serve_and_ask(stock, tiny_model)
        assert_no_fixpack(stock)
        assert_same_answers(answers, stock_answers)
    print(
        f"serve: overlay TP 2: ready in {fixed.ready_s:.1f} s (stock: {stock.ready_s:.1f} s); "
        f"fix set {digest['digest']}; scenario {time.monotonic() - start:.1f} s (with fixpack {fixed_s:.1f} s)"
    )


def test_in_place_tp1(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """In place, TP 1, on a copy of the environment (the original stays unpatched whatever happens):
    the API server, the engine core and the worker each check the site; the answers are the stock
    server's."""
    start = time.monotonic()
    copy = copy_env(serve_env, tmp_path / "env")
    copied_s = time.monotonic() - start
    fixed = vllm_server(
        copy, serve_args(tiny_model), tmp_path / "fixpack-tp1.log", "TP 1 patched in place", pack=Pack()
    )
    stock = stock_server(serve_env, tiny_model, 1, tmp_path / "stock-tp1.log", "TP 1 without fixpack")
    with logs_on_failure(fixed, stock):
        with fixed:
            tree = fixed.descendants()
            answers = ask(fixed, tiny_model)
            # vLLM's own request-killers, which Gaudi runs too (tests/serve/test_symptom_requests.py
            # shows them on the stock server): refused, and served
            refused = post(fixed, "/v1/completions", stop_id_requests(tiny_model)["/v1/completions"])
            choice = choice_answer(fixed, tiny_model)
            issue55 = issue_55_answers(fixed, tiny_model)
            bodies = not_object_answers(fixed)
        fixed_s = time.monotonic() - start
        assert_refused(*refused)
        assert choice[0] == 200 and choice[1] in ("yes", "no"), choice
        assert_issue_55_fixed(issue55)
        assert all(status == 400 for statuses in bodies.values() for status in statuses), bodies
        digest = fix_set(copy.python, copy.site)
        assert_checked_everywhere(fixed, tree, digest, "in-place", workers=1)
        stock_answers, _ = serve_and_ask(stock, tiny_model)
        assert_no_fixpack(stock)
        assert_same_answers(answers, stock_answers)
    assert build_env.ready(serve_env.root) is None, "the original environment changed"
    build_env.check_fixes(serve_env.root)  # its patched files still hold the release's bytes
    print(
        f"serve: in place TP 1: copy {copied_s:.1f} s; ready in {fixed.ready_s:.1f} s "
        f"(stock: {stock.ready_s:.1f} s); fix set {digest['digest']}; "
        f"scenario {time.monotonic() - start:.1f} s (with fixpack {fixed_s:.1f} s)"
    )


# --- two nodes that differ -----------------------------------------------------------------------

AGREE_TIMEOUT = 10  # FIXPACK_AGREE_TIMEOUT on both nodes, so that a silent rank is named after 10 s
AGREE = {"FIXPACK_AGREE_TIMEOUT": str(AGREE_TIMEOUT)}
NODES_TIMEOUT = 300.0  # for every process of a node to end on its own
LOADING = "Starting to load model"  # vLLM's CPU model runner, as the model starts to load
# A worker's refusal as vLLM logs the exception that ended it.
REFUSAL = re.compile(
    r"^\((?P<role>Worker\w*) pid=(?P<pid>\d+)\) ERROR (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d) \[[^]]*\] "
    r"RuntimeError: (?P<message>fixpack: .*)$",
    re.MULTILINE,
)
# Logged by vLLM's initialize_model_parallel right before ensure_model_parallel_initialized agrees.
GROUPS_MADE = re.compile(
    r"^\((?P<role>Worker\w*) pid=(?P<pid>\d+)\) INFO (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d) \[[^]]*\] "
    r"rank (?P<rank>\d+) in world size \d+ is assigned as",
    re.MULTILINE,
)


def run_nodes(*nodes: Server) -> dict[str, int]:
    """Start the nodes together and wait, bounded, until every process of each has ended; their exit
    codes. Whatever happens, each node's process group is stopped."""
    try:
        for node in nodes:
            node.start()
        return wait_exits(list(nodes), NODES_TIMEOUT)
    finally:
        for node in nodes:
            node.stop()


def disagreement(*parts: str) -> str:
    """The agreement's refusal for a deployment of 2 ranks (the README's format)."""
    return (
        "fixpack: the 2 ranks of this deployment do not run one fix set: "
        + "; ".join(parts)
        + ". Apply the same fixes on every node (fixpack status shows the fix set; apply --expect-fix-set pins it); "
        "FIXPACK_RUNTIME_CHECK=warn only warns"
    )


def on_rank(fix_set: dict, rank: int) -> str:
    return (
        f"fix set {fix_set['digest']} (profile {build_env.PROFILE}, {len(fix_set['fixes'])} fixes) "
        f"on rank {rank} ({socket.gethostname()})"
    )


def seconds(stamp: str) -> int:
    """A vLLM log stamp (``12-06 09:07:43``) as seconds into its day."""
    h, m, s = (int(x) for x in stamp.split()[1].split(":"))
    return h * 3600 + m * 60 + s


def checked_digests(server: Server) -> list[str]:
    return [m["digest"] for m in CHECK_LINE.finditer(server.text())]


def test_two_nodes_one_without_an_opt_in(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """TP 2 as two nodes on this host, each through the entry point with its own overlay; node 1's
    without fp8-moe-gather. Both nodes stop before the model loads, each worker with the one line
    that names both fix sets and the fix only rank 0 runs; every process of both nodes ends."""
    overlays = [tmp_path / "node0-overlay", tmp_path / "node1-overlay"]
    opt_ins = [build_env.OPT_INS, tuple(o for o in build_env.OPT_INS if o != "fp8-moe-gather")]
    names = (f"node 0 ({', '.join(opt_ins[0])})", f"node 1 ({', '.join(opt_ins[1])})")
    packs = (Pack(overlays[0], opt_ins=opt_ins[0]), Pack(overlays[1], opt_ins=opt_ins[1]))
    nodes = two_nodes(serve_env, tiny_model, tmp_path, names, packs, AGREE)
    with logs_on_failure(*nodes):
        codes = run_nodes(*nodes)
        sets = [fix_set(serve_env.python, serve_env.site, "--overlay", str(o)) for o in overlays]
        assert [f for f in sets[0]["fixes"] if f != "fp8-moe-gather"] == sets[1]["fixes"], sets
        expected = disagreement(on_rank(sets[0], 0), on_rank(sets[1], 1), "fp8-moe-gather only on rank 0")
        for node, own, processes in zip(nodes, sets, (3, 2)):  # node 0: API server, engine core, worker
            log = node.text()
            assert codes[node.name] != 0, f"{node.name} exited 0"
            refusals = list(REFUSAL.finditer(log))
            assert [m["message"] for m in refusals] == [expected], [m["message"] for m in refusals]
            assert LOADING not in log, f"{node.name} started to load the model"
            assert checked_digests(node) == [own["digest"]] * processes
    print(
        f"serve: two nodes, node 1 without fp8-moe-gather: node 0 exited {codes[nodes[0].name]} after "
        f"{nodes[0].exited_s:.1f} s, node 1 exited {codes[nodes[1].name]} after {nodes[1].exited_s:.1f} s"
    )


def test_two_nodes_one_without_fixpack(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """TP 2 as two nodes on this host: node 0 through the entry point with an overlay, node 1 a
    stock ``vllm serve --headless``. Node 0's worker stops FIXPACK_AGREE_TIMEOUT seconds after its
    groups exist, naming rank 1 as silent, before the model loads; node 1 logs nothing of fixpack and
    goes on as vLLM would, until node 0 has gone; every process of both nodes ends."""
    overlay = tmp_path / "node0-overlay"
    names = ("node 0 (fixpack)", "node 1 (no fixpack)")
    node0, node1 = two_nodes(serve_env, tiny_model, tmp_path, names, (Pack(overlay), None), AGREE)
    with logs_on_failure(node0, node1):
        codes = run_nodes(node0, node1)
        own = fix_set(serve_env.python, serve_env.site, "--overlay", str(overlay))
        expected = disagreement(
            on_rank(own, 0),
            f"no fix set from rank 1 within {AGREE_TIMEOUT} s (FIXPACK_AGREE_TIMEOUT): no fixpack there, "
            "or FIXPACK_RUNTIME_CHECK=off, so other code",
        )
        log = node0.text()
        assert codes[node0.name] != 0, "node 0 exited 0"
        refusals = list(REFUSAL.finditer(log))
        assert [m["message"] for m in refusals] == [expected], [m["message"] for m in refusals]
        assert LOADING not in log, "node 0 started to load the model"
        assert checked_digests(node0) == [own["digest"]] * 3
        made = [m for m in GROUPS_MADE.finditer(log) if m["pid"] == refusals[0]["pid"]]
        assert len(made) == 1, [m[0] for m in made]
        waited = (seconds(refusals[0]["stamp"]) - seconds(made[0]["stamp"])) % 86400
        # Log stamps are whole seconds; the refusal is logged once the exception reaches vLLM's handler.
        assert AGREE_TIMEOUT - 1 <= waited <= AGREE_TIMEOUT + 10, f"the worker refused {waited} s after its groups"
        assert not FIXPACK_LINE.search(node1.text()), "node 1 runs no fixpack"
    print(
        f"serve: two nodes, node 1 without fixpack: node 0 refused {waited} s after its groups existed and "
        f"exited {codes[node0.name]} after {node0.exited_s:.1f} s; node 1 exited {codes[node1.name]} after "
        f"{node1.exited_s:.1f} s"
    )


# --- refusals on a real server -------------------------------------------------------------------

RECIPE_SLUG = "qwen3.5-122b-a10b-fp8-gaudi2"
DRIFT = re.compile(r"RuntimeError: (fixpack: this process would not run the code fixpack applied: .*)$", re.MULTILINE)
WARNED = re.compile(
    r"WARNING \d\d-\d\d \d\d:\d\d:\d\d \[[^]]*\] (fixpack: this process would not run the code fixpack applied: .*)$",
    re.MULTILINE,
)
DRIFTED_LINE = re.compile(
    r"fixpack: profile (?P<profile>\S+), fix set none \(drifted\), (?P<count>\d+) fixes \([^)]*\), "
    r"mode overlay (?P<root>\S+), pid (?P<pid>\d+), \d+ files checked in [\d.]+ ms \(FAILED, warn only\)"
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_patched_file_edited_after_the_apply(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """An overlay applied through the entry point, then one of its patched files edited (a
    vllm_gaudi module, which no process here imports), then ``vllm serve`` started with the overlay
    on PYTHONPATH, as an image that built its overlay starts: the server exits non-zero before it
    is ready with the runtime check's one line naming the file; with FIXPACK_RUNTIME_CHECK=warn the
    same server starts and answers, each process warning and logging ``fix set none (drifted)``."""
    overlay = tmp_path / "overlay"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_") and k != "PYTHONPATH"}
    done = subprocess.run(
        entry_point(serve_env.python, serve_env.site, "--overlay", str(overlay)),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    edited = overlay / ".fixpack" / "modules" / "vllm_gaudi" / "v1" / "worker" / "hpu_input_batch.py"
    recorded = sha256(edited)
    with open(edited, "a") as fh:
        fh.write("# edited after the apply\n")
    expected = (
        f"fixpack: this process would not run the code fixpack applied: {edited} is not the file fixpack "
        f"patched (sha256 {sha256(edited)[:12]}, recorded {recorded[:12]}). Run fixpack apply again (or fixpack "
        "status); FIXPACK_RUNTIME_CHECK=warn only warns"
    )

    def server(mode: str | None, name: str) -> Server:
        environ = {"PYTHONPATH": str(overlay), **({"FIXPACK_RUNTIME_CHECK": mode} if mode is not None else {})}
        return vllm_server(serve_env, serve_args(tiny_model), tmp_path / f"{name}.log", name, environ=environ)

    stopped, warned = server(None, "drifted"), server("warn", "drifted-warn")
    with logs_on_failure(stopped, warned):
        try:
            stopped.start()
            with pytest.raises(ServerError, match="exited with 1 before it was ready"):
                stopped.wait_ready()
            code = stopped.wait_exit(NODES_TIMEOUT)
        finally:
            stopped.stop()
        assert code == 1
        assert DRIFT.findall(stopped.text()) == [expected]
        assert "Application startup complete" not in stopped.text()

        with warned:
            tree = warned.descendants()
            ask(warned, tiny_model)
        log = warned.text()
        roles = {m["role"].split("_")[0]: int(m["pid"]) for m in ROLE.finditer(log)}
        processes = {warned.pid, roles["EngineCore"], roles["Worker"]}
        assert processes <= tree
        assert WARNED.findall(log) == [expected] * 3
        drifted = list(DRIFTED_LINE.finditer(log))
        assert sorted(int(m["pid"]) for m in drifted) == sorted(processes), [m[0] for m in drifted]
        assert {(m["profile"], m["root"]) for m in drifted} == {(build_env.PROFILE, str(overlay))}
        assert not CHECK_LINE.search(log), "no process may report a digest"
    print(
        f"serve: a patched file edited: the server exited {code} after {stopped.exited_s:.1f} s; "
        f"with FIXPACK_RUNTIME_CHECK=warn ready in {warned.ready_s:.1f} s"
    )


def test_a_recipe_rule_refuses_before_vllm_starts(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """``apply_all.py --recipe SLUG --exec vllm serve ...`` (the tiny model's own serve line) with
    PT_HPU_LAZY_MODE=1: the recipe's no-lazy-mode rule refuses in one line, exit 1, before vLLM
    starts (nothing of vLLM in the output, nothing serves the port, no overlay made); the same line
    without lazy mode applies."""
    from fixpack.cookbook.recipes import load_recipes

    rules = {r["id"]: r["message"].strip() for r in load_recipes(REPO)[RECIPE_SLUG].rules}
    expected = (
        f'fixpack: error: recipe {RECIPE_SLUG}, rule no-lazy-mode: "{rules["no-lazy-mode"]}"; '
        "nothing was applied, nothing launched"
    )
    overlay = tmp_path / "overlay"
    pack = Pack(overlay, recipe=RECIPE_SLUG)
    log, name = tmp_path / "lazy.log", "--recipe with PT_HPU_LAZY_MODE=1"
    lazy = vllm_server(serve_env, serve_args(tiny_model), log, name, pack=pack, environ={"PT_HPU_LAZY_MODE": "1"})
    with logs_on_failure(lazy):
        try:
            lazy.start()
            code = lazy.wait_exit(60)
        finally:
            lazy.stop()
        assert code == 1
        assert lazy.text().splitlines() == [expected]
        assert not overlay.exists()
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", lazy.port)) != 0, "something serves the port"
    env = {**lazy.env, "PT_HPU_LAZY_MODE": "0"}
    done = subprocess.run(pack.argv(serve_env.python, serve_env.site), capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    print(f"serve: a recipe rule refused in {lazy.exited_s:.1f} s; without lazy mode the same apply passed")
