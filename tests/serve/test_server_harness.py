"""The serve tier's Server harness on stand-in servers (no vLLM): ready on /health, a child in the
same process group, a server that dies, one that never answers; each stopped with its children."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from server import PORT, STARTED, Server, ServerError, logs_on_failure, wait_exits

# Starts a child that sleeps, then serves /health (200) after DELAY seconds; prints the child's pid.
STAND_IN = """
import http.server, subprocess, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"child {child.pid}", flush=True)
time.sleep(delay)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _stand_in(tmp_path: Path, delay: float, **kw) -> Server:
    argv = [sys.executable, "-c", STAND_IN, PORT, str(delay)]
    return Server(argv, env=dict(os.environ), log=tmp_path / "stand-in.log", name="stand-in", **kw)


def _child(server: Server) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in server.text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(server.tail())


def test_ready_on_health_and_stopped_with_its_children(tmp_path: Path) -> None:
    server = _stand_in(tmp_path, 0.5)
    with server:
        assert server.ready_s is not None and server.ready_s >= 0.5
        child = _child(server)
        assert {server.pid, child} <= server.descendants()
    assert not _alive(server.pid) and not _alive(child)
    # the time sheet's figures: its test, up until the stop began, the stop
    assert server in STARTED and server.test.endswith("::test_ready_on_health_and_stopped_with_its_children")
    assert server.up_s is not None and server.up_s >= server.ready_s and server.stop_s is not None


def test_it_serves_on_a_port_it_picks_itself(tmp_path: Path) -> None:
    served, headless = _stand_in(tmp_path, 0.3, poll=0.05), Server(["true"], env={}, log=tmp_path / "x.log")
    assert served.port is not None and served.argv[3] == str(served.port) and headless.port is None
    with served:
        assert served.url("/health") == f"http://127.0.0.1:{served.port}/health"


def test_a_server_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('boom: no model here'); raise SystemExit(3)", PORT]
    server = Server(argv, env=dict(os.environ), log=tmp_path / "dies.log", name="dying")
    with pytest.raises(ServerError, match=r"(?s)dying .* exited with 3 before it was ready.*boom: no model here"):
        with server:
            pass


def test_a_server_never_ready_is_bounded_and_stopped(tmp_path: Path) -> None:
    server = _stand_in(tmp_path, 600, ready_timeout=1.5)
    start = time.monotonic()
    with pytest.raises(ServerError, match="not ready within 2 s"):
        with server:
            pass
    assert time.monotonic() - start < 20
    assert not _alive(server.pid) and not _alive(_child(server))


def test_the_logs_are_printed_when_a_scenario_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    server = _stand_in(tmp_path, 0)
    with pytest.raises(AssertionError, match="a check failed"):
        with logs_on_failure(server), server:
            raise AssertionError("a check failed")
    printed = capsys.readouterr().out
    assert f"--- stand-in (pid {server.pid}): the last" in printed and "child " in printed


def test_wait_exits_waits_for_every_process_of_each_group(tmp_path: Path) -> None:
    # Each leader exits at once; the child it left in its group ends DELAY seconds later.
    leaver = (
        "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(%s)']); sys.exit(4)"
    )
    servers = [
        Server(
            [sys.executable, "-c", leaver % delay],
            env=dict(os.environ),
            log=tmp_path / f"{name}.log",
            name=name,
        )
        for name, delay in (("slow", 2), ("quick", 0))
    ]
    try:
        for server in servers:
            server.start()
        assert wait_exits(servers, 30) == {"slow": 4, "quick": 4}
    finally:
        for server in servers:
            server.stop()
    slow, quick = (server.exited_s for server in servers)
    assert slow is not None and quick is not None and slow >= 2 > quick, (slow, quick)
    assert servers[1].wait_exit(1) == 4 and servers[1].exited_s == quick


def test_wait_exit_is_bounded_and_the_group_is_stopped(tmp_path: Path) -> None:
    server = _stand_in(tmp_path, 600)
    server.start()
    try:
        with pytest.raises(ServerError, match="stand-in .* still running 1 s after its start"):
            server.wait_exit(1)
    finally:
        server.stop()
    assert not _alive(server.pid) and not _alive(_child(server))
