"""The serve tier's fixtures: the vLLM environment (built or reused by ``build_env.py``) and the tiny model.

The tier runs only where ``FIXPACK_SERVE_ENV`` names the environment's folder (``.ci/run`` sets it
under its work folder and builds it first); otherwise, and where the environment cannot be built
(no package index), every test skips saying why. A build whose checks fail fails the tests.
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

MODEL_TIMEOUT = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "serve_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serve)


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The servers' TorchInductor cache in the session's own temporary folder: shared by the
    servers of one run, and removed with it, where by default it grows in /tmp run after run
    (5.6 GB seen)."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("torchinductor"))


@pytest.fixture(scope="session")
def serve_env() -> ServeEnv:
    error = os.environ.get("FIXPACK_SERVE_ENV_ERROR")  # .ci/run's build failed: "exit N: why"
    if error:
        if error.startswith("exit 3"):
            pytest.skip(f"the serve environment could not be built: {error}")
        pytest.fail(f"the serve environment's build failed its checks: {error}")
    root = os.environ.get("FIXPACK_SERVE_ENV")
    if not root:
        pytest.skip(
            "FIXPACK_SERVE_ENV is not set: the serve tier runs real `vllm serve` processes from a venv "
            "built there by tests/serve/build_env.py (3.1 GB of downloads; .ci/run sets it)"
        )
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE / "build_env.py"), root], capture_output=True, text=True)
    output = (done.stdout + done.stderr).strip()
    print(output, f"\nserve: the environment ready in {time.monotonic() - start:.1f} s", flush=True)
    if done.returncode == 3:
        pytest.skip(f"the serve environment could not be built: {output.splitlines()[-1]}")
    if done.returncode != 0:
        pytest.fail(f"build_env.py {root} exited {done.returncode}:\n{output}")
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
