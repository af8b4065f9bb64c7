"""Proof for hybrid-decode-pad.

Runs the tree's real ``HPUModelRunner.initialize_kv_cache`` on a small GDN-hybrid KV cache config
(one full-attention group and one GDN group, 1152-token scheduler blocks split into 128-token
kernel blocks), then the real ``HPUModelRunner._create_decode_input_data`` for one live decode
padded to a batch of 4, and writes the padded batch into the attention cache that
``initialize_kv_cache`` allocated with the real ``VLLMKVCache.forward``. The block table is built
with vLLM's real ``BlockTable.map_to_kernel_blocks``.

The bug: the pad block id is the scheduler-block count, but the attention cache is indexed by
kernel blocks, so the padding rows land in a live kernel block and overwrite a request's K/V.

Also run: initialize_kv_cache for an attention-only model (the non-hybrid path), whose pad block
must stay the spare block num_blocks.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from fixes._support.kv_cache import (
    FullAttentionSpec,
    MambaSpec,
    initialize_kv_cache_globals,
    initialize_kv_cache_runner,
)
from fixpack.proofkit import Trees, load_function

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
EXT_UTILS = "vllm_gaudi/extension/utils.py"
BLOCK_TABLE = "vllm/v1/worker/block_table.py"

NUM_BLOCKS = 20  # scheduler (KV-manager) blocks per layer
SPEC_BLOCK = 1152  # Qwen3.5-style inflated scheduler block size
KERNEL_BLOCK = 128  # HPU attention kernel block size
BPK = SPEC_BLOCK // KERNEL_BLOCK
HEADS, HEAD_SIZE = 1, 4


def _kv_cache_config() -> types.SimpleNamespace:
    attn = FullAttentionSpec(SPEC_BLOCK, HEADS, HEAD_SIZE, torch.bfloat16)
    gdn = MambaSpec(SPEC_BLOCK, attn.page_size_bytes, shapes=((2, 3), (2, 4, 4)))
    return types.SimpleNamespace(
        num_blocks=NUM_BLOCKS,
        # vLLM orders groups by first layer; Qwen3.5's layer 0 is a GDN layer.
        kv_cache_groups=[
            types.SimpleNamespace(kv_cache_spec=gdn, layer_names=["layers.0.linear_attn"]),
            types.SimpleNamespace(kv_cache_spec=attn, layer_names=["layers.3.self_attn.attn"]),
        ],
        kv_cache_tensors=[
            types.SimpleNamespace(
                size=NUM_BLOCKS * attn.page_size_bytes, shared_by=["layers.0.linear_attn", "layers.3.self_attn.attn"]
            ),
        ],
    )


def _kernel_block_ids(trees: Trees, scheduler_blocks: list[int]) -> list[int]:
    ids = np.array(scheduler_blocks, dtype=np.int32)
    arange = np.arange(BPK, dtype=np.int32).reshape(1, -1)
    if trees.vllm is not None:
        map_to_kernel_blocks = load_function(trees.vllm / BLOCK_TABLE, "BlockTable.map_to_kernel_blocks", {})
        return map_to_kernel_blocks(ids, BPK, arange).tolist()
    return (ids.reshape(-1, 1) * BPK + arange).reshape(-1).tolist()


def _check_attention_only(runner_py: Any, get_kv_cache_shape: Any) -> None:
    """A model with attention only (no block splitting): the pad block is still the spare block at
    the end of the cache, num_blocks."""
    ns, bound = initialize_kv_cache_globals([KERNEL_BLOCK], F=F, replace=None, pad_sequence=pad_sequence)
    runner = initialize_kv_cache_runner(
        max_num_seqs=4,
        num_gdn=0,
        num_groups=1,
        kernel_block=KERNEL_BLOCK,
        get_kv_cache_shape=get_kv_cache_shape,
        cache_config=types.SimpleNamespace(block_size=KERNEL_BLOCK),
        use_prefix_caching=False,
        use_hybrid_cache=False,
        model_config=types.SimpleNamespace(use_mla=False),
    )
    attn = FullAttentionSpec(KERNEL_BLOCK, HEADS, HEAD_SIZE, torch.bfloat16)
    config = types.SimpleNamespace(
        num_blocks=NUM_BLOCKS,
        kv_cache_groups=[types.SimpleNamespace(kv_cache_spec=attn, layer_names=["layers.0.self_attn.attn"])],
        kv_cache_tensors=[
            types.SimpleNamespace(size=NUM_BLOCKS * attn.page_size_bytes, shared_by=["layers.0.self_attn.attn"])
        ],
    )
    initialize_kv_cache = load_function(runner_py, "HPUModelRunner.initialize_kv_cache", ns)
    initialize_kv_cache(runner, config)
    blocks = bound["layers.0.self_attn.attn"][0].shape[0] // KERNEL_BLOCK
    assert blocks == NUM_BLOCKS + 1, f"attention-only model: unexpected cache of {blocks} blocks"
    assert (runner._PAD_BLOCK_ID, runner._PAD_SLOT_ID) == (NUM_BLOCKS, NUM_BLOCKS * KERNEL_BLOCK), (
        f"attention-only model: pad block {runner._PAD_BLOCK_ID!r}, pad slot {runner._PAD_SLOT_ID!r}; the spare "
        f"block is {NUM_BLOCKS} (slot {NUM_BLOCKS * KERNEL_BLOCK})"
    )


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None, "needs the vllm-gaudi tree"
    runner_py = trees.vllm_gaudi / RUNNER

    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int) -> tuple[int, ...]:
        return get_shape(num_blocks, block_size, num_kv_heads, head_size)

    get_shape = load_function(
        trees.vllm_gaudi / "vllm_gaudi/attention/ops/hpu_paged_attn.py", "HPUPagedAttention.get_kv_cache_shape", {}
    )
    # vLLM's prepare_kernel_block_sizes for these specs: attention splits to the
    # backend's 128-token kernel block, mamba keeps its block size.
    ns, bound = initialize_kv_cache_globals(
        [SPEC_BLOCK, KERNEL_BLOCK],
        F=F,
        replace=None,
        pad_sequence=pad_sequence,
        async_h2d_copy=lambda source, dest_tensor=None, dtype=None, device="hpu": source,
        DecodeInputData=types.SimpleNamespace,
        MRotaryEmbedding=None,
        compute_prefix_caching_block_indices=None,
    )
    captured: dict[str, Any] = {}

    def make_decode_metadata(**kwargs: Any) -> dict[str, Any]:
        captured.update(kwargs)
        return kwargs

    ns["HPUAttentionMetadataV1"] = types.SimpleNamespace(make_decode_metadata=make_decode_metadata)

    _check_attention_only(runner_py, get_kv_cache_shape)

    runner = initialize_kv_cache_runner(
        max_num_seqs=4,
        num_gdn=1,
        num_groups=2,
        kernel_block=KERNEL_BLOCK,
        get_kv_cache_shape=get_kv_cache_shape,
        cache_config=types.SimpleNamespace(block_size=SPEC_BLOCK),
        use_prefix_caching=False,
    )
    initialize_kv_cache = load_function(runner_py, "HPUModelRunner.initialize_kv_cache", ns)
    initialize_kv_cache(runner, _kv_cache_config())

    key_cache = bound["layers.3.self_attn.attn"][0]
    total_kernel_blocks = key_cache.shape[0] // KERNEL_BLOCK
    assert total_kernel_blocks == NUM_BLOCKS * BPK + 1, f"unexpected attention cache shape {key_cache.shape}"

    # One live request owns scheduler blocks 1 and 2 (kernel blocks 9..26) and holds 1500
    # tokens of K/V; it decodes token 1500. Scheduler block 0 is vLLM's null block.
    context_len = 1500
    owned = [1, 2]
    kernel_ids = _kernel_block_ids(trees, owned)
    block_table = torch.zeros((4, len(kernel_ids)), dtype=torch.int32)
    block_table[0] = torch.tensor(kernel_ids, dtype=torch.int32)
    live_slots = torch.tensor(
        [kernel_ids[p // KERNEL_BLOCK] * KERNEL_BLOCK + p % KERNEL_BLOCK for p in range(context_len)]
    )
    live_kv = torch.arange(1, context_len + 1, dtype=torch.bfloat16).reshape(-1, 1, 1).expand(-1, HEADS, HEAD_SIZE)
    key_cache.index_copy_(0, live_slots, live_kv)
    before = key_cache[live_slots].clone()

    resolve_block = load_function(runner_py, "HPUModelRunner._resolve_block", ns)
    resolve_all_blocks = load_function(runner_py, "HPUModelRunner._resolve_all_blocks", ns)
    runner.__dict__.update(
        _resolve_block=types.MethodType(resolve_block, runner),
        _resolve_all_blocks=types.MethodType(resolve_all_blocks, runner),
        bucketing_manager=types.SimpleNamespace(find_decode_bucket=lambda bs, blocks, seek=False: (4, None, blocks)),
        get_dp_padding=lambda n: 0,
        positions_cpu=torch.tensor([context_len], dtype=torch.int64),
        input_ids_cpu=torch.tensor([7], dtype=torch.int32),
        uses_mrope=False,
        pin_memory=False,
        get_habana_paged_attn_buffers=lambda *a, **k: (torch.zeros(1), torch.zeros(1), torch.zeros(1)),
        interleaved_sliding_window=False,
        model_has_chunked_attention=False,
        use_async_scheduling=False,
        # GDN state metadata does not touch the attention slot mapping.
        num_mamba_like_layers=0,
    )
    create_decode_input_data = load_function(runner_py, "HPUModelRunner._create_decode_input_data", ns)
    create_decode_input_data(runner, 1, [1], np.array([context_len]), block_table)
    slot_mapping = captured["slot_mapping"].reshape(-1).to(torch.int64)
    assert slot_mapping.shape[0] == 4, f"expected a decode batch padded to 4, got {slot_mapping.tolist()}"

    # Write the padded decode batch into the cache as the attention layer does.
    kv_write = load_function(trees.vllm_gaudi / EXT_UTILS, "VLLMKVCache.forward", ns)
    new_kv = torch.full((4, HEADS, HEAD_SIZE), -1.0, dtype=torch.bfloat16)
    kv_write(None, new_kv, key_cache, slot_mapping)

    pad_slots = slot_mapping[1:].tolist()
    pad_block = runner._PAD_BLOCK_ID
    live_kernel_blocks = set(range(BPK, NUM_BLOCKS * BPK))  # every non-null scheduler block's kernel blocks
    hit = sorted({s // KERNEL_BLOCK for s in pad_slots if s // KERNEL_BLOCK in live_kernel_blocks})
    changed = (key_cache[live_slots] != before).any(dim=-1).any(dim=-1).nonzero().reshape(-1).tolist()
    assert not hit and not changed, (
        f"pad block id {pad_block} is a live kernel block (scheduler block {pad_block // BPK}): the padded decode rows "
        f"wrote slots {pad_slots} and overwrote a live request's K/V at token positions {changed}; the attention "
        f"cache's spare kernel block is {total_kernel_blocks - 1}"
    )
    assert all(s // KERNEL_BLOCK == total_kernel_blocks - 1 for s in pad_slots), (
        f"pad slots {pad_slots} are not in the spare kernel block {total_kernel_blocks - 1}"
    )
    assert runner._PAD_SLOT_ID == pad_block * KERNEL_BLOCK
