"""The serve tier's fixtures: the vLLM environment (built or reused by ``build_env.py``) and the tiny model.

The tier is asked for by ``FIXPACK_SERVE_ENV``, the environment's folder (``.ci/run`` sets it under
its work folder and builds it first). Not asked for, every test skips saying so. Asked for, a tier
that does not run is a failure of the run, never a quiet skip: an environment that cannot be built
here fails every test with the reason, and a serve test skipped for any reason fails the session.
The run's summary says how many serve tests ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_env import ServeEnv  # noqa: E402
from server import STARTED  # noqa: E402
from tier import Served, Tally, time_sheet  # noqa: E402

MODEL_TIMEOUT = 300
ASKED = "FIXPACK_SERVE_ENV"  # set: the tier must run (.ci/run sets it)
TALLY = Tally()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "serve_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serve)
            TALLY.collected.add(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid in TALLY.collected:
        TALLY.note(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Asked for, a tier whose tests did not all run fails the session (exit 1), whatever else passed."""
    if TALLY.collected and os.environ.get(ASKED) and TALLY.not_run() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.collected:
        terminalreporter.write_line(TALLY.summary(bool(os.environ.get(ASKED))))
        served = [Served(s.test, s.ready_s, s.up_s, s.stop_s) for s in STARTED if s.test in TALLY.collected]
        if served:  # where the tier's time went (issue 58): each test's servers
            for line in time_sheet(served):
                terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The servers' TorchInductor cache in the session's own temporary folder: shared by the
    servers of one run, and removed with it, where by default it grows in /tmp run after run
    (5.6 GB seen)."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("torchinductor"))


@pytest.fixture(scope="session")
def serve_env() -> ServeEnv:
    root = os.environ.get(ASKED)
    if not root:
        pytest.skip(
            f"{ASKED} is not set: the serve tier runs real `vllm serve` processes from a venv "
            "built there by tests/serve/build_env.py (3.1 GB of downloads; .ci/run sets it)"
        )
    error = os.environ.get("FIXPACK_SERVE_ENV_ERROR")  # .ci/run's build failed: "exit N: why"
    if error:
        pytest.fail(f"the serve tier was asked for ({ASKED}) and its environment was not built: {error}")
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE / "build_env.py"), root], capture_output=True, text=True)
    output = (done.stdout + done.stderr).strip()
    print(output, f"\nserve: the environment ready in {time.monotonic() - start:.1f} s", flush=True)
    if done.returncode != 0:
        asked = f"the serve tier was asked for ({ASKED})"
        pytest.fail(f"{asked} and build_env.py {root} exited {done.returncode}:\n{output}")
    return ServeEnv(Path(root).absolute())


def make_model(serve_env: ServeEnv, factory: pytest.TempPathFactory, script: str, name: str, what: str) -> Path:
    """A tiny model made by ``script`` (run under the serve environment's interpreter, offline)."""
    out = factory.mktemp("serve") / name
    start = time.monotonic()
    done = subprocess.run(
        [str(serve_env.python), str(HERE / script), str(out)],
        capture_output=True,
        text=True,
        timeout=MODEL_TIMEOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        pytest.fail(f"{script} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    print(f"serve: {what} made in {time.monotonic() - start:.1f} s", flush=True)
    return out


@pytest.fixture(scope="session")
def tiny_model(serve_env: ServeEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(serve_env, tmp_path_factory, "make_model.py", "tiny-qwen3", "the tiny model")


@pytest.fixture(scope="session")
def sp_model(serve_env: ServeEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3 with a SentencePiece tokenizer of fewer pieces than its ids (make_sp_model.py)."""
    return make_model(serve_env, tmp_path_factory, "make_sp_model.py", "tiny-qwen3-spm", "the SentencePiece model")
