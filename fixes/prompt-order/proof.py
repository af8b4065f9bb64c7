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
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib.abc
import importlib.util
import itertools
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, TypeVar, Union
from unittest import mock

import numpy as np
import torch

from fixpack.proofkit import HABANA_MODULES, Trees, load_function, load_source, stub_modules

VOCAB = 32
BLOCK = 16


# --- CPU harness: the tree's real hpu_input_batch.py, with vLLM's light modules or stand-ins ---


def _exec_file(name: str, path: Path) -> types.ModuleType:
    """Execute a source file as module ``name`` (no bytecode is written into the tree)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


class SamplingType(enum.IntEnum):
    GREEDY = 0
    RANDOM = 1
    RANDOM_SEED = 2


class SamplingParams:
    """Stand-in for vllm.SamplingParams: the attributes InputBatch and the logits processors read."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, logit_bias: dict[int, float] | None = None,
                 min_tokens: int = 0, stop_token_ids: tuple[int, ...] = (),
                 bad_words_token_ids: list[list[int]] | None = None) -> None:
        self.temperature = temperature
        self.sampling_type = SamplingType.GREEDY if temperature < 1e-5 else SamplingType.RANDOM
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.repetition_penalty = repetition_penalty
        self.logit_bias = logit_bias
        self.min_tokens = min_tokens
        self.all_stop_token_ids = set(stop_token_ids)
        self.bad_words_token_ids = bad_words_token_ids
        self.logprobs = None
        self.prompt_logprobs = None
        self.allowed_token_ids = None
        self.seed = None
        self.extra_args = None


class _BlockTable:
    def __init__(self, max_num_reqs: int, max_num_blocks: int) -> None:
        self.table = torch.zeros((max_num_reqs, max_num_blocks), dtype=torch.int32)

    def add_row(self, block_ids: list[int], row: int) -> None:
        self.table[row].zero_()
        self.table[row, :len(block_ids)] = torch.tensor(block_ids, dtype=torch.int32)

    def swap_row(self, a: int, b: int) -> None:
        self.table[[a, b]] = self.table[[b, a]]

    def move_row(self, src: int, dst: int) -> None:
        self.table[dst] = self.table[src]

    def get_cpu_tensor(self) -> torch.Tensor:
        return self.table


class MultiGroupBlockTable:
    """Stand-in for vllm's block table (not what these fixes are about)."""

    def __init__(self, max_num_reqs: int, max_num_blocks: list[int], **_: Any) -> None:
        self.tables = [_BlockTable(max_num_reqs, n) for n in max_num_blocks]

    def add_row(self, block_ids: list[list[int]], row: int) -> None:
        for table, ids in zip(self.tables, block_ids, strict=True):
            table.add_row(ids, row)

    def swap_row(self, a: int, b: int) -> None:
        for table in self.tables:
            table.swap_row(a, b)

    def move_row(self, src: int, dst: int) -> None:
        for table in self.tables:
            table.move_row(src, dst)

    def __getitem__(self, group: int) -> _BlockTable:
        return self.tables[group]


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any other vllm / vllm_gaudi / habana module (e.g. one another fix imports) is a MagicMock."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in ("vllm", "vllm_gaudi", "habana_frameworks"):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> Any:
        module = mock.MagicMock(name=spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        pass


def load_input_batch(trees: Trees) -> types.ModuleType:
    """The tree's hpu_input_batch module, run on CPU.

    vLLM's logits_processor package (interface, state, builtin) and SamplingMetadata are the real
    vLLM 0.26.0 sources; vllm_gaudi.utils' async_h2d_copy/async_h2d_update are the real functions
    with device="cpu" bound (their default is "hpu").
    """
    assert trees.vllm_gaudi is not None and trees.vllm is not None, "need both trees"
    vllm = trees.vllm / "vllm"
    lp = "vllm.v1.sample.logits_processor"
    sys.meta_path.insert(0, _StubFinder())
    stubs = stub_modules("vllm.lora.request", "vllm.multimodal.inputs", "vllm.pooling_params", "vllm.sampling_params",
                 "vllm.utils.collection_utils", "vllm.utils.math_utils", "vllm.utils.torch_utils", "vllm.v1.outputs",
                 "vllm.v1.pool.metadata", "vllm.v1.worker.block_table", "vllm.v1.sample.thinking_budget_state",
                 lp, "vllm_gaudi.utils", *HABANA_MODULES)
    for stub in stubs.values():  # packages, for imports of modules not stubbed here
        stub.__path__ = []
        stub.__spec__ = None
    sys.modules["vllm"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingParams = SamplingParams
    sys.modules["vllm.sampling_params"].SamplingType = SamplingType
    sys.modules["vllm.utils.collection_utils"].swap_dict_values = load_function(
        vllm / "utils/collection_utils.py", "swap_dict_values", {"_K": TypeVar("_K"), "_V": TypeVar("_V")})
    sys.modules["vllm.utils.math_utils"].cdiv = load_function(vllm / "utils/math_utils.py", "cdiv")
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(
        vllm / "utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False})
    sys.modules["vllm.v1.worker.block_table"].MultiGroupBlockTable = MultiGroupBlockTable
    package = sys.modules[lp]
    for sub in ("interface", "state", "builtin"):
        real = _exec_file(f"{lp}.{sub}", vllm / f"v1/sample/logits_processor/{sub}.py")
        for name, value in vars(real).items():
            if not name.startswith("__"):
                setattr(package, name, value)
    _exec_file("vllm.v1.sample.metadata", vllm / "v1/sample/metadata.py")
    utils = trees.vllm_gaudi / "vllm_gaudi/utils.py"
    gaudi_utils = sys.modules["vllm_gaudi.utils"]
    for name in ("async_h2d_copy", "async_h2d_update"):
        setattr(gaudi_utils, name, functools.partial(load_function(utils, name, {"torch": torch}), device="cpu"))
    return _exec_file("proof_hpu_input_batch", trees.vllm_gaudi / "vllm_gaudi/v1/worker/hpu_input_batch.py")


def make_batch(ib: types.ModuleType, logitsprocs: Any = None, max_num_reqs: int = 8) -> Any:
    return ib.InputBatch(max_num_reqs=max_num_reqs, max_model_len=64, max_num_batched_tokens=64,
                         device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB, block_sizes=[16],
                         kernel_block_sizes=[16], logitsprocs=logitsprocs)


def make_request(ib: types.ModuleType, req_id: str, params: SamplingParams, prompt: list[int],
                 output: list[int] | None = None, num_computed: int = 0, blocks: list[int] | None = None) -> Any:
    return ib.CachedRequestState(req_id=req_id, prompt_token_ids=prompt, mm_features=[], sampling_params=params,
                                 generator=None, block_ids=[blocks or [1]], num_computed_tokens=num_computed,
                                 output_token_ids=list(output or []))


# --- end of harness ---


# --- the runner's real code ---

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
METHODS = ("_ensure_decodes_first", "_is_prompt", "is_decoder_only", "_get_prompts_and_decodes",
           "_extract_prefill_batch_contents", "_can_merge_prefill_contents", "_get_attention_group_id_for_hybrid",
           "_get_prompt_bucketing_fn", "_resolve_block")


class BucketingFailedException(Exception):
    pass


def _module_defs(tree: ast.Module) -> dict[str, ast.stmt]:
    """Module-level functions, classes and lambda helpers of the runner, by name."""
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.value, ast.Lambda):
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


def _compile_into(node: ast.stmt, ns: dict[str, Any], defs: dict[str, ast.stmt], others: set[str],
                  filename: str) -> None:
    """Execute ``node`` in ``ns``, first defining the runner's module-level names it uses.

    The runner's own functions, classes and helpers are compiled from its source; names it imports
    and that are not given in ``ns`` are MagicMocks (none of them is reached in this scene).
    """
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in ns:
            if sub.id in defs:
                ns[sub.id] = None
                _compile_into(defs[sub.id], ns, defs, others, filename)
            elif sub.id in others:
                ns[sub.id] = mock.MagicMock(name=sub.id)
    exec(compile(ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])), filename, "exec"), ns)


def load_runner(trees: Trees, ib: types.ModuleType) -> tuple[type, Any]:
    assert trees.vllm_gaudi is not None
    path = trees.vllm_gaudi / RUNNER
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = _module_defs(tree)
    others = _module_names(tree) - set(defs)
    ns: dict[str, Any] = {
        "__builtins__": __builtins__, "np": np, "torch": torch, "Mapping": Mapping, "Optional": Optional,
        "Union": Union, "Any": Any, "Callable": Callable, "dataclass": dataclasses.dataclass,
        "field": dataclasses.field, "fields": dataclasses.fields, "itertools": itertools,
        "InputBatch": ib.InputBatch, "BucketingFailedException": BucketingFailedException,
    }
    methods: dict[str, Any] = {}
    for name in METHODS:
        node = ast.parse(load_source(path, f"HPUModelRunner.{name}")).body[0]
        assert isinstance(node, ast.FunctionDef)
        node.decorator_list = []
        _compile_into(node, ns, defs, others, f"{path}:HPUModelRunner.{name}")
        methods[name] = ns.pop(name)
    # sample_tokens up to the forward passes: the reorders and the prompt/decode split.
    head = ast.parse(load_source(path, "HPUModelRunner.sample_tokens")).body[0]
    assert isinstance(head, ast.FunctionDef)
    for i, stmt in enumerate(head.body):
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "num_decodes"
                                                for t in stmt.targets):
            head.body = head.body[:i] + [ast.Return(ast.Name("pd_info", ast.Load()))]
            break
    else:
        raise LookupError("HPUModelRunner.sample_tokens: no 'num_decodes = ...' statement")
    head.decorator_list, head.returns, head.name = [], None, "sample_tokens_head"
    _compile_into(head, ns, defs, others, f"{path}:HPUModelRunner.sample_tokens")
    methods["sample_tokens_head"] = ns.pop("sample_tokens_head")
    return type("Runner", (), methods), ns


def check(trees: Trees) -> None:
    ib = load_input_batch(trees)
    runner_cls, _ = load_runner(trees, ib)
    batch = make_batch(ib)
    greedy = SamplingParams(temperature=0.0)
    prompt_a = [i % VOCAB for i in range(64)]
    prompt_b = prompt_a[:48] + [7] * 8
    reqs = {
        "A": make_request(ib, "A", greedy, prompt_a, num_computed=32, blocks=[10, 11, 12, 13]),
        "D1": make_request(ib, "D1", greedy, [3] * 16, [5], num_computed=16, blocks=[30, 31]),
        "X": make_request(ib, "X", greedy, [4] * 16, [6], num_computed=16, blocks=[35, 36]),
        "D2": make_request(ib, "D2", greedy, [2] * 16, [5], num_computed=16, blocks=[40, 41]),
        "B": make_request(ib, "B", greedy, prompt_b, num_computed=48, blocks=[10, 11, 12, 20]),
    }
    for i, rid in enumerate(("A", "D1", "X", "D2")):
        batch.add_request(reqs[rid], i)
    # _update_states: X finished, B takes the lowest free index.
    hole = batch.remove_request("X")
    batch.add_request(reqs["B"], hole)
    batch.refresh_sampling_metadata()
    # Scheduling order: running requests (D1, A, D2), then the new request B.
    scheduled = {"D1": 1, "A": 32, "D2": 1, "B": 8}
    sched = SimpleNamespace(num_scheduled_tokens=scheduled, total_num_scheduled_tokens=sum(scheduled.values()),
                            scheduled_spec_decode_tokens={}, kv_connector_metadata=None, finished_req_ids=set())

    runner = runner_cls()
    runner.input_batch = batch
    runner.scheduler_output = sched
    runner.warmup_mode = False
    runner.batch_changed = True
    runner.vllm_config = SimpleNamespace(speculative_config=None)
    runner.speculative_config = None
    runner.profiler = SimpleNamespace(enabled=False)
    runner.attn_block_size = BLOCK
    runner.block_size = BLOCK
    runner.use_async_scheduling = False
    runner.use_structured_output = False
    runner.invalid_req_indices = []
    runner.use_merged_prefill = False
    runner.max_prefill_batch_size = 4
    runner.max_num_tokens = 1024
    runner.num_mamba_like_layers = 0
    runner.requests = reqs
    runner._bucketize_2d_prompt = lambda num_tokens, blocks: (len(num_tokens), max(num_tokens), 0)
    runner.get_dp_padding = lambda num_batches: 0

    pd_info = runner.sample_tokens_head(None)
    num_decodes, num_prefills = len(pd_info.decode_req_ids), len(pd_info.prompt_req_ids)
    assert sorted(pd_info.decode_req_ids) == ["D1", "D2"] and sorted(pd_info.prompt_req_ids) == ["A", "B"], \
        f"unexpected prompt/decode split {pd_info}"
    assert list(pd_info.prompt_req_ids) == batch.req_ids[num_decodes:batch.num_reqs], \
        f"prompt list {pd_info.prompt_req_ids} does not follow the batch {batch.req_ids}"
    num_scheduled = [scheduled[rid] for rid in batch.req_ids[:batch.num_reqs]]
    contents, _ = runner._extract_prefill_batch_contents(num_prefills, num_decodes, num_scheduled)
    passes = [c for c in contents if c.req_ids]
    order = [c.req_ids for c in passes]

    reads: list[tuple[int, str, int]] = []
    writes: dict[int, tuple[int, str]] = {}
    for k, content in enumerate(passes):
        for rid, ctx, tokens, blocks in zip(content.req_ids, content.context_lens, content.token_ids,
                                            content.blocks, strict=True):
            reads += [(k, rid, b) for b in blocks[:ctx // BLOCK]]
            for b in blocks[ctx // BLOCK:(ctx + len(tokens) - 1) // BLOCK + 1]:
                writes.setdefault(b, (k, rid))
    for k, rid, b in reads:
        if b in writes and writes[b][0] > k:
            j, writer = writes[b]
            raise AssertionError(
                f"prefill forward pass {k} ({rid}) reads prefix-cache block {b} before pass {j} ({writer}) "
                f"writes it in the same step; scheduling order {list(scheduled)}, forward passes {order}")
    assert order == [["A"], ["B"]], f"expected forward passes [['A'], ['B']], got {order}"
