"""fix-set-agreement: ranks that run other fixes must not start.

Runs the tree's real ensure_model_parallel_initialized (vllm/distributed/parallel_state.py, with
every module-level function of that file it calls) in two forked ranks of a real torch.distributed
default group (gloo, a tcp:// rendezvous store on 127.0.0.1). Stand-ins: vLLM's group accessors
(get_world_group, model_parallel_is_initialized, initialize_model_parallel and the group sizes),
and each rank's fixpack runtime check package, built by fixpack as apply writes it, with an index
naming that rank's fix set. Both branches of the function are run: the first initialisation and
the already-initialised one.

The bug: rank 0 runs two fixes, rank 1 one of them, and both start. Fixed: both stop, each with
one message naming both ranks' fix sets and the fix only rank 0 runs. And where the ranks agree,
or neither has fixpack's runtime check (stock vLLM), both start as before.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import socket
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fixpack.installation import plugin
from fixpack.proofkit import load_function, parse_file
from fixpack.runtime import fixset
from fixpack.runtime import index as index_file

STATE = "vllm/distributed/parallel_state.py"
FUNCTION = "ensure_model_parallel_initialized"
WORLD = 2
BOTH = ["rank-exception-fatal", "hybrid-decode-pad"]
ONE = ["rank-exception-fatal"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plugin(folder: Path, fixes: list[str]) -> None:
    """fixpack's runtime check package as apply writes it, for a site running ``fixes``."""
    index = {"mode": "in-place", "profile": "v0.26.0", "release": "v0.26.0", "fixes": fixes, "packages": ["vllm"]}
    index["fix_set"] = {"digest": fixset.digest("v0.26.0", fixes, []), "fixes": fixes}
    index["files"] = []
    for rel, content in plugin.files(index_file.dumps(index)).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)


def _ensure(path: Path, initialized: bool) -> Any:
    """The tree's function, with the module-level functions of its file that it calls."""
    import torch

    sizes = {"tp": 1, "pp": 1}
    namespace: dict[str, Any] = {
        "torch": torch,
        "get_world_group": lambda: SimpleNamespace(backend="gloo"),
        "model_parallel_is_initialized": lambda: initialized,
        "initialize_model_parallel": lambda *args, **kwargs: None,
        "get_tensor_model_parallel_world_size": lambda: sizes["tp"],
        "get_pp_group": lambda: SimpleNamespace(world_size=sizes["pp"]),
        "get_pcp_group": lambda: SimpleNamespace(world_size=1),
        "get_dcp_group": lambda: SimpleNamespace(world_size=1),
    }
    tree = parse_file(path)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION)
    called = {c.func.id for c in ast.walk(function) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    for name in sorted((called & defined) - set(namespace)):
        namespace[name] = load_function(path, name, namespace)
    return load_function(path, FUNCTION, namespace)


def _rank(rank: int, port: int, path: Path, initialized: bool, fixes: list[str] | None, out: Any) -> None:
    import torch.distributed as dist

    os.environ["FIXPACK_AGREE_TIMEOUT"] = "20"
    os.environ.pop("FIXPACK_RUNTIME_CHECK", None)
    with tempfile.TemporaryDirectory() as folder:
        if fixes is not None:
            _plugin(Path(folder), fixes)
            sys.path.insert(0, folder)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=WORLD, rank=rank)
        try:
            _ensure(path, initialized)(1, 1)
            outcome = "started"
        except RuntimeError as exc:
            outcome = f"stopped: {exc}"
        out.put((rank, outcome))
        store = dist.distributed_c10d._get_default_store()
        store.set(f"proof/done/{rank}", "1")  # rank 0 holds the store: it leaves last
        store.wait([f"proof/done/{r}" for r in range(WORLD)], timedelta(seconds=60))
        dist.destroy_process_group()


def _run(path: Path, initialized: bool, fixes: list[list[str] | None]) -> dict[int, str]:
    ctx = multiprocessing.get_context("fork")  # the proof server has imported torch already
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, path, initialized, fixes[r], out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    return results


def check(trees: Any) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    path = Path(trees.vllm) / STATE
    for initialized in (False, True):
        branch = "already initialised" if initialized else "first initialisation"
        agreeing = _run(path, initialized, [BOTH, BOTH])
        assert set(agreeing.values()) == {"started"}, f"{branch}: ranks with one fix set: {agreeing}"
        stock = _run(path, initialized, [None, None])
        assert set(stock.values()) == {"started"}, f"{branch}: ranks without fixpack: {stock}"
        differing = _run(path, initialized, [BOTH, ONE])
        started = sorted(r for r, outcome in differing.items() if outcome == "started")
        assert not started, (
            f"{branch}: rank 0 runs {', '.join(BOTH)}, rank 1 only {', '.join(ONE)}, and "
            f"{', '.join(map(str, started))} of them started without noticing"
        )
        for rank, outcome in differing.items():
            assert outcome.count("fixpack:") == 1, f"{branch}, rank {rank}: {outcome}"
            for needed in ("on rank 0 (", "on rank 1 (", "hybrid-decode-pad only on rank 0"):
                assert needed in outcome, f"{branch}, rank {rank} does not say {needed!r}: {outcome}"
