"""Ranks agree at start, in the real vLLM 0.26.0 distributed set-up on a CPU.

One site is built from the real trees and copied once per rank (as each node of a deployment has
its own image); each scenario applies to each rank's site what that node would run (the profile
with its opt-ins, one opt-in fewer, or nothing: reverted, no fixpack at all). Each rank is a
process of its own with its own site on PYTHONPATH: it loads the general plugins as a vLLM worker
does (VLLM_PLUGINS names fixpack's only, since vllm-gaudi's import habana_frameworks), then runs
vLLM's init_distributed_environment (gloo, tcp:// on 127.0.0.1) and
ensure_model_parallel_initialized, which the fix fix-set-agreement makes compare the ranks' fix
sets. Needs FIXPACK_SRC_VLLM_GAUDI, FIXPACK_SRC_VLLM and vLLM's Python dependencies; skipped,
saying which is missing, otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import GAUDI_COMMIT, write_dist
from realtree import PROFILE, REALTREE, SRC_GAUDI, SRC_VLLM, opt_ins_of, package_files, run_python

pytestmark = REALTREE
WORLD = 4
AGREE_TIMEOUT = 8.0
PLUGIN = "fixpack_runtime_check"  # the entry point's name: vllm-gaudi's plugins stay out

# A vLLM worker's start, up to the model load. After it, a barrier on the store (as the first
# collective of the model load would) keeps rank 0, the store's host, up until every rank is done.
RANK = """
import os, sys, time
from datetime import timedelta
rank, world, port = map(int, sys.argv[1:4])
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment
import torch.distributed as dist
with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
    init_distributed_environment(world_size=world, rank=rank, distributed_init_method=f"tcp://127.0.0.1:{port}",
                                 local_rank=rank, backend="gloo")
    start = time.monotonic()
    try:
        ensure_model_parallel_initialized(world, 1)
    except RuntimeError:
        print(f"AGREE-TEST stopped rank={rank} after={time.monotonic() - start:.2f}", flush=True)
        raise
    print(f"AGREE-TEST started rank={rank}", flush=True)
    store = dist.distributed_c10d._get_default_store()
    store.set(f"test/done/{rank}", "1")
    store.wait([f"test/done/{r}" for r in range(world)], timedelta(seconds=120))
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One site per rank, copies of one built from the real trees (pristine)."""
    work = tmp_path_factory.mktemp("agree")
    base = work / "base"
    gaudi = package_files(Path(SRC_GAUDI), "vllm_gaudi")  # type: ignore[arg-type]
    gaudi.pop("vllm_gaudi/_version.py", None)
    write_dist(base, "vllm-gaudi", "0.26.0", gaudi, commit=GAUDI_COMMIT)
    write_dist(base, "vllm", "0.26.0", package_files(Path(SRC_VLLM), "vllm"))  # type: ignore[arg-type]
    probe = "import vllm.config, vllm.distributed.parallel_state, torch.distributed"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(base), timeout=300)
    if found.returncode != 0:  # also compiles what a rank imports, once, before the copies
        pytest.skip(f"vLLM 0.26.0 cannot be imported here: {(found.stderr.strip().splitlines() or ['?'])[-1]}")
    sites = []
    for r in range(WORLD):
        shutil.copytree(base, work / f"rank{r}")
        sites.append(work / f"rank{r}")
    return sites


def _env(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIXPACK_", "VLLM_"))}
    env.update(PYTHONPATH=str(site), VLLM_PLUGINS=PLUGIN, FIXPACK_AGREE_TIMEOUT=f"{AGREE_TIMEOUT:g}", **extra)
    return env


_state: dict[Path, tuple[str, ...] | None] = {}  # what each rank's site has applied now


def _arrange(sites: list[Path], wanted: list[tuple[str, ...] | None]) -> None:
    """Apply to each rank's site the opt-ins it should run (None: revert, no fixpack at all)."""
    for site, opt_ins in zip(sites, wanted):
        if site in _state and _state[site] == opt_ins:
            continue
        if _state.get(site) is not None:  # apply only adds: a node with other opt-ins starts from its image
            r = run_python("-m", "fixpack", "revert", "--site", str(site))
            assert r.returncode == 0, r.stderr
        if opt_ins is not None:
            r = run_python("-m", "fixpack", "apply", "--profile", PROFILE, "--site", str(site), *opt_ins)
            assert r.returncode == 0, r.stderr
        _state[site] = opt_ins
        assert (site / PLUGIN).is_dir() == (opt_ins is not None)


def _fix_set(site: Path) -> dict:
    r = run_python("-m", "fixpack", "status", "--site", str(site), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["fix_set"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(sites: list[Path], **env: str) -> list[subprocess.Popen[str]]:
    port = _port()
    return [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), str(WORLD), str(port)],
            env=_env(site, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r, site in enumerate(sites)
    ]


def _finish(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[str]:
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _stopped_after(out: str) -> float:
    line = next(x for x in out.splitlines() if x.startswith("AGREE-TEST stopped"))
    return float(line.rpartition("after=")[2])


def _refusal(out: str) -> str:
    """The RuntimeError's message in a rank's traceback (torch prefixes each line with ``[rankN]: ``)."""
    lines = [x.partition("RuntimeError: ")[2] for x in out.splitlines() if "RuntimeError: fixpack:" in x]
    assert len(lines) == 1, out[-4000:]
    return lines[0]


def test_ranks_with_one_fix_set_all_start_and_log_it(ranks: list[Path]):
    full = tuple(opt_ins_of())
    _arrange(ranks, [full] * WORLD)
    digest = _fix_set(ranks[0])["digest"]
    assert {_fix_set(site)["digest"] for site in ranks} == {digest}
    procs = _start(ranks)
    outs = _finish(procs)
    for r, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, out[-3000:]
        assert f"AGREE-TEST started rank={r}" in out
        assert f"fixpack: profile {PROFILE}, fix set {digest}," in out  # the runtime check's line
        assert f"fixpack: ranks 0-{WORLD - 1} agree on fix set {digest}" in out


def test_a_rank_with_an_opt_in_fewer_stops_every_rank(ranks: list[Path]):
    full = tuple(opt_ins_of())
    fewer = full[1:]
    _arrange(ranks, [full, full, full, fewer])
    ours, theirs = _fix_set(ranks[0]), _fix_set(ranks[3])
    assert ours["digest"] != theirs["digest"]
    only_ours = [f for f in ours["fixes"] if f not in theirs["fixes"]]
    assert full[0] in only_ours
    procs = _start(ranks)
    outs = _finish(procs)
    messages = set()
    for r, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode != 0 and "AGREE-TEST started" not in out, out[-3000:]
        assert f"AGREE-TEST stopped rank={r}" in out
        messages.add(_refusal(out))
    (message,) = messages  # one message, the same on every rank
    assert f"fix set {ours['digest']} (profile {PROFILE}, {len(ours['fixes'])} fixes) on ranks 0-2 (" in message
    assert f"fix set {theirs['digest']} (profile {PROFILE}, {len(theirs['fixes'])} fixes) on rank 3 (" in message
    assert f"{', '.join(only_ours)} only on ranks 0-2" in message
    assert "no fix set from" not in message


@pytest.mark.parametrize("lone", [0, 2], ids=["store-host", "other-rank"])
def test_a_rank_without_fixpack_goes_on_and_the_others_stop_naming_it(ranks: list[Path], lone: int):
    full = tuple(opt_ins_of())
    _arrange(ranks, [None if r == lone else full for r in range(WORLD)])
    procs = _start(ranks)
    others = [r for r in range(WORLD) if r != lone]
    outs = dict(zip(others, _finish([procs[r] for r in others])))
    time.sleep(1.0)  # the lone rank's bound: it had its chance to be stopped by fixpack too
    if procs[lone].poll() is None:  # rank 0 hosts the store: it waits at the barrier for ranks now gone
        procs[lone].kill()
    lone_out = procs[lone].communicate()[0]
    assert f"AGREE-TEST started rank={lone}" in lone_out, lone_out[-3000:]
    assert "RuntimeError: fixpack" not in lone_out and "AGREE-TEST stopped" not in lone_out
    for r, out in outs.items():
        assert "AGREE-TEST started" not in out, out[-3000:]
        assert AGREE_TIMEOUT <= _stopped_after(out) < AGREE_TIMEOUT + 10, out[-3000:]
        message = _refusal(out)
        assert f"no fix set from rank {lone} within {AGREE_TIMEOUT:g} s (FIXPACK_AGREE_TIMEOUT)" in message
        fixpack_ranks = {0: "ranks 1-3", 2: "ranks 0-1, 3"}[lone]
        assert f", {len(_fix_set(ranks[r])['fixes'])} fixes) on {fixpack_ranks} (" in message, message


def test_under_warn_a_rank_with_an_edited_patched_file_is_named_by_every_rank(ranks: list[Path]):
    full = tuple(opt_ins_of())
    _arrange(ranks, [full] * WORLD)
    digest = _fix_set(ranks[0])["digest"]
    edited = ranks[2] / "vllm_gaudi" / "v1" / "worker" / "hpu_input_batch.py"  # several fixes patch it
    before = edited.read_bytes()
    edited.write_bytes(before + b"# edited after the apply\n")
    try:
        assert _fix_set(ranks[2]) is None
        procs = _start(ranks, FIXPACK_RUNTIME_CHECK="warn")
        outs = _finish(procs)
    finally:
        edited.write_bytes(before)
    for r, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0 and f"AGREE-TEST started rank={r}" in out, out[-3000:]
        assert "do not run one fix set" in out and "agree on fix set" not in out, out[-3000:]
        assert f"fix set {digest} (profile {PROFILE}," in out and " on ranks 0-1, 3 (" in out, out[-3000:]
        drifted = "no digest (drifted: vllm_gaudi/v1/worker/hpu_input_batch.py)"
        assert f"{drifted} (profile {PROFILE}," in out and ") on rank 2 (" in out, out[-3000:]
    assert "fix set none (drifted)" in outs[2]  # the runtime check's line on that rank
    assert all(f"fix set {digest}," in out for r, out in enumerate(outs) if r != 2)
