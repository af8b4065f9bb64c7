"""A real ``vllm serve`` process for the tests and the bench, after vLLM's own ``RemoteOpenAIServer``.

``Server(argv, env=..., log=...)`` starts ``argv`` in a session of its own with its output in
``log``. A server that serves writes ``{port}`` where its port goes in ``argv``: it picks a free
loopback port itself (``port`` is None for a process that serves nothing, such as a headless node).
``wait_ready()`` polls ``/health`` every ``poll`` seconds until it answers 200, the process exits,
or a deadline passes (never a fixed sleep); ``wait_exit()`` (``wait_exits()`` for several at once)
waits, bounded, until the process and every other process of its group have ended (a process
expected to stop on its own), and notes when; ``stop()`` ends the whole process group (SIGTERM,
then SIGKILL after a bound) by its pid; ``client()`` is an ``openai`` client of it. As a context
manager it starts, waits and always stops. A failure says which server, how, and ends with the
tail of its log. vLLM's side (its environment, ``vllm serve``'s arguments, the entry point before
it) is ``vllm_serve.py``, which builds these.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openai

READY_TIMEOUT = float(os.environ.get("FIXPACK_SERVE_READY_TIMEOUT", "300"))  # a TP 2 start took 60-110 s here
POLL = 0.5
PORT = "{port}"  # where a serving server's own port goes in its argv
STOP_TIMEOUT = 30.0
TAIL_LINES = 60


class ServerError(AssertionError):
    """A server that did not start, died, or did not answer (with its log's tail)."""


# Every server this process started, in order: the serve tier's time sheet (tier.time_sheet) reads them.
STARTED: list[Server] = []


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
        log: Path,
        name: str = "server",
        ready_timeout: float = READY_TIMEOUT,
        poll: float = POLL,
    ) -> None:
        self.port = free_port() if any(PORT in a for a in argv) else None
        self.argv = [a.replace(PORT, str(self.port)) for a in argv]
        self.env, self.log, self.name = env, log, name
        self.ready_timeout, self.poll = ready_timeout, poll
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None  # seconds from start to the first 200 from /health
        self.exited_s: float | None = None  # seconds from start until no process of its group was left
        self.test = ""  # the test that started it (pytest's PYTEST_CURRENT_TEST, its node id)
        self.up_s: float | None = None  # seconds from start until the first stop() began
        self.stop_s: float | None = None  # seconds that first stop() took

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def url(self, path: str) -> str:
        assert self.port is not None, f"{self.name} serves no port"
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
        self.test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]
        STARTED.append(self)
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
            time.sleep(self.poll)

    def ended(self) -> int | None:
        """Its exit code once it and every process of its group have ended (zombies not counted),
        else None; the first call that sees it ended sets ``exited_s``."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None or group_members(self.proc.pid):
            return None
        if self.exited_s is None:
            self.exited_s = time.monotonic() - self._started
        return code

    def wait_exit(self, timeout: float) -> int:
        """Its exit code, once it and every process of its group have ended; ServerError if any is
        still running ``timeout`` s after the start (the caller stops it)."""
        return wait_exits([self], timeout)[self.name]

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

    def client(self, timeout: float = 120) -> openai.OpenAI:
        """The official client, without retries: a retried 500 would hide the answer under test."""
        import openai  # 1.2 s to import, and only the tests that speak through it need it

        return openai.OpenAI(base_url=self.url("/v1"), api_key="none", max_retries=0, timeout=timeout)

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
        began = time.monotonic()
        if self.up_s is None:
            self.up_s = began - self._started
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
        if self.stop_s is None:
            self.stop_s = time.monotonic() - began

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


def wait_exits(servers: list[Server], timeout: float) -> dict[str, int]:
    """Wait for several at once (each one's ``exited_s`` is its own): their exit codes by name;
    ServerError naming the first still running ``timeout`` s after its start."""
    codes: dict[str, int] = {}
    while True:
        for server in servers:
            if server.name not in codes:
                code = server.ended()
                if code is not None:
                    codes[server.name] = code
        if len(codes) == len(servers):
            return codes
        for server in servers:
            if server.name not in codes and time.monotonic() > server._started + timeout:
                assert server.proc is not None
                code = server.proc.poll()
                left = sorted(group_members(server.proc.pid))
                state = "running" if code is None else f"exited with {code}, processes {left} of its group left"
                raise ServerError(server.describe(f"still {state} {timeout:.0f} s after its start"))
        time.sleep(0.25)


def group_members(pgid: int) -> set[int]:
    """The pids of process group ``pgid`` still running (from /proc; zombies, which the init here
    reaps late, are not counted)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.add(int(entry))
    return found


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


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
