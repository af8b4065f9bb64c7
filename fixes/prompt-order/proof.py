"""prompt-order: prefills run in scheduling order, so a same-step prefix hit is read after it is written.

Runs on CPU, with the tree's real code: InputBatch (add_request, remove_request, swap_states) from
hpu_input_batch.py, and from hpu_model_runner.py the start of HPUModelRunner.sample_tokens (every
statement before ``num_decodes = ...``: the reorders and the prompt/decode split),
_ensure_decodes_first, ensure_multi_token_decodes_last, _is_prompt, _get_prompts_and_decodes and
_extract_prefill_batch_contents, whose batches are the prefill forward passes, run one after another.

Scene (block size 16): A is a running chunked prefill (64-token prompt, 32 computed, 32 scheduled):
this step it writes blocks 12 and 13. B is a new request whose prompt starts with A's first 48
tokens; the scheduler (A scheduled first, B after) gave it a 48-token prefix hit on blocks 10, 11,
12. B fills the hole a finished request left at index 2, behind A at index 0, with decodes at 1, 3.
The scene is run again with A a new request as well (0 computed, 64 scheduled): then only B,
the reader, has context, and it is the first prefill of the batch's prefill region; with B the only
prefill; without decodes (B in a hole before A, and A before B); and with neither prefill having
context (B without a hit), where nothing can read a block written in the step and the batch must be
left as it is. In every scene the runner splits prompts and decodes again only if rows moved.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union
from unittest import mock

import numpy as np
import torch

from fixes._support.input_batch import VOCAB, SamplingParams, load_input_batch, make_batch, make_request
from fixes._support.runner import set_step_state
from fixpack.proofkit import Trees, added_at, compile_nodes, load_node, parse_file

BLOCK = 16


# --- the runner's real code ---

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
METHODS = (
    "_ensure_decodes_first",
    "_is_prompt",
    "is_decoder_only",
    "_get_prompts_and_decodes",
    "_extract_prefill_batch_contents",
    "_can_merge_prefill_contents",
    "_get_attention_group_id_for_hybrid",
    "_get_prompt_bucketing_fn",
    "_resolve_block",
)


class BucketingFailedException(Exception):
    pass


def _module_defs(tree: ast.Module) -> dict[str, ast.stmt]:
    """Module-level functions, classes and lambda helpers of the runner, by name."""
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif (
            isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(node.value, ast.Lambda)
        ):
            defs[node.target.id] = node
    return defs


def _module_names(tree: ast.Module) -> set[str]:
    """Every other name the runner module binds at top level (imports, constants, logger)."""
    names: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                names |= {a.asname or a.name.split(".")[0] for a in sub.names}
            elif isinstance(sub, ast.ImportFrom):
                names |= {a.asname or a.name for a in sub.names}
            elif isinstance(sub, ast.Assign):
                names |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
    return names


def _compile_into(node: ast.stmt, ns: dict[str, Any], defs: dict[str, ast.stmt], others: set[str], path: Path) -> None:
    """Execute ``node`` in ``ns``, first defining the runner's module-level names it uses.

    The runner's own functions, classes and helpers are compiled from its source; names it imports
    and that are not given in ``ns`` are MagicMocks (none of them is reached in this scene).
    """
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in ns:
            if sub.id in defs:
                ns[sub.id] = None
                _compile_into(defs[sub.id], ns, defs, others, path)
            elif sub.id in others:
                ns[sub.id] = mock.MagicMock(name=sub.id)
    exec(compile_nodes(path, [node]), ns)


def load_runner(trees: Trees, ib: types.ModuleType) -> tuple[type, Any]:
    assert trees.vllm_gaudi is not None
    path = trees.vllm_gaudi / RUNNER
    tree = parse_file(path)
    defs = _module_defs(tree)
    others = _module_names(tree) - set(defs)
    ns: dict[str, Any] = {
        "__builtins__": __builtins__,
        "np": np,
        "torch": torch,
        "Mapping": Mapping,
        "Optional": Optional,
        "Union": Union,
        "Any": Any,
        "Callable": Callable,
        "dataclass": dataclasses.dataclass,
        "field": dataclasses.field,
        "fields": dataclasses.fields,
        "itertools": itertools,
        "InputBatch": ib.InputBatch,
        "BucketingFailedException": BucketingFailedException,
    }
    methods: dict[str, Any] = {}
    for name in METHODS:
        node = load_node(path, f"HPUModelRunner.{name}")
        assert isinstance(node, ast.FunctionDef)
        node.decorator_list = []
        _compile_into(node, ns, defs, others, path)
        methods[name] = ns.pop(name)
    # sample_tokens up to the forward passes: the reorders and the prompt/decode split.
    head = load_node(path, "HPUModelRunner.sample_tokens")
    assert isinstance(head, ast.FunctionDef)
    for i, stmt in enumerate(head.body):
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "num_decodes" for t in stmt.targets
        ):
            head.body = head.body[:i] + [added_at(ast.Return(ast.Name("pd_info", ast.Load())), path)]
            break
    else:
        raise LookupError("HPUModelRunner.sample_tokens: no 'num_decodes = ...' statement")
    head.decorator_list, head.returns, head.name = [], None, "sample_tokens_head"
    _compile_into(head, ns, defs, others, path)
    methods["sample_tokens_head"] = ns.pop("sample_tokens_head")
    return type("Runner", (), methods), ns


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)
    runner_cls, _ = load_runner(trees, ib)
    _scene(ib, runner_cls, a_computed=32)
    # The same with A a new request too (no context: it writes blocks 10-13 from its first token):
    # only B, the reader, has context, and it comes first in the prefill region.
    _scene(ib, runner_cls, a_computed=0)
    # A step with B the only prefill (A finished before it): there is nothing to order.
    _scene(ib, runner_cls, a_computed=None)
    # A step without decodes: the prefill region starts at row 0. B fills the hole X left before A...
    _scene(ib, runner_cls, a_computed=32, layout=("X", "A", "Y"))
    # ... or the one behind A: the prefills are already in scheduling order.
    _scene(ib, runner_cls, a_computed=32, layout=("A", "X", "Y"))
    # Neither prefill has context (A and B new, B without a prefix hit): no pass reads a block, and
    # the batch is left as _ensure_decodes_first leaves it ([..., B, A]): each swap_states() copies a
    # request's rows and makes the next sampling call refresh the device rows (sampling-rows-refresh).
    _scene(ib, runner_cls, a_computed=0, b_hit=False)


def _scene(
    ib: types.ModuleType,
    runner_cls: type,
    a_computed: int | None,
    layout: tuple[str, ...] = ("A", "D1", "X", "D2", "Y"),
    b_hit: bool = True,
) -> None:
    """``layout``: the batch rows before the step; X and Y finish, B takes X's row, Y's row is left empty."""
    batch = make_batch(ib)
    greedy = SamplingParams(temperature=0.0)
    prompt_a = [i % VOCAB for i in range(64)]
    prompt_b = prompt_a[:48] + [7] * 8 if b_hit else [7] * 56
    reqs = {
        "A": make_request(ib, "A", greedy, prompt_a, num_computed=a_computed, blocks=[10, 11, 12, 13]),
        "D1": make_request(ib, "D1", greedy, [3] * 16, [5], num_computed=16, blocks=[30, 31]),
        "X": make_request(ib, "X", greedy, [4] * 16, [6], num_computed=16, blocks=[35, 36]),
        "D2": make_request(ib, "D2", greedy, [2] * 16, [5], num_computed=16, blocks=[40, 41]),
        "Y": make_request(ib, "Y", greedy, [6] * 16, [6], num_computed=16, blocks=[45, 46]),
        "B": make_request(
            ib,
            "B",
            greedy,
            prompt_b,
            num_computed=48 if b_hit else 0,
            blocks=[10, 11, 12, 20] if b_hit else [20, 21, 22, 23],
        ),
    }
    reqs = {rid: req for rid, req in reqs.items() if rid in layout + ("B",) and (rid, a_computed) != ("A", None)}
    for i, rid in enumerate(r for r in layout if r in reqs):
        batch.add_request(reqs[rid], i)
    # _update_states: X and Y finished, B takes the lowest free index (X's); condense() then drops
    # Y's row, the last, whose num_computed_tokens stays behind in the arrays.
    hole = batch.remove_request("X")
    last = batch.remove_request("Y")
    batch.add_request(reqs["B"], hole)
    batch.condense([last])
    batch.refresh_sampling_metadata()
    # Scheduling order: running requests (D1, A, D2), then the new request B.
    scheduled = {
        rid: n
        for rid, n in (("D1", 1), ("A", 64 - (a_computed or 0)), ("D2", 1), ("B", 8 if b_hit else 56))
        if rid in batch.req_id_to_index
    }
    prompts = [["A"], ["B"]] if a_computed is not None else [["B"]]
    sched = SimpleNamespace(
        num_scheduled_tokens=scheduled,
        total_num_scheduled_tokens=sum(scheduled.values()),
        scheduled_spec_decode_tokens={},
        kv_connector_metadata=None,
        finished_req_ids=set(),
    )

    runner = runner_cls()
    runner.input_batch = batch
    runner.scheduler_output = sched
    set_step_state(runner, profiler=SimpleNamespace(enabled=False))
    runner.attn_block_size = BLOCK
    runner.block_size = BLOCK
    runner.use_structured_output = False
    runner.invalid_req_indices = []
    runner.max_prefill_batch_size = 4
    runner.max_num_tokens = 1024
    runner.num_mamba_like_layers = 0
    runner.requests = reqs
    runner._bucketize_2d_prompt = lambda num_tokens, blocks: (len(num_tokens), max(num_tokens), 0)
    runner.get_dp_padding = lambda num_batches: 0

    # The batch rows each prompt/decode split sees.
    splits: list[list[str]] = []

    def get_prompts_and_decodes(scheduler_output: Any) -> Any:
        splits.append(list(batch.req_ids[: batch.num_reqs]))
        return runner_cls._get_prompts_and_decodes(runner, scheduler_output)

    runner._get_prompts_and_decodes = get_prompts_and_decodes
    pd_info = runner.sample_tokens_head(None)
    num_decodes, num_prefills = len(pd_info.decode_req_ids), len(pd_info.prompt_req_ids)
    decodes = [rid for rid in ("D1", "D2") if rid in scheduled]
    assert sorted(pd_info.decode_req_ids) == decodes and sorted(pd_info.prompt_req_ids) == sum(prompts, []), (
        f"unexpected prompt/decode split {pd_info}"
    )
    # The split is made again if, and only if, rows moved after it: a second one for nothing is
    # one more pass over the batch in every step (the reorder runs in each).
    moved = batch.req_ids[: batch.num_reqs] != splits[0]
    assert len(splits) == 1 + moved, (
        f"A with {a_computed} computed: {len(splits)} prompt/decode splits of the batch {splits}, rows "
        f"{'moved' if moved else 'did not move'} after the first"
    )
    assert b_hit or not moved, (
        f"no prefill has context, yet the prefill rows moved from {splits[0]} to {batch.req_ids[: batch.num_reqs]}"
    )
    assert list(pd_info.prompt_req_ids) == batch.req_ids[num_decodes : batch.num_reqs], (
        f"prompt list {pd_info.prompt_req_ids} does not follow the batch {batch.req_ids}"
    )
    num_scheduled = [scheduled[rid] for rid in batch.req_ids[: batch.num_reqs]]
    contents, _ = runner._extract_prefill_batch_contents(num_prefills, num_decodes, num_scheduled)
    passes = [c for c in contents if c.req_ids]
    order = [c.req_ids for c in passes]

    reads: list[tuple[int, str, int]] = []
    writes: dict[int, tuple[int, str]] = {}
    for k, content in enumerate(passes):
        for rid, ctx, tokens, blocks in zip(
            content.req_ids, content.context_lens, content.token_ids, content.blocks, strict=True
        ):
            reads += [(k, rid, b) for b in blocks[: ctx // BLOCK]]
            for b in blocks[ctx // BLOCK : (ctx + len(tokens) - 1) // BLOCK + 1]:
                writes.setdefault(b, (k, rid))
    for k, rid, b in reads:
        if b in writes and writes[b][0] > k:
            j, writer = writes[b]
            raise AssertionError(
                f"prefill forward pass {k} ({rid}) reads prefix-cache block {b} before pass {j} ({writer}) "
                f"writes it in the same step (A with {a_computed} computed tokens); "
                f"scheduling order {list(scheduled)}, forward passes {order}"
            )
    if b_hit:
        assert order == prompts, f"A with {a_computed} computed: expected forward passes {prompts}, got {order}"
