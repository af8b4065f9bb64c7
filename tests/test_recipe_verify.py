"""A recipe's ``verify`` section: the shipped recipe's checks against its cookbook page's "Verified"
and "Performance" tables (same rows, same results, the performance figures read from the page),
``recipe show --verified`` printing them as the page does, the reader refusing what is not a check
(exit 2 at the line, with a did-you-mean), ``recipe check`` refusing a check's unknown fix, and
``recipe accept``'s refusals before it sends anything (exit 2 unknown check, 3 unreachable). Each
predicate against real answers, and broken ones, is in tests/serve/test_accept.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fixpack.commands.recipes import predicates as p
from fixpack.commands.recipes.recipe import load_recipes, verified_table

REPO = Path(__file__).resolve().parent.parent
RECIPE_FILE = REPO / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml"
TINY = REPO / "tests" / "recipes" / "tiny-qwen3.yaml"
SLUG = "qwen3.5-122b-a10b-fp8-gaudi2"
PAGE = "cookbook-qwen3.5-122b-a10b-fp8-gaudi2.txt"


def _page() -> str | None:
    named = os.environ.get("FIXPACK_SHARED_RECIPES")
    if not named or not (Path(named) / PAGE).is_file():
        return None
    return (Path(named) / PAGE).read_text(encoding="utf-8")


def page_table(page: str, heading: str, first: str) -> list[tuple[str, str]]:
    """The rows of one of the page's tables: the lines after ``FIRST\\tResult`` under HEADING."""
    section = page.split(f"\n{heading}\n", 1)[1]
    body = section.split(f"{first}\tResult\n", 1)[1].split("\n\n", 1)[0]
    return [tuple(line.split("\t", 1)) for line in body.splitlines() if line.strip()]  # type: ignore[misc]


def fixpack(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "fixpack", *args], capture_output=True, text=True, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def page() -> str:
    text = _page()
    if text is None:
        pytest.skip("the cookbook page is not here: set FIXPACK_SHARED_RECIPES to shared/recipes")
    return text


def test_every_row_of_the_pages_tables_is_a_check(page: str) -> None:
    recipe = load_recipes(REPO)[SLUG]
    tables = verified_table(recipe)
    assert [(r, res) for r, res, _ in tables["verified"]] == page_table(page, "Verified", "Check")
    assert [(r, res) for r, res, _ in tables["performance"]] == page_table(page, "Performance", "Test")


def test_the_performance_figures_are_the_pages(page: str) -> None:
    """Each performance check's figure is the first number (or the "A to B" span) of the page's result."""
    checks = load_recipes(REPO)[SLUG].verify.by_id()
    rows = dict(page_table(page, "Performance", "Test"))
    perf = [c for c in checks.values() if c.table == "performance"]
    assert len(perf) == len(rows) == 5
    for c in perf:
        result = rows[c.row]
        span = re.match(r"([\d.]+) to ([\d.]+) s", result)
        figure = [float(span[1]), float(span[2])] if span else float(re.match(r"[\d.]+", result)[0])
        assert c.expect["figure"] == figure, (c.id, result)
        assert 0 < c.expect["tolerance"] < 1, c.id


def test_show_verified_markdown_prints_the_pages_tables(page: str) -> None:
    done = fixpack("recipe", "show", SLUG, "--verified", "--markdown")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    expected = [("Check", "Result"), *page_table(page, "Verified", "Check")]
    expected += [("Test", "Result"), *page_table(page, "Performance", "Test")]
    assert rows == [f"| {a} | {b} |" for a, b in expected]


def test_show_verified_json_names_each_check() -> None:
    done = fixpack("recipe", "show", SLUG, "--verified", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    ids = [r["id"] for r in data["verified"] + data["performance"]]
    assert "needles-cold" in ids and "cold-244k" in ids and "allowed-token-ids-leak" not in ids  # not on the page


def test_each_check_names_fixes_of_the_pack_and_says_why() -> None:
    fixes = {p.name for p in (REPO / "fixes").iterdir() if (p / "fix.toml").is_file()}
    for path in (RECIPE_FILE, TINY):
        recipe = load_recipes(REPO, [path])
        for r in recipe.values():
            for c in r.verify.checks:
                assert set(c.fixes) <= fixes, (r.slug, c.id)
                assert c.note, c.id
    tiny = load_recipes(REPO, [TINY])["tiny-qwen3-cpu"].verify.by_id()
    assert tiny["allowed-token-ids-leak"].fixes == ("allowed-token-ids-reuse", "input-batch-condense-mask")
    assert tiny["stop-token-ids-out-of-vocab"].predicate == "refused"
    assert "logprobs-decode-guard-sentencepiece" in tiny


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = RECIPE_FILE.read_text()
    assert old in text, old
    root = tmp_path / "book"
    (root / "recipes" / "Qwen" / "x").mkdir(parents=True)
    for name in ("fixes", "profiles"):
        (root / name).symlink_to(REPO / name)
    (root / "recipes" / "Qwen" / "x" / "recipe.yaml").write_text(text.replace(old, new, 1))
    return root


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("      predicate: known-answer\n", "      predicate: known-answr\n", "did you mean 'known-answer'"),
        ("      repeat: 5\n", "      repaet: 5\n", "unknown key 'repaet'"),
        (
            "expect: {field: top_logprobs, n: 20}",
            "expect: {field: top_logprobs, count: 20}",
            "unknown key 'count' in verify.checks.5.expect",
        ),
        (
            "expect: {name: get_weather, arguments: {city: Paris}}\n      fixes: [sampling",
            "expect: {arguments: {city: Paris}}\n      fixes: [sampling",
            "needs expect.name",
        ),
        (
            "    - id: known-answers-16-in-flight\n",
            "    - id: known-answers\n",
            "check id 'known-answers' is given twice",
        ),
        ("figure: [16, 25]", "figure: sixteen", "expect.figure is a number or [low, high]"),
        (
            "predicate: logprob-entries\n      expect: {field: top_logprobs, n: 20}",
            "predicate: refused\n      expect: {status: 500}",
            "expect.status is a client error's HTTP status (4xx)",
        ),
    ],
)
def test_the_reader_refuses_what_is_not_a_check(tmp_path: Path, old: str, new: str, message: str) -> None:
    root = _broken(tmp_path, old, new)
    done = fixpack("recipe", "show", str(root / "recipes" / "Qwen" / "x" / "recipe.yaml"), "--verified")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr, done.stderr
    assert re.search(r"recipe\.yaml:\d+: ", done.stderr), done.stderr
    assert "Traceback" not in done.stderr


def test_recipe_check_refuses_a_checks_unknown_fix(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(
        RECIPE_FILE.read_text().replace(
            "fixes: [rope-cpu-cache]\n      note: >-\n        A haystack",
            "fixes: [rope-cpu-cash]\n      note: >-\n        A haystack",
            1,
        )
    )
    from fixpack.commands.recipes import recipe as commands
    from fixpack.cookbook.catalog import Catalog

    book = Catalog.load()
    checked = commands.Checked(commands.load_recipe(path, REPO))
    commands._check_one(book, checked, commands.Probe(unavailable="not asked"), 0)
    assert any(
        "check needles-cold names unknown fix 'rope-cpu-cash' (did you mean 'rope-cpu-cache'?)" in m
        for _, m in checked.problems
    ), checked.problems


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_accept_refuses_an_unknown_check_before_sending_anything() -> None:
    done = fixpack("recipe", "accept", SLUG, "--url", f"http://127.0.0.1:{_free_port()}", "--only", "needle-cold")
    assert done.returncode == 2, done.stderr
    assert "has no check 'needle-cold' (did you mean 'needles-cold'?)" in done.stderr


def test_accept_exits_3_when_the_server_cannot_be_reached() -> None:
    done = fixpack("recipe", "accept", SLUG, "--url", f"http://127.0.0.1:{_free_port()}", "--json")
    assert done.returncode == 3, done.stderr
    assert "cannot be reached" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["ok"] is False


def test_a_recipe_without_checks_has_nothing_to_accept(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE_FILE.read_text().split("\nverify:\n", 1)[0])
    done = fixpack("recipe", "accept", str(path), "--url", "http://127.0.0.1:1")
    assert done.returncode == 2 and "has no verify section" in done.stderr, done.stderr


# --- the predicates on answers built by hand: the cases a live server seldom gives -------------


def test_the_answer_is_the_content_never_the_reasoning() -> None:
    body = {"choices": [{"message": {"content": "Paris", "reasoning_content": "It is 42."}, "finish_reason": "stop"}]}
    answer = p.from_chat(body, parser=True)
    assert not p.known_answer([answer], ["42"], "contains").ok
    assert p.known_answer([answer], ["Paris"], "contains").ok
    leftover = p.from_chat({"choices": [{"message": {"content": "think 42</think>\n\nParis"}}]}, parser=True)
    assert leftover.text == "Paris" and not p.known_answer([leftover], ["42"], "contains").ok


def test_a_spent_budget_is_said() -> None:
    answer = p.Answer(text="", finish_reason="length")
    out = p.known_answer([answer], ["42"], "contains")
    assert not out.ok and "token budget spent" in out.detail


def test_refused_holds_only_for_the_status_with_a_message_naming_each_mention() -> None:
    said = p.Answer(error="HTTP 400: stop_token_ids contains out-of-vocab token ids [5000000]; vocabulary 1024")
    assert p.refused([said, said], 400, ["stop_token_ids", "5000000"]).ok
    assert p.refused([said], 400, ["stop_token_ids", "5000000"]).measured == "1/1 refused with 400"
    crashed = p.refused([said, p.Answer(error="HTTP 500: EngineDeadError")], 400, ["stop_token_ids"])
    assert not crashed.ok and "HTTP 500" in crashed.detail and crashed.measured == "1/2 refused with 400"
    served = p.refused([p.Answer(text="hello there")], 400, [])
    assert not served.ok and "answered" in served.detail
    vague = p.refused([p.Answer(error="HTTP 400: bad request")], 400, ["stop_token_ids"])
    assert not vague.ok and "does not name stop_token_ids" in vague.detail


def test_performance_holds_within_the_tolerance_only() -> None:
    assert p.performance("tokens_per_s", 36.0, 43.8, 0.2).ok
    assert not p.performance("tokens_per_s", 34.0, 43.8, 0.2).ok
    assert p.performance("seconds_to_answer", 30.0, [16, 25], 0.25).ok
    assert not p.performance("seconds_to_answer", 32.0, [16, 25], 0.25).ok


def test_a_tool_call_holds_only_when_named_with_json_arguments_that_say_the_value() -> None:
    def call(name: str, arguments: str) -> p.Answer:
        return p.Answer(tool_calls=[{"name": name, "arguments": arguments}])

    assert p.tool_call([call("get_weather", '{"city": "Paris, France"}')], "get_weather", {"city": "Paris"}).ok
    wrong = p.tool_call([call("get_weather", '{"city": "Lyon"}')], "get_weather", {"city": "Paris"})
    assert not wrong.ok and "lack city" in wrong.detail
    broken = p.tool_call([call("get_weather", '{"city": "Par')], "get_weather", {"city": "Paris"})
    assert not broken.ok and "not JSON" in broken.detail
    assert not p.tool_call([p.Answer(text="It is sunny.")], "get_weather", {}).ok


def test_a_needle_is_found_only_in_the_answer() -> None:
    found = p.Answer(text="The secret number is 481516.", reasoning="", prompt_tokens=65012)
    missed = p.Answer(text="I do not know.", reasoning="481516", prompt_tokens=65012)
    assert p.needle([found], ["481516"]).measured == "1/1 at 65,012 to 65,012 tokens"
    assert not p.needle([found, missed], ["481516", "481516"]).ok


def test_the_streamed_chunks_of_a_tool_call_are_assembled() -> None:
    from fixpack.commands.recipes.accept_client import _assemble

    class Chunk:
        def __init__(self, data: dict) -> None:
            self.data = data

        def model_dump(self) -> dict:
            return self.data

    def delta(**fields: object) -> Chunk:
        return Chunk({"choices": [{"delta": fields, "finish_reason": None}]})

    chunks = [
        delta(reasoning_content="The user wants "),
        delta(tool_calls=[{"index": 0, "function": {"name": "get_weather", "arguments": ""}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
    ]
    answer = _assemble("chat", chunks, True, 0.0)
    assert answer.tool_calls == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert answer.reasoning == "The user wants " and answer.text == ""
    assert p.tool_call([answer], "get_weather", {"city": "Paris"}).ok


class _Listener:
    """A loopback HTTP listener that notes each path it is asked for; it answers as a vLLM server
    answers /health and /v1/models (the one model given), 404 to anything else."""

    def __init__(self, model: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.paths: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.paths.append(self.path)
                body = b""
                if self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
                self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_accept_talks_to_the_url_given_and_no_proxy_of_the_environment() -> None:
    """HTTP_PROXY and ALL_PROXY point at another listener: nothing reaches it."""
    with _Listener("tiny") as server, _Listener("tiny") as proxy:
        env = {**os.environ, "PYTHONPATH": str(REPO), "HTTP_PROXY": proxy.url, "ALL_PROXY": proxy.url, "NO_PROXY": ""}
        argv = [sys.executable, "-m", "fixpack", "recipe", "accept", str(TINY), "--url", server.url]
        done = subprocess.run(
            [*argv, "--model", "tiny", "--only", "server-healthy"], capture_output=True, text=True, env=env
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert proxy.paths == [] and server.paths == ["/v1/models", "/health", "/v1/models"], (server.paths, proxy.paths)


def test_accept_exits_3_when_the_server_serves_another_model() -> None:
    with _Listener("another") as server:
        done = fixpack("recipe", "accept", str(TINY), "--url", server.url, "--model", "tiny")
    assert done.returncode == 3, done.stderr
    assert "serves another, not tiny" in done.stderr, done.stderr


def test_show_verified_of_a_recipe_without_checks_says_so(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE_FILE.read_text().split("\nverify:\n", 1)[0])
    done = fixpack("recipe", "show", str(path), "--verified")
    assert done.returncode == 2 and "has no verify section" in done.stderr, done.stderr


def test_the_table_and_the_junit_of_a_run(tmp_path: Path) -> None:
    import io
    import xml.etree.ElementTree as ET

    from fixpack.cli import render_accept
    from fixpack.commands.recipes.accept import AcceptResult, CheckResult

    def result(cid: str, ok: bool, detail: str, measured: str, page: str | None, fixes: tuple[str, ...]) -> CheckResult:
        return CheckResult(cid, ok, detail, measured, page, page, "verified", fixes, 2, 0.5)

    run = AcceptResult("tiny", "http://127.0.0.1:1", "m")
    run.checks += [
        result("top-logprobs-20", True, "", "20 entries on every token", "20 entries on every token", ("a",)),
        result("leak", False, "#1: text 'x' vs ''", "5/6 equal", None, ("allowed-token-ids-reuse",)),
    ]
    out = io.StringIO()
    render_accept.table(run, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["check", "result", "measured", "page", "fixes", "it", "points", "at"]
    assert lines[1].split()[:2] == ["top-logprobs-20", "held"] and not lines[1].endswith("a")
    assert lines[2].split()[:2] == ["leak", "FAILED"] and lines[2].endswith("allowed-token-ids-reuse")
    assert "(not on the page)" in lines[2] and lines[3] == "leak: #1: text 'x' vs ''"
    assert lines[-1].endswith("1 held, 1 failed")

    suite = ET.fromstring(render_accept.junit(run).encode("utf-8"))
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["top-logprobs-20"].find("failure") is None
    failure = cases["leak"].find("failure")
    assert failure is not None and failure.get("message") == "#1: text 'x' vs ''"
    assert "allowed-token-ids-reuse" in failure.text
