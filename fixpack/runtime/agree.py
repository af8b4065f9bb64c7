"""The rank agreement: every rank of one vLLM deployment runs the same fix set, or none starts.

The runtime check (``check.py``) proves that each process runs the code its own site was patched
with; nothing in it compares one node's site with another's. This does, once vLLM's distributed
set-up is done and before the model loads: the fix ``fix-set-agreement`` calls :func:`agree` from
vLLM's ``ensure_model_parallel_initialized`` in every rank (TP, PP and DP ranks alike: vLLM's
default group spans them all), with the multiprocessing and the Ray executor.

Each rank writes its record (rank, host, pid, profile, fix-set digest, fixes; from ``index.json``
beside this file) under a key of its own in the key-value store of torch.distributed's default
group (the rendezvous store) and waits, ``FIXPACK_AGREE_TIMEOUT`` seconds at most, for every
other rank's. No collective: a rank without fixpack never calls this, and a collective would pair
its next collective with ours; a store key it never writes only makes the others wait, then name
it. If a record differs or a rank sent none, every fixpack rank stops (RuntimeError) with one
message naming the ranks of each fix set, the fixes only some of them run, and the silent ranks;
``FIXPACK_RUNTIME_CHECK=warn`` logs it instead, ``off`` skips the agreement. A rank sends its
digest only while its patched files hold their hashes, as the runtime check read them in that
process (``fixset.py``); otherwise it sends no digest and the files that drifted, and agrees with
no rank, as one with another fix set.

Keys: ``fixpack/agree/1/<world size>/<round>/<rank>``, inside the default group's own prefix. A
store can outlive a process group (torch keeps a ``tcp://`` rendezvous store for the next group
on the same address, and torchrun's agent store lives across restarts), so each agreement is a
round numbered from a ticket counter in the store: the ranks of one group take tickets
``round * world + 1 .. (round + 1) * world``. Standard library only; torch is imported here,
lazily, since only a vLLM rank calls this.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import weakref
from datetime import timedelta

from . import fixset
from . import index as index_file

# Every vLLM rank imports this module, after torch loaded ``__future__``: the names
# below are for mypy only, never imported there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import ModuleType
    from typing import Any

    from torch.distributed import ProcessGroup, Store

HERE = os.path.dirname(os.path.realpath(__file__))
INDEX = os.path.join(HERE, index_file.NAME)
MODE_VARIABLE = "FIXPACK_RUNTIME_CHECK"  # stop (default) | warn | off
TIMEOUT_VARIABLE = "FIXPACK_AGREE_TIMEOUT"
# Ranks reach ensure_model_parallel_initialized within seconds of each other (creating vLLM's
# groups already waits for every rank), so this only bounds the wait for a rank that never writes.
# It stays below the distributed timeouts vLLM runs with (torch's 600 s for NCCL, 1800 s for gloo
# and HCCL; VLLM_ENGINE_READY_TIMEOUT_S 600 s), so that the named refusal comes before theirs.
DEFAULT_TIMEOUT = 120.0
PREFIX = "fixpack/agree/1"

log = logging.getLogger("vllm.fixpack")
_agreed: list[weakref.ref[ProcessGroup]] = []  # a weak reference to the default group agreed in: once per process group


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        raise RuntimeError(f"fixpack: {TIMEOUT_VARIABLE}={raw!r}: expected a number of seconds") from None
    if not value > 0:
        raise RuntimeError(f"fixpack: {TIMEOUT_VARIABLE}={raw!r}: expected a positive number of seconds")
    return value


def _default_store(c10d: ModuleType) -> Store:
    # Private in torch; pinned to what torch 2.13 offers: the store init_process_group made.
    getter = getattr(c10d, "_get_default_store", None)
    if getter is None:
        import torch

        raise RuntimeError(
            f"fixpack: torch {torch.__version__} has no torch.distributed.distributed_c10d._get_default_store "
            f"(the rank agreement is built for torch 2.13's); {MODE_VARIABLE}=warn or off starts without it"
        )
    return getter()


def _own_record(rank: int) -> dict[str, Any]:
    """This rank's record: its digest only while its patched files hold their hashes (``fixset``,
    as the runtime check read them in this process); otherwise none, and the files that drifted."""
    index = index_file.read(INDEX, os.path.dirname(HERE))
    fix_set = index.get("fix_set") or {}
    digest, drifted = fixset.remembered(index, os.path.dirname(HERE))
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "profile": index.get("profile"),
        "digest": digest,
        "drifted": drifted,
        "fixes": list(fix_set.get("fixes", index.get("fixes", []))),
    }


def spans(numbers: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    numbers = sorted(numbers)
    runs, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            runs.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(runs)


def ranks_text(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``ranks 0-2, 5``."""
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + spans(ranks)


def _where(records: Iterable[dict[str, Any]]) -> str:
    """Ranks by host: ``ranks 0-7 (node-a), rank 8 (node-b)``."""
    hosts: dict[str, list[int]] = {}
    for r in records:
        hosts.setdefault(r["host"], []).append(r["rank"])
    return ", ".join(f"{ranks_text(ranks)} ({host})" for host, ranks in sorted(hosts.items(), key=lambda h: min(h[1])))


def _fix_set_text(digest: str | None, drifted: Sequence[str]) -> str:
    if digest is not None:
        return f"fix set {digest}"
    return f"no digest (drifted: {', '.join(drifted)})" if drifted else "no digest"


def disagreement(records: Iterable[dict[str, Any]], silent: Sequence[int], world: int, timeout: float) -> str | None:
    """The one message that stops the ranks, or None when every rank of ``world`` sent the same
    fix set. A rank with no digest (a patched file drifted there) agrees with none."""
    groups: dict[tuple[str | None, tuple[str, ...], tuple[str, ...]], list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: r["rank"]):
        key = (record["digest"], tuple(record.get("drifted") or ()), tuple(record["fixes"]))
        groups.setdefault(key, []).append(record)
    unvouched = any(digest is None for digest, _, _ in groups)
    if len(groups) <= 1 and not silent and not unvouched:
        return None
    parts = []
    ordered = sorted(groups.items(), key=lambda g: min(r["rank"] for r in g[1]))
    for (digest, drifted, fixes), members in ordered:
        parts.append(
            f"{_fix_set_text(digest, drifted)} (profile {members[0]['profile']}, {len(fixes)} fixes) "
            f"on {_where(members)}"
        )
    everywhere = set.intersection(*(set(fixes) for _, _, fixes in groups)) if groups else set()
    for (_, _, fixes), members in ordered:
        only = [f for f in fixes if f not in everywhere]
        if only and len(groups) > 1:
            parts.append(f"{', '.join(only)} only on {ranks_text([r['rank'] for r in members])}")
    vouched = {digest for digest, _, _ in groups if digest is not None}
    if len(vouched) > 1 and all(set(fixes) == everywhere for _, _, fixes in groups):
        parts.append("the same fixes, other code (another release or cookbook)")
    if unvouched:
        parts.append("a patched file edited or replaced after the apply runs other code than its fix set")
    if silent:
        parts.append(
            f"no fix set from {ranks_text(silent)} within {timeout:g} s ({TIMEOUT_VARIABLE}): no fixpack there, "
            f"or {MODE_VARIABLE}=off, so other code"
        )
    return (
        f"fixpack: the {world} ranks of this deployment do not run one fix set: "
        + "; ".join(parts)
        + ". Apply the same fixes on every node (fixpack status shows the fix set; apply --expect-fix-set pins it); "
        + f"{MODE_VARIABLE}=warn only warns"
    )


def _exchange(
    store: Store, base: str, rank: int, world: int, record: dict[str, Any], timeout: float
) -> tuple[list[dict[str, Any]], list[int]]:
    """Write this rank's record, wait for the others': (records, silent ranks)."""
    store.set(f"{base}/{rank}", json.dumps(record))
    keys = [f"{base}/{r}" for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
        present = keys
    except Exception:  # noqa: BLE001 - torch's DistStoreError on timeout; the check below says which
        present = [k for k in keys if store.check([k])]
    records = [json.loads(v) for v in store.multi_get(present)] if present else []
    silent = sorted(set(range(world)) - {r["rank"] for r in records})
    return records, silent


def agree() -> None:
    """Called by vLLM's ensure_model_parallel_initialized (the fix fix-set-agreement) in every rank."""
    mode = os.environ.get(MODE_VARIABLE, "stop").strip().lower()
    if mode == "off":
        return
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return
    c10d = dist.distributed_c10d
    group = c10d._get_default_group()
    if _agreed and _agreed[0]() is group:
        return
    start = time.perf_counter()
    try:
        store = _default_store(c10d)
        rank, world = dist.get_rank(), dist.get_world_size()
        timeout = _timeout()
        record = _own_record(rank)
        if world > 1:
            ticket = store.add(f"{PREFIX}/{world}/tickets", 1)
            base = f"{PREFIX}/{world}/{(ticket - 1) // world}"
            records, silent = _exchange(store, base, rank, world, record, timeout)
            message = disagreement(records, silent, world, timeout)
        else:
            message = None
        if message is not None:
            # The store lives in one rank's process (rank 0 with tcp://): its leaving must not cut
            # off a rank still reading the records, so each rank says it has read them and waits
            # (bounded) for the others that wrote one.
            store.set(f"{base}/read/{rank}", "1")
            readers = [f"{base}/read/{r['rank']}" for r in records]
            try:
                store.wait(readers, timedelta(seconds=timeout))
            except Exception:  # noqa: BLE001 - a rank that stopped early: nothing more to wait for
                pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"fixpack: the rank agreement failed: {exc}"
    except RuntimeError as exc:  # torch's store errors, and ours above
        text = str(exc)
        message = text if text.startswith("fixpack:") else f"fixpack: the rank agreement failed: {text}"
    _agreed[:] = [weakref.ref(group)]
    if message is not None:
        if mode != "warn":
            raise RuntimeError(message)
        log.warning("%s", message)
        return
    if world > 1:
        log.info(
            # rank and pid in the line itself: workers share one stdout, and vLLM's "(Worker pid=N)"
            # prefix is a separate write that another worker's line can split from its message
            "fixpack: %s agree on fix set %s (%d fixes) in %.1f ms, rank %d, pid %d",
            ranks_text(range(world)),
            record["digest"],
            len(record["fixes"]),
            (time.perf_counter() - start) * 1000,
            rank,
            os.getpid(),
        )
