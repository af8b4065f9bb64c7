"""Proof for hybrid-prefill-batch.

Runs the tree's real prefill input path of ``HPUModelRunner`` on a stand-in runner:
``_prepare_prefill_inputs``, which calls ``_extract_prefill_batch_contents`` (that merges prefills
with ``_can_merge_prefill_contents`` and the real ``_bucketize_2d_prompt``) and then
``_form_prefill_batch`` for each batch, with the real ``prepare_mamba_state_idxs``,
``compute_prefix_caching_block_indices``, ``BatchContents``, ``merge_contents``, ``align_and_pad``
and ``async_h2d_copy`` (to the CPU). The step: two fresh prompts (no computed tokens, 300 and 200
tokens), scheduled together, with ``VLLM_PROMPT_BS_BUCKET_MAX=2`` (``max_prefill_batch_size``).

The bug: for a model with mamba-like layers, ``_can_merge_prefill_contents`` merges the two into
one prefill batch, but the mamba prefill path takes one request per batch:
- with prefix caching, ``_form_prefill_batch`` hits ``assert len(contents.req_ids) == 1``
  (Qwen3.5's GDN layers, with compact slots as gdn-prefix-cache serves them or with
  VLLM_COMPACT_GDN=0, and a mamba2 hybrid such as Granite 4.0-H): an engine-fatal AssertionError;
- without prefix caching, the mamba2 layers' real ``granite_causal_conv1d_fn`` (used by
  hpu_mamba_mixer2.py, Granite 4.0-H) gets the merged batch's ``query_start_loc`` and raises
  "'padded_batch' must be 1".
The proof turns the real code's AssertionError (checked to come from that line of
``_form_prefill_batch``) and ValueError into its own failure message; any other exception of the
real code is an error of the proof.

Fixed: each prompt of a hybrid model is a prefill batch of its own, in order, and the mamba2 conv
runs on each. Also run: a model without mamba-like layers still merges the two prompts into one
batch of two, with and without prefix caching (the change is a no-op there).

Not shown (no assertion): Qwen3.5 without prefix caching. Its GDN kernels (hpu_causal_conv1d_fn,
hpu_chunk_gated_delta_rule) take a padded batch of several prompts, so the stock runner serves it;
with the change it no longer batches those prefills either (upstream's choice, a cost).
"""

from __future__ import annotations

import itertools
import linecache
import math
import traceback
import types
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from fixpack.proofkit import Trees, compile_nodes, load_function, load_node

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
UTILS = "vllm_gaudi/utils.py"
EXT_UTILS = "vllm_gaudi/extension/utils.py"
CONV = "vllm_gaudi/ops/causal_conv1d_pytorch.py"
GRANITE_CONV = "vllm_gaudi/ops/granite_causal_conv1d.py"

ATTN_BLOCK = 128  # HPU attention kernel block
SPEC_BLOCK = 1152  # scheduler / mamba block (page-size aligned hybrid block)
CHUNK = 128  # mamba_chunk_size
MAX_REQS, MAX_LEN = 4, 2 * SPEC_BLOCK
PROMPTS = {"r0": 300, "r1": 200}
CONV_DIM, CONV_WIDTH = 8, 4
METHODS = (
    "_prepare_prefill_inputs",
    "_extract_prefill_batch_contents",
    "_can_merge_prefill_contents",
    "_get_prompt_bucketing_fn",
    "_bucketize_2d_prompt",
    "_bucketize_merged_prompt",
    "_get_attention_group_id_for_hybrid",
    "_resolve_block",
    "_form_prefill_batch",
    "prepare_mamba_state_idxs",
)


class AttentionSpec:
    """Stands in for vLLM's AttentionSpec (only isinstance is asked)."""


class MambaSpec:
    """A mamba / GDN group's spec."""


class StandIn:
    """The runner's attributes the methods read; one they read that is not set is a proof error."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"proof stand-in runner has no attribute {name!r}; the method now reads it")


class Model(NamedTuple):
    what: str
    num_mamba_like_layers: int
    num_gdn: int = 0
    compact: bool = False


PLAIN = Model("a model without mamba-like layers", 0)
QWEN35_COMPACT = Model("Qwen3.5 (36 GDN layers, compact GDN slots)", 36, num_gdn=36, compact=True)
QWEN35 = Model("Qwen3.5 (36 GDN layers, VLLM_COMPACT_GDN=0)", 36, num_gdn=36)
MAMBA2 = Model("a mamba2 hybrid (Granite 4.0-H: 36 mamba layers)", 36)
MAMBA2_ONE = Model("a mamba2 hybrid with one mamba layer", 1)


class BlockTables:
    """Stand-in MultiGroupBlockTable: one CPU block table per KV cache group."""

    def __init__(self, tables: list[torch.Tensor]) -> None:
        self.block_tables = [types.SimpleNamespace(get_cpu_tensor=lambda t=t: t) for t in tables]

    def __getitem__(self, group: int) -> Any:
        return self.block_tables[group]


class Batch:
    """Stand-in InputBatch: per-row numpy arrays as InputBatch has them, a block table per KV cache group."""

    def __init__(self, groups: int) -> None:
        self.req_ids: list[str] = []
        self.req_id_to_index: dict[str, int] = {}
        self.token_ids_cpu = np.zeros((MAX_REQS, MAX_LEN), dtype=np.int32)
        self.num_tokens = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_prompt_tokens = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_computed_tokens_cpu = np.zeros(MAX_REQS, dtype=np.int32)
        self.tables = [torch.zeros((MAX_REQS, MAX_LEN // ATTN_BLOCK), dtype=torch.int32) for _ in range(groups)]
        self.block_table = BlockTables(self.tables)

    def add(self, req_id: str, prompt: int, attn_group: int, mamba_group: int | None) -> None:
        row = len(self.req_ids)
        self.req_ids.append(req_id)
        self.req_id_to_index[req_id] = row
        self.token_ids_cpu[row, :prompt] = np.arange(1, prompt + 1) + 1000 * row
        self.num_tokens[row] = self.num_tokens_no_spec[row] = self.num_prompt_tokens[row] = prompt
        # Attention group: kernel blocks 1 + 10 * row, ...; mamba group: one block per request.
        kernel_blocks = math.ceil(prompt / ATTN_BLOCK)
        self.tables[attn_group][row, :kernel_blocks] = torch.arange(kernel_blocks, dtype=torch.int32) + 1 + 10 * row
        if mamba_group is not None:
            self.tables[mamba_group][row, 0] = 1 + row


def _namespace(trees: Trees) -> dict[str, Any]:
    assert trees.vllm_gaudi is not None, "needs the vllm-gaudi tree"
    runner_py = trees.vllm_gaudi / RUNNER
    ns: dict[str, Any] = {
        "dataclass": dataclass,
        "field": field,
        "fields": fields,
        "Optional": Optional,
        "Any": Any,
        "np": np,
        "torch": torch,
        "itertools": itertools,
        "math": math,
        "AttentionSpec": AttentionSpec,
        "cdiv": lambda a, b: -(a // -b),
    }
    if trees.vllm is not None:
        ns["cdiv"] = load_function(trees.vllm / "vllm/utils/math_utils.py", "cdiv", {})
    ns["empty_list"] = lambda: field(default_factory=list)
    exec(
        compile_nodes(
            runner_py,
            [load_node(runner_py, name) for name in ("BucketingFailedException", "BatchContents", "PrefillInputData")],
        ),
        ns,
    )
    for name in ("round_up", "shallow_tuple", "merge_contents", "compute_prefix_caching_block_indices"):
        ns[name] = load_function(runner_py, name, ns)
    ns["pad_list"] = load_function(trees.vllm_gaudi / EXT_UTILS, "pad_list", {"itertools": itertools})
    ns["align_and_pad"] = load_function(
        trees.vllm_gaudi / EXT_UTILS, "align_and_pad", {"itertools": itertools, "pad_list": ns["pad_list"]}
    )
    h2d = load_function(trees.vllm_gaudi / UTILS, "async_h2d_copy", {"torch": torch})
    ns["async_h2d_copy"] = lambda source, dest_tensor=None, dtype=None, device="hpu": h2d(
        source, dest_tensor, dtype, "cpu"
    )
    ns["HPUAttentionMetadataV1"] = types.SimpleNamespace(
        make_prefill_metadata=lambda **kwargs: types.SimpleNamespace(**kwargs)
    )
    return ns


def _granite_conv(trees: Trees) -> Any:
    assert trees.vllm_gaudi is not None
    helpers = {"torch": torch}
    for name in ("_normalize_activation", "_ensure_query_start_loc", "_apply_activation", "_depthwise_conv1d_tpc"):
        helpers[name] = load_function(trees.vllm_gaudi / CONV, name, {"torch": torch})
    return load_function(trees.vllm_gaudi / GRANITE_CONV, "granite_causal_conv1d_fn", helpers)


def _runner(cls: type, model: Model, prefix_caching: bool) -> Any:
    hybrid = model.num_mamba_like_layers > 0
    # vLLM orders the groups by first layer; layer 0 of these hybrids is a mamba-like layer.
    attn_group, mamba_group = (1, 0) if hybrid else (0, None)
    specs = [MambaSpec(), AttentionSpec()] if hybrid else [AttentionSpec()]
    batch = Batch(len(specs))
    for req_id, prompt in PROMPTS.items():
        batch.add(req_id, prompt, attn_group, mamba_group)
    runner = cls()
    runner.__dict__.update(
        input_batch=batch,
        kv_cache_config=types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=s) for s in specs]),
        num_mamba_like_layers=model.num_mamba_like_layers,
        num_gdn=model.num_gdn,
        max_prefill_batch_size=2,
        max_num_tokens=8192,
        use_merged_prefill=False,
        use_prefix_caching=prefix_caching,
        cache_config=types.SimpleNamespace(enable_prefix_caching=prefix_caching, mamba_block_size=SPEC_BLOCK),
        attn_block_size=ATTN_BLOCK,
        block_size=SPEC_BLOCK if hybrid else ATTN_BLOCK,
        mamba_chunk_size=CHUNK,
        use_async_scheduling=False,
        use_structured_output=False,
        invalid_req_indices=[],
        get_dp_padding=lambda n: 0,
        profiler=types.SimpleNamespace(enabled=False),
        interleaved_sliding_window=False,
        uses_mrope=False,
        logits_rounding=1,
        pin_memory=False,
        dtype=torch.bfloat16,
        device=torch.device("cpu"),
        _MAMBA_PAD_BLOCK_ID=0,
        # The HPU bucketing: the batch size as asked, the query length up to a multiple of 128.
        bucketing_manager=types.SimpleNamespace(
            find_prompt_bucket=lambda bs, seq, blocks: (bs, max(CHUNK, -(-seq // CHUNK) * CHUNK), blocks)
        ),
        _compact_gdn_group_ids={0} if model.compact else set(),
        _compact_gdn_group_offset={0: 0},
        _num_gdn_groups=1,
        _gdn_req_to_base_slot={"r0": 3, "r1": 5},
    )
    return runner


def _hit_single_request_assert(exc: AssertionError) -> str | None:
    """Where the real code's AssertionError comes from, if it is _form_prefill_batch's one-request assert."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    line = linecache.getline(frame.filename, frame.lineno or 0).strip()
    if frame.filename.endswith(RUNNER) and frame.name == "_form_prefill_batch":
        if line == "assert len(contents.req_ids) == 1":
            return f"{RUNNER}:{frame.lineno} `{line}`"
    return None


def _prefill(cls: type, model: Model, prefix_caching: bool) -> tuple[Any, str | None]:
    """The step's prefill input data, or (None, the bug) when the real code stops at its assert."""
    runner = _runner(cls, model, prefix_caching)
    try:
        prefill, dummy = runner._prepare_prefill_inputs(len(PROMPTS), 0, list(PROMPTS.values()))
    except AssertionError as exc:
        where = _hit_single_request_assert(exc)
        if where is None:
            raise RuntimeError(f"{model.what}: the real code asserted somewhere unexpected: {exc!r}") from exc
        return None, (
            f"{model.what}, prefix caching {'on' if prefix_caching else 'off'}: two fresh prompts were "
            f"merged into one prefill batch and the real _form_prefill_batch hit its one-request assert "
            f"({where}): an engine-fatal AssertionError in the first step that schedules both"
        )
    if dummy is not None:
        raise RuntimeError(f"{model.what}: unexpected dummy prefill batches")
    return prefill, None


def _mamba2_conv(conv: Any, what: str, prefill: Any, prefix_caching: bool) -> str | None:
    """Runs the real granite_causal_conv1d_fn on each prefill batch as hpu_mamba_mixer2.py calls it (the
    mamba group is group 0); the bug when it refuses a batch."""
    for meta in prefill.attn_metadata:
        num_tokens = meta.padding_mask_flat.shape[0]
        try:
            out = conv(
                torch.ones((CONV_DIM, num_tokens)),
                torch.ones((CONV_DIM, CONV_WIDTH)),
                None,
                conv_states=torch.zeros((MAX_REQS, CONV_WIDTH - 1, CONV_DIM)),
                query_start_loc=meta.query_start_loc,
                enable_prefix_caching=prefix_caching,
                load_cache_indices=meta.load_indices_tensor[0],
                store_cache_indices=meta.store_indices_tensor[0],
                blocks_caching_range=meta.blocks_caching_range[0] if prefix_caching else None,
                seqlens_offsets_for_blocks=meta.seqlens_offsets_for_blocks,
                has_initial_state=meta.has_initial_states_p,
                activation="silu",
                metadata=meta,
            )
        except ValueError as exc:
            if "'padded_batch' must be 1" not in str(exc):
                raise
            return (
                f"{what}: two fresh prompts were merged into one prefill batch of "
                f"{meta.query_start_loc.numel() - 1} sequences and the real granite_causal_conv1d_fn refuses it "
                f"({exc}): an engine-fatal error in the first step that schedules both"
            )
        assert out.shape == (CONV_DIM, num_tokens), f"{what}: conv output of shape {tuple(out.shape)}"
    return None


def check(trees: Trees) -> None:
    ns = _namespace(trees)
    assert trees.vllm_gaudi is not None
    cls = type(
        "Runner",
        (StandIn,),
        {name: load_function(trees.vllm_gaudi / RUNNER, f"HPUModelRunner.{name}", ns) for name in METHODS},
    )
    conv = _granite_conv(trees)
    bugs: list[str] = []

    # No mamba-like layers: the two prompts still share one prefill batch, with and without prefix caching.
    for prefix_caching in (True, False):
        prefill, bug = _prefill(cls, PLAIN, prefix_caching)
        assert bug is None and prefill.request_ids == [["r0", "r1"]], (
            f"{PLAIN.what}, prefix caching {prefix_caching}: the two prompts must stay one prefill batch, got "
            f"{bug or prefill.request_ids}"
        )

    for model, prefix_caching in (
        (QWEN35_COMPACT, True),
        (QWEN35, True),
        (MAMBA2, True),
        (MAMBA2, False),
        (MAMBA2_ONE, True),
        (MAMBA2_ONE, False),
    ):
        what = f"{model.what}, prefix caching {'on' if prefix_caching else 'off'}"
        prefill, bug = _prefill(cls, model, prefix_caching)
        if bug is None and model.num_gdn == 0:
            bug = _mamba2_conv(conv, what, prefill, prefix_caching)
        if bug is not None:
            bugs.append(bug)
            continue
        assert prefill.request_ids == [["r0"], ["r1"]], (
            f"{what}: each prompt must be a prefill batch of its own, in order; got {prefill.request_ids}"
        )
        for meta, req_id in zip(prefill.attn_metadata, ("r0", "r1")):
            assert meta.query_start_loc.tolist() == [0, PROMPTS[req_id]], (
                f"{what}: the prefill batch of {req_id} has query_start_loc {meta.query_start_loc.tolist()}"
            )

    assert not bugs, "; ".join(bugs)
