"""A real ``vllm serve`` process for the tests, after vLLM's own ``RemoteOpenAIServer``.

``Server(argv, env=..., port=..., log=...)`` starts ``argv`` (which must serve on ``port`` on
127.0.0.1) in a session of its own with its output in ``log``; ``wait_ready()`` polls ``/health``
until it answers 200, the process exits, or a deadline passes (never a fixed sleep); ``stop()``
ends the whole process group (SIGTERM, then SIGKILL after a bound) by its pid. As a context
manager it starts, waits and always stops. A failure says which server, how, and ends with the
tail of its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

READY_TIMEOUT = float(os.environ.get("FIXPACK_SERVE_READY_TIMEOUT", "300"))  # a TP 2 start took 60-110 s here
STOP_TIMEOUT = 30.0
TAIL_LINES = 60


class ServerError(AssertionError):
    """A server that did not start, died, or did not answer (with its log's tail)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        port: int,
        log: Path,
        name: str = "server",
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.argv, self.env, self.port, self.log, self.name = argv, env, port, log, name
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None  # seconds from start to the first 200 from /health

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            # A session of its own: its pid is the process group's id, which its children share.
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._started = time.monotonic()
        return self

    def wait_ready(self) -> float:
        """Seconds it took for ``/health`` to answer 200; ServerError if it exits or the deadline passes."""
        assert self.proc is not None
        deadline = self._started + self.ready_timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(self.describe(f"exited with {code} before it was ready"))
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=5) as answer:
                    if answer.status == 200:
                        self.ready_s = time.monotonic() - self._started
                        return self.ready_s
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerError(self.describe(f"not ready within {self.ready_timeout:.0f} s"))
            time.sleep(0.5)

    def post(self, path: str, payload: dict, timeout: float = 120) -> dict:
        request = urllib.request.Request(
            self.url(path), data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise ServerError(self.describe(f"POST {path} answered {exc.code}: {exc.read()[:500]!r}")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(self.describe(f"POST {path} failed: {exc}")) from None

    def get(self, path: str, timeout: float = 30) -> dict:
        with urllib.request.urlopen(self.url(path), timeout=timeout) as answer:
            return json.loads(answer.read())

    def descendants(self) -> set[int]:
        """The pids of this server's process tree now (from /proc), its own included."""
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))
        found, todo = set(), [self.pid]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, []))
        return found

    def stop(self) -> None:
        """End the process group: SIGTERM, then SIGKILL after STOP_TIMEOUT s; reap the leader."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and _group_alive(pgid):
            if self.proc.poll() is None:
                try:
                    self.proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.2)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=STOP_TIMEOUT)

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def describe(self, what: str) -> str:
        return (
            f"{self.name} (pid {self.proc.pid if self.proc else '-'}, port {self.port}) {what}; "
            f"the last lines of {self.log}:\n{self.tail()}"
        )

    def __enter__(self) -> Server:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def logs_on_failure(*servers: Server):
    """On any failure inside, print the tail of each server's log that was started (pytest shows it)."""
    try:
        yield
    except BaseException:
        for server in servers:
            if server.proc is not None:
                print(f"--- {server.name} (pid {server.proc.pid}): the last {TAIL_LINES} lines of {server.log}")
                print(server.tail(), flush=True)
        raise
