"""The malformed-input sweep of issue 46: Schemathesis against a server's OpenAPI schema.

``schema_sweep(url, seed=..., max_examples=..., seconds=..., workdir=...)`` runs Schemathesis 4.32
(``python -m schemathesis.cli run``, a subprocess in a session of its own) against ``{url}/openapi.json``,
only on the given paths (``/v1/completions`` and ``/v1/chat/completions`` by default), with the
``not_a_server_error`` check, the seed, at most ``max_examples`` cases per operation and phase, and a
wall-clock bound: Schemathesis is given ``--max-time`` a little under ``seconds`` and its whole
process group is killed at ``seconds`` if it is still running. With ``--max-time`` Schemathesis 4.32
repeats its cycles (``max_examples`` bounds each) until the time is spent, so a sweep lasts about
``seconds``; which cases it reaches in that time depends on the server's speed as well as the seed.
Its crash cache is turned off (a ``schemathesis.toml`` in ``workdir``), so earlier runs change nothing.

Schemathesis's own reports say which checks failed, not what every request got, so the requests go
through a recording proxy on 127.0.0.1 (standard library ``ThreadingHTTPServer``) that forwards each
one to the server and notes its method, path, body, status and answer. ``SweepResult`` counts them
(sent, 2xx, 4xx, 5xx, transport errors and timeouts) and keeps each 5xx case; its JUnit report is kept
in ``workdir`` beside them for the failures as Schemathesis saw them. ``replay(path, url)`` sends a
saved case again and returns the status it gets; ``write_replays`` writes ``DIR/schema-5xx-NNN.json``,
one replay file per 5xx answer (method, path, body, status, response text).

``bench/fuzz.py run --schema-seconds N`` runs it against the servers it starts itself. Needs
``schemathesis>=4.32,<4.33`` in the interpreter that runs it (the ``test`` extra), or a ``st`` on ``PATH``.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEFAULT_PATHS = ("/v1/completions", "/v1/chat/completions")
REQUEST_TIMEOUT = 60.0  # a generation on 2 CPU cores of the tiny model takes seconds; a hang is an error
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of Schemathesis's process group
# Headers that describe one hop, not the message: the proxy sets its own (RFC 9110 section 7.6.1).
HOP_HEADERS = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}


@dataclasses.dataclass
class Case:
    """One request the proxy forwarded, and what came of it (``status`` None: a transport error)."""

    method: str
    path: str
    body: bytes
    content_type: str | None
    status: int | None = None
    response: str = ""
    error: str | None = None

    def replay_json(self) -> dict:
        """The replay file's content: the body as text where it is UTF-8, else as base64."""
        data: dict = {"method": self.method, "path": self.path, "status": self.status, "response": self.response}
        try:
            data["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            data["body"] = None
            data["body_base64"] = base64.b64encode(self.body).decode("ascii")
        data["content_type"] = self.content_type
        return data


@dataclasses.dataclass
class SweepResult:
    """The counts over the swept paths (the schema's own fetch not counted) and every 5xx case."""

    sent: int = 0
    ok_2xx: int = 0
    client_4xx: int = 0
    server_5xx: int = 0
    errors: int = 0  # no answer: connection refused or reset, timeout, unfinished when the sweep ended
    other: int = 0  # 1xx/3xx: none expected from these paths
    by_status: dict[int, int] = dataclasses.field(default_factory=dict)  # 400 and 405 and 422 apart
    cases_5xx: list[Case] = dataclasses.field(default_factory=list)
    exit_code: int | None = None  # Schemathesis's (1: a check failed); None when it was killed
    killed: bool = False  # it ran past ``seconds``
    elapsed_s: float = 0.0
    junit: Path | None = None  # Schemathesis's JUnit XML report, where it wrote one
    st_failures: int = 0  # failing test cases in the JUnit report (one per operation and kind)

    def kinds(self) -> dict[str, list[Case]]:
        """The 5xx cases grouped by their answer, numbers and input values blanked (one kind per cause)."""
        groups: dict[str, list[Case]] = {}
        for case in self.cases_5xx:
            groups.setdefault(kind_of(case.response), []).append(case)
        return groups

    def row(self) -> str:
        """One table row: counts, then each distinct 5xx kind with its count."""
        kinds = "; ".join(f"{len(cases)}x {kind[:120]}" for kind, cases in self.kinds().items()) or "-"
        state = "killed" if self.killed else f"exit {self.exit_code}"
        return (
            f"| {self.sent} sent | {self.ok_2xx} 2xx | {self.client_4xx} 4xx | {self.server_5xx} 5xx "
            f"| {self.errors} errors | {self.elapsed_s:.0f} s, {state} | {kinds} |"
        )


def kind_of(response: str) -> str:
    """A 5xx answer's message with what varies between cases blanked, so one cause is one kind."""
    try:
        data = json.loads(response)
    except ValueError:
        data = None
    message = response
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict):
            message = str(inner.get("message", inner.get("detail", inner)))
        else:
            message = str(inner)
    message = re.sub(r"input_value=.*?(, input_type|\]|$)", r"input_value=...\1", message)
    message = re.sub(r"\d+", "N", message)
    return " ".join(message.split())[:300]


class _Recorder:
    """The cases the proxy saw, in order, shared by its handler threads."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.base = parsed.path.rstrip("/")
        self.cases: list[Case] = []
        self.lock = threading.Lock()


def _handler(recorder: _Recorder) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive towards Schemathesis, as the server itself would

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            case = Case(self.command, self.path, body, self.headers.get("Content-Type"))
            with recorder.lock:
                recorder.cases.append(case)  # counted as sent now; an unfinished one ends as an error
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            conn = http.client.HTTPConnection(recorder.host, recorder.port, timeout=REQUEST_TIMEOUT)
            try:
                conn.request(self.command, recorder.base + self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()  # a stream (SSE) is read to its end: the status is all that matters
                reply_headers = [(k, v) for k, v in answer.getheaders() if k.lower() not in HOP_HEADERS]
                status, reason = answer.status, answer.reason
            except (OSError, http.client.HTTPException) as exc:
                case.error = f"{type(exc).__name__}: {exc}"
                # 502 from the proxy itself, so Schemathesis sees a failure too; not counted as the server's 5xx.
                status, reason, data = 502, "Bad Gateway", f"fuzz_schema proxy: {case.error}".encode()
                reply_headers = [("Content-Type", "text/plain")]
            finally:
                conn.close()
            if case.error is None:
                case.response = data.decode("utf-8", errors="replace")
                case.status = status
            try:
                self.send_response(status, reason)
                for key, value in reply_headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            except OSError:
                pass  # Schemathesis gave up on it (its timeout, or it was killed): the case is recorded

        def __getattr__(self, name: str) -> Callable[[], None]:
            # http.server looks up do_<METHOD> and answers 501 itself where there is none; Schemathesis
            # also sends TRACE and other methods, which must reach the server and be recorded too.
            if name.startswith("do_"):
                return self._forward
            raise AttributeError(name)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per request on stderr would drown the harness's output

    return Forward


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck on a hung server must not keep the process alive

    def handle_error(self, request: object, client_address: object) -> None:
        # Schemathesis drops keep-alive connections when it ends or times out a request; the reset that
        # follows is expected and its traceback on stderr would bury the harness's output.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class RecordingProxy:
    """A loopback HTTP proxy in front of ``upstream`` that records every request and its answer."""

    def __init__(self, upstream: str) -> None:
        self.recorder = _Recorder(upstream)
        self.server = _QuietServer(("127.0.0.1", 0), _handler(self.recorder))
        self.thread = threading.Thread(target=self.server.serve_forever, name="fuzz-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def cases(self) -> list[Case]:
        with self.recorder.lock:
            return list(self.recorder.cases)


def schemathesis_command() -> list[str]:
    """How to start Schemathesis: this interpreter's module where it is installed, else ``st`` on PATH."""
    if importlib.util.find_spec("schemathesis") is not None:
        return [sys.executable, "-m", "schemathesis.cli"]
    st = shutil.which("st") or shutil.which("schemathesis")
    if st is None:
        raise RuntimeError("schemathesis is not installed: pip install 'schemathesis>=4.32,<4.33'")
    return [st]


def _stop_group(proc: subprocess.Popen) -> None:
    """End Schemathesis's whole process group (its workers included): SIGTERM, then SIGKILL after a bound."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, STOP_GRACE)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _junit_failures(path: Path) -> int:
    if not path.is_file():
        return 0
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return 0  # cut short by the kill
    return sum(1 for case in root.iter("testcase") if case.find("failure") is not None)


def tally(cases: Iterable[Case], paths: Sequence[str]) -> SweepResult:
    """Count the cases whose path (query left off) is one of ``paths``."""
    result = SweepResult()
    for case in cases:
        if urllib.parse.urlsplit(case.path).path not in paths:
            continue  # the schema's fetch, or a path Schemathesis was not asked to test
        result.sent += 1
        if case.status is not None:
            result.by_status[case.status] = result.by_status.get(case.status, 0) + 1
        if case.status is None:
            result.errors += 1
        elif 200 <= case.status < 300:
            result.ok_2xx += 1
        elif 400 <= case.status < 500:
            result.client_4xx += 1
        elif case.status >= 500:
            result.server_5xx += 1
            result.cases_5xx.append(case)
        else:
            result.other += 1
    return result


def schema_sweep(
    url: str,
    *,
    seed: int,
    max_examples: int,
    seconds: float,
    paths: Sequence[str] = DEFAULT_PATHS,
    workdir: Path,
) -> SweepResult:
    """Run Schemathesis against ``{url}/openapi.json`` through the recording proxy; the counts and 5xx cases."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    junit = workdir / "schemathesis-junit.xml"
    junit.unlink(missing_ok=True)
    log = workdir / "schemathesis.log"
    # Schemathesis keeps the crashes it found in a cache (.schemathesis/ in its working folder) and
    # replays them in later runs: off, so the seed alone decides what a sweep sends.
    config = workdir / "schemathesis.toml"
    config.write_text("[cache]\nenabled = false\n")
    start = time.monotonic()
    with RecordingProxy(url.rstrip("/")) as proxy:
        argv = [
            *schemathesis_command(),
            "--config-file",
            str(config),
            "run",
            f"{proxy.url}/openapi.json",
            "--url",
            proxy.url,  # the schema may name servers of its own; every request must go through the proxy
            *(arg for path in paths for arg in ("--include-path", path)),
            "--checks",
            "not_a_server_error",
            "--seed",
            str(seed),
            "--max-examples",
            str(max_examples),
            # Its own bound a little under ours, so it usually ends by itself and writes its report.
            "--max-time",
            str(max(1, int(seconds - STOP_GRACE))),
            "--workers",
            "1",  # one request at a time: the server shares 2 cores with everything else
            "--continue-on-failure",  # the sweep counts answers; stopping an operation at its first 5xx hides the rest
            "--suppress-health-check",
            "all",  # a slow CPU server trips too_slow, which would end the operation
            "--request-timeout",
            str(REQUEST_TIMEOUT),
            "--generation-database",
            "none",  # no examples carried over from an earlier run: the seed alone decides
            "--report",
            "junit",
            "--report-junit-path",
            str(junit),
            "--no-color",
        ]
        with open(log, "wb") as out:
            # A session of its own: its pid is the group's id, so the kill reaches any process it starts.
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=workdir,  # whatever else it writes stays in workdir, not in the caller's folder
            )
        killed = False
        try:
            exit_code: int | None = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            killed, exit_code = True, None
        finally:
            if proc.poll() is None:
                _stop_group(proc)
        cases = proxy.cases
    result = tally(cases, paths)
    result.exit_code, result.killed = exit_code, killed
    result.elapsed_s = time.monotonic() - start
    if junit.is_file():
        result.junit, result.st_failures = junit, _junit_failures(junit)
    return result


def write_replays(result: SweepResult, out: Path) -> list[Path]:
    """One ``schema-5xx-NNN.json`` per 5xx case in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for number, case in enumerate(result.cases_5xx, 1):
        path = out / f"schema-5xx-{number:03d}.json"
        path.write_text(json.dumps(case.replay_json(), indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def replay(path: Path, url: str, timeout: float = REQUEST_TIMEOUT) -> tuple[int, str]:
    """Send a saved case to ``url`` again: the status and the answer's text."""
    data = json.loads(Path(path).read_text())
    body = data["body"].encode("utf-8") if data.get("body") is not None else base64.b64decode(data["body_base64"])
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port or 80, timeout=timeout)
    try:
        headers = {"Content-Type": data["content_type"]} if data.get("content_type") else {}
        conn.request(data["method"], parsed.path.rstrip("/") + data["path"], body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode("utf-8", errors="replace")
    finally:
        conn.close()
