"""bench/fuzz_requests.py and bench/fuzz.py without a vLLM server: the requests a seed draws (the
same for every server, at the edges of the vocabulary), the oracle on answers given here, and a
saved failure replayed against a stand-in server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.fuzz_listed import LISTED, listed  # noqa: E402
from bench.fuzz_requests import ENDPOINTS, Model, Verdict, batches, judge  # noqa: E402

MODEL = Model("tiny", vocab=1024, tokenizer=1000)


def _ids(body: dict) -> list[int]:
    out = [*body.get("stop_token_ids", []), *body.get("allowed_token_ids", [])]
    out += [int(k) for k in body.get("logit_bias", {})]
    return out + (body["prompt"] if isinstance(body.get("prompt"), list) else [])


def test_a_seed_draws_the_same_requests_for_every_server() -> None:
    first, again, other = batches(MODEL, 7, 40), batches(MODEL, 7, 40), batches(MODEL, 8, 40)
    assert first == again and first != other
    assert len(first) == 40 and all(1 <= len(b) <= 3 for b in first)


def test_a_seed_draws_the_same_requests_whatever_the_process_has_loaded(tmp_path: Path) -> None:
    # Hypothesis mixes the literals of every local module loaded into its draws: a draw made in a
    # process changes once it imports another module, the seed's batches do not
    (tmp_path / "fuzz_noise.py").write_text("NOISE = " + repr([*range(990, 1030), "yes", "42"]) + "\n")
    script = f"""
import json, sys
sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]
from bench.fuzz_requests import Model, batches, draw
model = Model("tiny", 1024, 1000)
seeds = (78, 3, 5, 26)
before = [(batches(model, s, 40), draw(model, s, 40)) for s in seeds]
import fuzz_noise
after = [(batches(model, s, 40), draw(model, s, 40)) for s in seeds]
print(json.dumps([[b[0] == a[0], b[1] == a[1]] for b, a in zip(before, after)]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    same = json.loads(done.stdout)
    assert not all(same_draw for _, same_draw in same)  # some seed's in-process draw moved
    assert all(same_batches for same_batches, _ in same)


def test_requests_are_bodies_of_both_endpoints_with_ids_at_the_edges() -> None:
    drawn = [r for batch in batches(MODEL, 1, 300, in_flight=4) for r in batch]
    assert {endpoint for endpoint, _ in drawn} == set(ENDPOINTS)
    for endpoint, body in drawn:
        assert body["model"] == "tiny"
        assert ("prompt" in body) == (endpoint == "/v1/completions") and ("messages" in body) != ("prompt" in body)
        assert all(0 <= i <= MODEL.vocab + 1 for i in _ids(body)), body
    ids = {i for _, body in drawn for i in _ids(body)}
    assert {0, MODEL.tokenizer, MODEL.vocab - 1, MODEL.vocab} <= ids  # the edges are drawn
    assert any(0 < i < MODEL.tokenizer - 1 for i in ids)  # and the inside
    both = [b for _, b in drawn if b.get("min_tokens") and b.get("stop_token_ids")]
    assert both, "min_tokens with stop_token_ids (the stop-id killer's shape) is never drawn"
    assert any("structured_outputs" in b for _, b in drawn) and any(b.get("stream") for _, b in drawn)


def test_the_oracle() -> None:
    served = json.dumps({"choices": [{"text": "hi", "finish_reason": "length"}]})
    assert judge(200, served, False).kind == "served"
    assert judge(200, json.dumps({"choices": [{"finish_reason": "error"}]}), False).failed
    refused = judge(400, json.dumps({"error": {"message": "stop_token_ids contains out-of-vocab token ids"}}), False)
    assert refused.kind == "4xx" and not refused.failed and "stop_token_ids" in refused.detail
    assert judge(400, json.dumps({"detail": []}), False).failed  # a 4xx without a message
    assert judge(500, "Internal Server Error", False).kind == "5xx"
    assert judge(None, "ConnectionResetError", False).kind == "unanswered"
    chunk = 'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
    assert judge(200, chunk + "data: [DONE]\n\n", True).kind == "served"
    assert judge(200, chunk, True).kind == "stream-error"  # cut short
    error = 'data: {"error": {"message": "EngineDeadError", "code": 500}}\n\n'
    assert judge(200, chunk + error + "data: [DONE]\n\n", True).kind == "stream-error"
    said = 'data: {"error": {"message": "Token id 1024 is out of vocabulary", "type": "BadRequest", "code": 400}}\n\n'
    assert judge(200, said + "data: [DONE]\n\n", True).kind == "4xx"  # a refusal inside the stream
    # a token's text with line breaks that SSE does not break at, as vLLM's JSON leaves them
    odd = 'data: {"choices": [{"text": "a\u2028b\x85c", "finish_reason": null}]}\r\n\r\n'
    assert judge(200, odd + "data: [DONE]\n\n", True).kind == "served"


FIVE, STREAM, WRONG = (
    Verdict("5xx", "HTTP 500"),
    Verdict("stream-error", "finish_reason error"),
    Verdict("violation", "x"),
)
RID = "fuzz-0123456789abcdef"
REJECTED = [  # vLLM 0.26.0's log line for the request whose grammar rejected the sampled token
    f"(EngineCore pid=7) ERROR 12-07 05:48:54 [scheduler.py:1749] Unexpected: grammar rejected tokens [0] for "
    f"request cmpl-{RID}-0-864212c9. Terminating request."
]
KEY_ERROR = Verdict("stream-error", json.dumps({"message": "269", "type": "InternalServerError", "code": 500}))
RAISED = [  # the completion stream generator's logger.exception: where the KeyError was raised
    "ERROR 12-07 05:45:10 [serving.py:499] Error in completion stream generator.",
    "Traceback (most recent call last):",
    '  File "SITE/vllm/entrypoints/openai/completion/serving.py", line 695, in _create_completion_logprobs',
    "    step_token = step_top_logprobs[token_id]",
    "KeyError: 269",
]


def test_a_grammars_failure_is_listed_by_the_log_line_that_names_the_request() -> None:
    grammar = {"structured_outputs": {"choice": ["yes", "no"]}, "allowed_token_ids": [1]}
    assert listed(grammar, FIVE, REJECTED, RID) == "grammar-without-token" in LISTED
    assert listed(grammar, STREAM, REJECTED, RID) == "grammar-without-token"
    assert listed({}, FIVE, REJECTED, RID) == "grammar-without-token"  # by what failed, not by its shape
    assert listed(grammar, FIVE, REJECTED, "fuzz-another") is None  # another request's line
    assert listed(grammar, FIVE, [], RID) is None and listed(grammar, FIVE, REJECTED) is None
    assert listed(grammar, FIVE, ["ERROR ... IndexError: index 1024 is out of bounds"], RID) is None


def test_the_echo_key_error_is_listed_by_the_exception_and_where_it_was_raised() -> None:
    echo = {"stream": True, "echo": True, "logprobs": 0, "n": 2}
    assert listed(echo, KEY_ERROR, RAISED) == "echo-stream-prompt-logprobs" in LISTED
    elsewhere = [*RAISED[:2], '  File "SITE/vllm/outputs.py", line 180, in add', *RAISED[3:]]
    assert listed(echo, KEY_ERROR, elsewhere) is None
    assert listed(echo, KEY_ERROR, [*RAISED[:3], *elsewhere[2:]]) is None  # the last frame is another's
    assert listed(echo, KEY_ERROR, RAISED[:4] + ["KeyError: 7"]) is None  # another key
    assert listed({**echo, "logprobs": None}, KEY_ERROR, RAISED) is None
    other = Verdict("stream-error", json.dumps({"message": "EngineDeadError", "type": "InternalServerError"}))
    assert listed(echo, other, RAISED) is None and listed(echo, STREAM, RAISED) is None


def test_a_hang_an_unanswered_request_or_a_death_is_never_listed() -> None:
    grammar = {"structured_outputs": {"choice": ["yes", "no"]}, "ignore_eos": True}
    for other in (Verdict("hang"), Verdict("unanswered"), Verdict("death"), WRONG):
        assert listed(grammar, other, REJECTED, RID) is None, other
    echo = {"stream": True, "echo": True, "logprobs": 0}
    assert listed(echo, FIVE, RAISED) is None and listed(echo, Verdict("hang"), RAISED) is None


def test_a_wrong_answer_is_listed_by_what_was_wrong() -> None:
    tail = Verdict("violation", "choice 0: the text begins with the prompt's own text ' 324\ufffd'")
    assert listed({"prompt": [2, 981, 175], **CHOICE}, tail) == "detokenizer-prompt-tail" in LISTED
    other = Verdict("violation", "choice 0 (stop, stop_reason None): 'maybe' is not one of ['7', 'blue']")
    assert listed({"prompt": [2, 981, 175], **CHOICE}, other) is None
    both = Verdict("violation", f"{tail.detail}; choice 0: 3 tokens, max_tokens 2")
    assert listed({"prompt": [2, 981, 175], **CHOICE}, both) is None  # one finding is another bug's
    echo = Verdict("violation", "choice 0: echo without the prompt 'the'; choice 1: echo without the prompt 'the'")
    assert listed({"prompt": "the", "echo": True, "return_token_ids": True}, echo) == "echo-with-token-ids" in LISTED
    assert listed({"prompt": "the", "echo": True}, echo) is None
    outside = Verdict("violation", "choice 0: ids [0, 0] outside allowed_token_ids [103, 593]")
    masked = {"allowed_token_ids": [103, 593], "stop_token_ids": [103, 593], "min_tokens": 12}
    assert listed(masked, outside) == "allowed-ids-masked" in LISTED
    assert listed({**masked, "stop_token_ids": [103]}, outside) is None  # 593 was left: another bug
    assert listed({**masked, "min_tokens": 0}, outside) is None and listed({**masked, **CHOICE}, outside) is None


def test_every_listed_failure_names_its_vllm_issue_and_the_fixes_that_remove_it() -> None:
    fixes = {p.name for p in (REPO / "fixes").iterdir() if (p / "fix.toml").is_file()}
    for key, item in LISTED.items():
        assert all(i.startswith("vllm-project/vllm#") for i in item.issues), key
        assert item.issues or "No vLLM issue" in item.what, key  # or says there is none
        assert item.fixed_by and set(item.fixed_by) <= fixes, key


CHOICE = {"structured_outputs": {"choice": ["7", "blue"]}}


class _StandIn(BaseHTTPRequestHandler):
    """500 for a body with an out-of-vocabulary stop id, 200 otherwise: a wrong answer to a body with
    a choice (none of its choices), a right one to the rest, another text each time for the prompt
    "unsteady"; /health 200."""

    models: list[str] = []  # the model each request named, in order
    request_ids: list[str | None] = []  # the X-Request-Id of each request, in order

    def do_GET(self) -> None:
        answer = json.dumps({"data": [{"id": "served-here"}]}).encode() if self.path == "/v1/models" else b""
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _StandIn.models.append(body.get("model"))
        _StandIn.request_ids.append(self.headers.get("X-Request-Id"))
        bad = any(i >= MODEL.vocab for i in body.get("stop_token_ids", []))
        text = "none of them" if "choice" in (body.get("structured_outputs") or {}) else ""
        if body.get("prompt") == "unsteady":
            text = f"draw {len(_StandIn.models)}"
        served = {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": {"completion_tokens": 0}}
        answer = b"Internal Server Error" if bad else json.dumps(served).encode()
        self.send_response(500 if bad else 200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_each_request_carries_its_own_id_and_a_seeded_one_is_sent_again_alone(stand_in: str) -> None:
    from bench.fuzz_client import send_batch

    _StandIn.models.clear()
    _StandIn.request_ids.clear()
    steady, unsteady = (
        {"model": "tiny", "prompt": "steady", "seed": 3},
        {"model": "tiny", "prompt": "unsteady", "seed": 3},
    )
    sent = send_batch(stand_in, [("/v1/completions", steady), ("/v1/completions", {"model": "tiny"})], 10)
    assert sorted(_StandIn.request_ids) == sorted(sent.ids) and len(set(sent.ids)) == 2  # not repeated unasked
    _StandIn.request_ids.clear()
    sent = send_batch(stand_in, [("/v1/completions", steady)], 10, repeat_seeded=True)
    assert [v.kind for v in sent.verdicts] == ["served"] and len(_StandIn.request_ids) == 3
    sent = send_batch(stand_in, [("/v1/completions", unsteady)], 10, repeat_seeded=True)
    assert [v.kind for v in sent.verdicts] == ["violation"]
    assert sent.verdicts[0].detail.startswith("seed: sent again alone, the texts differ")
    _StandIn.request_ids.clear()
    greedy = send_batch(stand_in, [("/v1/completions", {**unsteady, "temperature": 0})], 10, repeat_seeded=True)
    assert [v.kind for v in greedy.verdicts] == ["served"] and len(_StandIn.request_ids) == 1  # greedy: no promise


def test_a_saved_failure_replays(stand_in: str, tmp_path: Path) -> None:
    from bench.fuzz import save_replay
    from bench.fuzz_client import replay, send_batch

    batch = [
        ("/v1/completions", {"model": "tiny", "prompt": "hello", "min_tokens": 4, "stop_token_ids": [5000000]}),
        ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}),
    ]
    sent = send_batch(stand_in, batch, 10)
    assert [v.kind for v in sent.verdicts] == ["5xx", "served"] and sent.failed
    saved = save_replay(tmp_path, "stock", 3, sent, False, "line 1\nline 2\n")
    record = json.loads(saved.read_text())
    assert saved.name == "stock-00003.json" and record["log"] == ["line 1", "line 2"]
    assert [r["body"] for r in record["requests"]] == [b for _, b in batch]
    _StandIn.models.clear()
    assert [v.kind for v in replay(saved, stand_in)] == ["5xx", "served"]
    assert _StandIn.models == ["served-here"] * 2  # the model this server serves, not the fuzzer's folder


def test_a_served_answer_that_breaks_its_constraint_is_a_violation(stand_in: str) -> None:
    from bench.fuzz_client import send_batch

    choice = {"model": "tiny", "prompt": "yes or no", "structured_outputs": {"choice": ["yes", "no"]}}
    sent = send_batch(
        stand_in, [("/v1/completions", choice), ("/v1/completions", {"model": "tiny", "prompt": "x"})], 10
    )
    assert [v.kind for v in sent.verdicts] == ["violation", "served"] and sent.failed
    assert sent.verdicts[0].detail == ("choice 0 (stop, stop_reason None): 'none of them' is not one of ['yes', 'no']")


def test_a_schemathesis_case_replays_through_the_same_command(stand_in: str, tmp_path: Path) -> None:
    from bench.fuzz_client import replay
    from bench.fuzz_schema import Case

    body = json.dumps({"model": "tiny", "prompt": "x", "min_tokens": 2, "stop_token_ids": [2000]}).encode()
    saved = tmp_path / "schema-5xx-001.json"
    saved.write_text(json.dumps(Case("POST", "/v1/completions", body, "application/json", 500).replay_json()))
    assert [v.kind for v in replay(saved, stand_in)] == ["5xx"]


def test_replay_sends_only_to_this_machine_and_says_why_in_one_line(tmp_path: Path) -> None:
    import subprocess

    fuzz = str(Path(__file__).resolve().parent.parent / "bench" / "fuzz.py")
    elsewhere = subprocess.run(
        [sys.executable, fuzz, "replay", str(tmp_path / "x.json"), "--url", "http://example.org"],
        capture_output=True,
        text=True,
    )
    assert elsewhere.returncode == 2 and "sends only to a server on 127.0.0.1" in elsewhere.stderr
    missing = subprocess.run(
        [sys.executable, fuzz, "replay", str(tmp_path / "x.json"), "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "cannot replay it" in missing.stderr
    assert "Traceback" not in elsewhere.stderr + missing.stderr


def test_a_server_is_up_while_it_runs_and_answers_health(stand_in: str) -> None:
    from bench.fuzz_client import still_up

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        assert still_up(stand_in, alive) and still_up(stand_in, alive, settle=0.5)
        assert not still_up(stand_in, ended) and not still_up(stand_in, None)  # its process has ended
        assert not still_up("http://127.0.0.1:9", alive)  # nothing answers there
    finally:
        alive.kill()
        alive.wait()


def test_a_replay_file_keeps_no_path_of_this_machine(tmp_path: Path) -> None:
    from bench.fuzz import portable, save_replay
    from bench.fuzz_client import Sent

    model = "/tmp/fixpack-fuzz-abc123/tiny-qwen3"
    sent = Sent([("/v1/completions", {"model": model})], [(500, "boom", 0.1)], [judge(500, "boom", False)])
    log = (
        '  File "/tmp/fixpack-fuzz-abc123/env/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 3\n'
        '  File "/usr/lib/python3.11/concurrent/futures/_base.py", line 9\n'
    )
    saved = save_replay(tmp_path, "stock", 1, sent, True, log)
    record = json.loads(saved.read_text())
    assert record["requests"][0]["body"]["model"] == "tiny-qwen3"
    assert record["log"] == [
        '  File "SITE/vllm/v1/engine/core.py", line 3',
        '  File "PYTHON/concurrent/futures/_base.py", line 9',
    ]
    assert portable("no path here") == "no path here"


def test_a_summary_counts_each_failure_by_its_cause(tmp_path: Path) -> None:
    from bench.fuzz import save_replay, summary
    from bench.fuzz_client import Sent

    grammar = {"structured_outputs": {"choice": ["yes"]}, "allowed_token_ids": [5]}
    failed, served = judge(500, "boom", False), judge(200, json.dumps({"choices": []}), False)
    named = Sent([("/v1/completions", grammar)], [(500, "boom", 0.1)], [failed], [RID])
    save_replay(tmp_path, "patched", 1, named, False, "\n".join(REJECTED))
    other = Sent([("/v1/completions", {"n": 2}), ("/v1/completions", {})], [(500, "x", 0.1), (200, "", 0.1)],
                 [failed, served])  # fmt: skip
    save_replay(tmp_path, "patched", 2, other, False, "")
    save_replay(tmp_path, "patched", 3, Sent([("/v1/completions", {})], [(500, "y", 0.1)], [failed]), True, "")
    save_replay(tmp_path, "stock", 1, Sent([("/v1/completions", {})], [(500, "z", 0.1)], [failed]), False, "")
    lines = summary(tmp_path, "patched")
    assert lines[:3] == ["    1  5xx: a death's batch", "    1  5xx: grammar-without-token", "    1  5xx: not listed"]
    assert len(lines) == 4 and lines[3].startswith("not listed: patched-00002.json: HTTP 500")


def test_keep_copies_one_trimmed_file_per_distinct_failing_request_and_an_index(tmp_path: Path) -> None:
    from bench.fuzz import keep_distinct, save_replay
    from bench.fuzz_client import Sent, saved_kinds

    grammar = {"model": "a", "structured_outputs": {"choice": ["yes"]}, "allowed_token_ids": [5]}
    failed = judge(500, "x" * 1000, False)
    log = f"INFO fine\n{REJECTED[0]}\n"
    for number, model in ((1, "a"), (2, "b")):  # the same request under another model's name: not kept again
        sent = Sent([("/v1/completions", {**grammar, "model": model})], [(500, "x" * 1000, 0.1)], [failed], [RID])
        save_replay(tmp_path / "out", "patched", number, sent, False, log)
    kept = keep_distinct(tmp_path / "out", tmp_path / "kept", "patched")
    assert [p.name for p in kept] == ["patched-00001.json"]
    record = json.loads(kept[0].read_text())
    assert len(record["requests"][0]["answer"]) == 300 and record["log"] == [log.splitlines()[1]]
    assert saved_kinds(kept[0]) == ["5xx"]
    index = (tmp_path / "kept" / "INDEX.md").read_text()
    assert "| patched-00001.json | /v1/completions | 5xx |" in index and "grammar-without-token" in index


def test_the_table_has_a_column_of_wrong_answers() -> None:
    from bench.fuzz import HEADER, KINDS, Tally

    tally = Tally("patched", sent=9, batches=4, seconds=60.0, deaths=1)
    tally.kinds.update({kind: n for n, kind in enumerate(KINDS)})
    columns = [c.strip() for c in HEADER.splitlines()[0].strip("|").split("|")]
    row = dict(zip(columns, (c.strip() for c in tally.row().strip("|").split("|"))))
    assert row["wrong answers"] == str(KINDS.index("violation")) and row["hangs"] == str(KINDS.index("hang"))
    assert row["deaths"] == "1" and row["minutes"] == "1.0" and len(row) == len(columns)


def test_a_redirect_is_the_answer_and_never_followed() -> None:
    """Issue 56: the fuzzer sends only to the loopback server it was given; a 3xx naming another host
    (here 127.0.0.2) is judged as the answer, and that host gets nothing."""
    from bench.fuzz_client import send

    reached: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reached.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    try:
        other = ThreadingHTTPServer(("127.0.0.2", 0), Elsewhere)
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    target = f"http://127.0.0.2:{other.server_address[1]}/v1/completions"

    class Redirects(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)  # urllib follows a 302 of a POST as a GET
            self.send_header("Location", target)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    first = ThreadingHTTPServer(("127.0.0.1", 0), Redirects)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (first, other)]
    for t in threads:
        t.start()
    try:
        status, _, _ = send(f"http://127.0.0.1:{first.server_address[1]}", "/v1/completions", {"prompt": "x"}, 10)
    finally:
        for s in (first, other):
            s.shutdown()
            s.server_close()
    assert status == 302 and reached == []
