"""bench/fuzz_schema.py against a stand-in server: no vLLM, a standard-library HTTP server on 127.0.0.1.

The stand-in publishes an OpenAPI schema of one POST path and answers as vLLM 0.26.0 does to the
malformed bodies the real sweep found: 500 for a JSON body that is not an object (vLLM's validator
calls ``.get`` on it); also 500 for a negative ``n`` (a rule the stand-in forgot, so that every run
finds a 5xx), 400 for an object its rules refuse, 200 otherwise, and 405 for methods other than GET
and POST. Schemathesis runs as the sweep's subprocess, so these tests need it installed (the ``test``
extra) and skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzz_schema import Case, kind_of, replay, schema_sweep, tally, write_replays  # noqa: E402

needs_schemathesis = pytest.mark.skipif(
    importlib.util.find_spec("schemathesis") is None and shutil.which("st") is None,
    reason="schemathesis is not installed (pip install 'schemathesis>=4.32,<4.33', the test extra)",
)

PATH = "/v1/echo"
SCHEMA = {
    "openapi": "3.0.3",
    "info": {"title": "stand-in", "version": "1"},
    "paths": {
        PATH: {
            "post": {
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "n": {"type": "integer", "minimum": 0, "maximum": 100},
                                    "text": {"type": "string", "maxLength": 8},
                                },
                                "required": ["n"],
                            }
                        }
                    },
                },
                "responses": {"200": {"description": "ok"}, "400": {"description": "refused"}},
            }
        },
        # Not swept: a path outside ``paths`` must be neither tested nor counted.
        "/v1/other": {"post": {"responses": {"200": {"description": "ok"}}}},
    },
}


class StandIn:
    """The stand-in server; ``seen`` is every (method, path, status) it answered, for the cross-check."""

    def __init__(self, hang: bool = False) -> None:
        self.seen: list[tuple[str, str, int]] = []
        self.release = threading.Event()  # a hanging stand-in waits on it, so the test can end its handlers
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                outer.seen.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/openapi.json":
                    self._answer(200, SCHEMA)
                else:
                    self._answer(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if hang:
                    outer.release.wait(60)
                if self.path != PATH:
                    self._answer(404, {"detail": "Not Found"})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._answer(400, {"error": {"message": "invalid JSON", "code": 400}})
                    return
                if not isinstance(body, dict):
                    # What vLLM's before-validator does with a list, string, number or bool body.
                    message = f"'{type(body).__name__}' object has no attribute 'get'"
                    self._answer(500, {"error": {"message": message, "type": "InternalServerError", "code": 500}})
                    return
                n = body.get("n")
                if not isinstance(n, int) or isinstance(n, bool) or n > 100:
                    self._answer(400, {"error": {"message": "n must be an integer in [0, 100]", "code": 400}})
                    return
                if n < 0:
                    # A rule the server forgot: found by any run, whatever share of the time the phase
                    # that sends non-object bodies gets (Schemathesis divides its --max-time by phase).
                    message = "list index out of range"
                    self._answer(500, {"error": {"message": message, "type": "InternalServerError", "code": 500}})
                    return
                self._answer(200, {"echo": n})

            def _refuse(self) -> None:
                # Schemathesis tries methods the schema does not name; FastAPI answers them 405, and so
                # does the stand-in (http.server's own 501 would count as a server error).
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(405, {"detail": "Method Not Allowed"})

            def __getattr__(self, name: str) -> Callable[[], None]:
                if name.startswith("do_"):  # PUT, DELETE, TRACE, QUERY, ...: every method but GET and POST
                    return self._refuse
                raise AttributeError(name)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


@needs_schemathesis
def test_sweep_counts_saves_and_replays_5xx(stand_in: StandIn, tmp_path: Path) -> None:
    # seconds bounds the run: with its --max-time Schemathesis repeats its cycles until the time is spent.
    result = schema_sweep(stand_in.url, seed=1, max_examples=20, seconds=12, paths=(PATH,), workdir=tmp_path)
    log = (tmp_path / "schemathesis.log").read_text()
    assert not result.killed, log
    assert result.exit_code == 1, log  # not_a_server_error failed: the 500s were found
    assert result.errors == 0 and result.other == 0
    assert result.sent == result.ok_2xx + result.client_4xx + result.server_5xx
    assert result.ok_2xx > 0 and result.client_4xx > 0 and result.server_5xx > 0, result.row()

    # The proxy's counts are what the stand-in answered on the swept path; nothing else was tested.
    answered = [status for method, path, status in stand_in.seen if path.split("?")[0] == PATH]
    assert len(answered) == result.sent
    assert answered.count(500) == result.server_5xx == len(result.cases_5xx)
    assert sum(200 <= s < 300 for s in answered) == result.ok_2xx
    assert not [path for _, path, _ in stand_in.seen if path.startswith("/v1/other")]

    for case in result.cases_5xx:
        assert (case.method, case.status) == ("POST", 500)
        body = json.loads(case.body)
        if isinstance(body, dict):
            assert body["n"] < 0 and "list index out of range" in case.response
        else:
            assert "object has no attribute 'get'" in case.response
    assert set(result.kinds()) <= {"list index out of range"} | {
        f"'{name}' object has no attribute 'get'" for name in ("list", "str", "int", "float", "bool", "NoneType")
    }
    assert result.junit is not None and result.st_failures >= 1
    assert f"{result.server_5xx} 5xx" in result.row()

    files = write_replays(result, tmp_path / "out")
    assert [f.name for f in files] == [f"schema-5xx-{i:03d}.json" for i in range(1, len(result.cases_5xx) + 1)]
    saved = json.loads(files[0].read_text())
    assert saved["method"] == "POST" and saved["path"] == PATH and saved["status"] == 500
    assert saved["body"] == result.cases_5xx[0].body.decode() and saved["response"]
    before = len(stand_in.seen)
    status, text = replay(files[0], stand_in.url)
    assert status == 500 and json.loads(text) == json.loads(saved["response"])
    assert len(stand_in.seen) == before + 1


@needs_schemathesis
def test_sweep_is_killed_at_its_bound(tmp_path: Path) -> None:
    # A server that never answers: Schemathesis waits on its request past --max-time, so the sweep kills it.
    server = StandIn(hang=True)
    server.thread.start()
    try:
        result = schema_sweep(server.url, seed=1, max_examples=5, seconds=8, paths=(PATH,), workdir=tmp_path)
    finally:
        server.release.set()
        server.server.shutdown()
        server.server.server_close()
    assert result.killed and result.exit_code is None
    assert result.elapsed_s < 8 + 2 * 5 + 5  # the bound, SIGTERM's and SIGKILL's grace, and slack
    assert result.sent >= 1 and result.errors == result.sent  # unfinished when it was killed: no answer


def test_tally_and_replay_files_without_schemathesis(tmp_path: Path) -> None:
    cases = [
        Case("GET", "/openapi.json", b"", None, 200),
        Case("POST", "/v1/completions?x=1", b"{}", "application/json", 400, "{}"),
        Case("POST", "/v1/completions", b'{"prompt": "a"}', "application/json", 200, "{}"),
        Case("POST", "/v1/completions", b"\xff\xfe", "application/json", 500, '{"error": {"message": "bad 12"}}'),
        Case("POST", "/v1/chat/completions", b"[]", "application/json", None, "", "TimeoutError: timed out"),
    ]
    result = tally(cases, ("/v1/completions", "/v1/chat/completions"))
    assert (result.sent, result.ok_2xx, result.client_4xx, result.server_5xx, result.errors) == (4, 1, 1, 1, 1)
    assert result.by_status == {200: 1, 400: 1, 500: 1}
    assert kind_of(result.cases_5xx[0].response) == "bad N"
    (saved,) = write_replays(result, tmp_path)
    data = json.loads(saved.read_text())
    assert data["body"] is None and data["body_base64"] == "//4="  # not UTF-8: kept byte for byte
