"""The rank agreement (fixpack/runtime/agree.py) without vLLM: its one message, and its modes in
two ranks of a real torch.distributed default group (gloo, a tcp:// store), each a process of its
own importing the agreement from the runtime check package apply writes. The real vLLM set-up is
in test_agree_realtree.py."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fixpack.installation import plugin
from fixpack.runtime import fixset
from fixpack.runtime.agree import disagreement, ranks_text

FULL = ["rank-exception-fatal", "hybrid-decode-pad", "fix-set-agreement"]


def _record(
    rank: int, fixes: list[str], digest: str | None, host: str = "node-a", drifted: tuple[str, ...] = ()
) -> dict:
    record = {"rank": rank, "host": host, "pid": 100 + rank, "profile": "v0.26.0", "digest": digest, "fixes": fixes}
    return record | {"drifted": list(drifted)}


def test_ranks_are_written_as_runs():
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"


def test_one_message_names_each_fix_set_s_ranks_what_differs_and_the_silent():
    records = [_record(r, FULL, "a" * 16, "node-a" if r < 2 else "node-b") for r in (0, 1, 2)]
    records.append(_record(4, FULL[:1] + FULL[2:], "b" * 16, "node-c"))
    message = disagreement(records, [3], 5, 30.0)
    assert message is not None and message.count("fixpack:") == 1
    assert f"fix set {'a' * 16} (profile v0.26.0, 3 fixes) on ranks 0-1 (node-a), rank 2 (node-b)" in message
    assert f"fix set {'b' * 16} (profile v0.26.0, 2 fixes) on rank 4 (node-c)" in message
    assert "hybrid-decode-pad only on ranks 0-2" in message
    assert "no fix set from rank 3 within 30 s (FIXPACK_AGREE_TIMEOUT)" in message
    assert disagreement(records[:3], [], 3, 30.0) is None


def test_the_same_fixes_over_other_code_are_told_apart():
    message = disagreement([_record(0, FULL, "a" * 16), _record(1, FULL, "c" * 16)], [], 2, 30.0)
    assert message is not None and "the same fixes, other code" in message


def test_a_rank_with_a_drifted_file_sends_no_digest_and_agrees_with_none():
    drifted = ("vllm_gaudi/v1/worker/hpu_input_batch.py",)
    records = [_record(0, FULL, "a" * 16), _record(1, FULL, None, drifted=drifted)]
    message = disagreement(records, [], 2, 30.0)
    assert message is not None
    assert f"fix set {'a' * 16} (profile v0.26.0, 3 fixes) on rank 0 (node-a)" in message
    assert f"no digest (drifted: {drifted[0]}) (profile v0.26.0, 3 fixes) on rank 1 (node-a)" in message
    assert "the same fixes, other code" not in message
    # ranks that all drifted, even on the same file, do not vouch for one another
    both = disagreement([_record(r, FULL, None, drifted=drifted) for r in (0, 1)], [], 2, 30.0)
    assert both is not None and "on ranks 0-1 (node-a)" in both


RANK = """
import json, sys
from datetime import timedelta
import torch.distributed as dist
rank, port = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
from fixpack_runtime_check.agree import agree
try:
    agree()
    agree()  # once per process group: the second call compares nothing
    print("started", flush=True)
except RuntimeError as exc:
    print("stopped", exc, flush=True)
store = dist.distributed_c10d._get_default_store()
key = "fixpack/agree/1/2/tickets"
print("tickets", store.add(key, 0) if store.check([key]) else None, flush=True)
store.set(f"test/done/{rank}", "1")
store.wait(["test/done/0", "test/done/1"], timedelta(seconds=60))
"""


PATCHED = b"def f():\n    return 2\n"


def digest(fixes: list[str]) -> str:
    """The fix set of a rank's site below: ``fixes`` leaving vllm_gaudi/runner.py as PATCHED."""
    row = {"dist": "vllm-gaudi", "path": "vllm_gaudi/runner.py", "sha256": hashlib.sha256(PATCHED).hexdigest()}
    return fixset.digest_of({"release": "v0.26.0", "fixes": fixes, "files": [row]})


def _ranks(tmp_path: Path, mode: str, fixes: list[list[str]], edited: int | None = None) -> list[str]:
    """Each rank's site holds one patched file, ``vllm_gaudi/runner.py``; rank ``edited`` has it
    changed after the apply."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, rank_fixes in enumerate(fixes):
        folder = tmp_path / f"rank{rank}"
        patched = folder / "vllm_gaudi" / "runner.py"
        patched.parent.mkdir(parents=True)
        patched.write_bytes(PATCHED + (b"# edited\n" if rank == edited else b""))
        entry = {"path": "vllm_gaudi/runner.py", "dist": "vllm-gaudi", "module": "vllm_gaudi.runner"}
        entry.update(file=str(patched), sha256=hashlib.sha256(PATCHED).hexdigest(), original=None, pristine=None)
        index = {"format": 2, "mode": "in-place", "profile": "v0.26.0", "release": "v0.26.0", "files": [entry]}
        index.update(fixes=rank_fixes, packages=["vllm_gaudi"])
        index["fix_set"] = {"digest": fixset.digest_of(index), "fixes": rank_fixes}
        for rel, content in plugin.files(json.dumps(index).encode()).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(content)
        env = dict(os.environ, PYTHONPATH=str(folder), FIXPACK_RUNTIME_CHECK=mode, FIXPACK_AGREE_TIMEOUT="20")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK, str(rank), str(port)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return [p.communicate(timeout=120)[0] for p in procs]


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@needs_torch
def test_ranks_that_differ_stop_warn_or_skip_as_the_runtime_check_does(tmp_path: Path):
    stop = _ranks(tmp_path / "stop", "stop", [FULL, FULL[:1]])
    for out in stop:
        assert "stopped fixpack: the 2 ranks of this deployment do not run one fix set" in out, out
        assert "hybrid-decode-pad, fix-set-agreement only on rank 0" in out
    warn = _ranks(tmp_path / "warn", "warn", [FULL, FULL[:1]])
    for out in warn:
        assert "started" in out and "do not run one fix set" in out, out  # the warning, logged
    off = _ranks(tmp_path / "off", "off", [FULL, FULL[:1]])
    for out in off:
        assert "started" in out and "fixpack" not in out.replace("fixpack/agree", ""), out
        assert "tickets None" in out  # nothing written to the store


@needs_torch
def test_a_rank_whose_patched_file_was_edited_is_named_by_both_ranks(tmp_path: Path):
    # the ranks do not run the runtime check first here: the agreement hashes the file itself
    for out in _ranks(tmp_path, "warn", [FULL, FULL], edited=1):
        assert "started" in out and "do not run one fix set" in out, out
        assert f"fix set {digest(FULL)} (profile v0.26.0, 3 fixes) on rank 0 (" in out
        assert "no digest (drifted: vllm_gaudi/runner.py) (profile v0.26.0, 3 fixes) on rank 1 (" in out
        assert "agree on fix set" not in out


@needs_torch
def test_ranks_that_agree_start_once(tmp_path: Path):
    for out in _ranks(tmp_path, "stop", [FULL, FULL]):
        assert "started" in out and "stopped" not in out, out
        assert "tickets 2" in out  # one round, though agree() ran twice: each rank took one ticket
