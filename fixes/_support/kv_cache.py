"""CPU harness for proofs that run the tree's real ``HPUModelRunner.initialize_kv_cache`` on a GDN hybrid.

The KV cache specs vLLM hands the runner (``FullAttentionSpec``, ``MambaSpec`` and the two spec
classes the runner only tests against), ``StandIn`` for the runner's ``self`` (a missing attribute
is an error, not a MagicMock), ``initialize_kv_cache_globals`` for the module globals
initialize_kv_cache reads (it records the caches it binds), and ``initialize_kv_cache_runner`` for
the runner attributes it reads, with compact GDN state on.

Used by the proofs of gdn-prefix-cache and hybrid-decode-pad. Proofs import it as
``fixes._support.kv_cache`` (the cookbook root is on ``sys.path``).
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import types
from collections.abc import Callable
from typing import Any, Optional
from unittest import mock

import numpy as np
import torch


class FullAttentionSpec:
    """Stand-in for vLLM's FullAttentionSpec: a K and a V page per block."""

    def __init__(self, block_size: int, num_kv_heads: int, head_size: int, dtype: torch.dtype) -> None:
        self.block_size, self.num_kv_heads, self.head_size, self.dtype = block_size, num_kv_heads, head_size, dtype
        self.page_size_bytes = 2 * block_size * num_kv_heads * head_size * dtype.itemsize


class MambaSpec:
    """Stand-in for vLLM's MambaSpec of a GDN layer: a conv state and an SSM state per block."""

    def __init__(
        self,
        block_size: int,
        page_size_bytes: int,
        shapes: tuple[tuple[int, ...], ...],
        dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float32),
    ) -> None:
        self.block_size, self.page_size_bytes = block_size, page_size_bytes
        self.shapes, self.dtypes = shapes, dtypes
        self.mamba_type = "gdn_attention"


class EncoderOnlyAttentionSpec:
    """Stand-in for vLLM's EncoderOnlyAttentionSpec (none in these configs)."""


class UniformTypeKVCacheSpecs:
    """Stand-in for vLLM's UniformTypeKVCacheSpecs (none in these configs)."""


class StandIn(types.SimpleNamespace):
    """The runner's ``self``: only the attributes the methods read."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"proof stand-in runner has no attribute {name!r}; the method now reads it")


def initialize_kv_cache_globals(kernel_block_sizes: list[int], **given: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The globals initialize_kv_cache reads, ``given`` added or overriding, and the dict the caches it
    binds go to (layer name: cache). ``kernel_block_sizes``: what vLLM's prepare_kernel_block_sizes
    returns for the config, one per KV cache group."""
    bound: dict[str, Any] = {}

    def bind_kv_cache(kv_caches: dict[str, Any], ctx: Any, runner_kv_caches: list[Any]) -> None:
        bound.update(kv_caches)

    ns: dict[str, Any] = {
        "torch": torch,
        "np": np,
        "os": os,
        "math": math,
        "itertools": itertools,
        "copy": copy,
        "deepcopy": copy.deepcopy,
        "Optional": Optional,
        "Any": Any,
        "logger": mock.MagicMock(),
        "htorch": mock.MagicMock(),
        "KVCacheConfig": object,
        "KVCacheSpec": object,
        "FullAttentionSpec": FullAttentionSpec,
        "MambaSpec": MambaSpec,
        "EncoderOnlyAttentionSpec": EncoderOnlyAttentionSpec,
        "UniformTypeKVCacheSpecs": UniformTypeKVCacheSpecs,
        "_GDN_MAMBA_TYPES": ("gdn_attention", "linear_attention"),
        "maybe_set_mamba_kv_cache_groups_ids": lambda model, cfg: None,
        "prepare_kernel_block_sizes": lambda cfg, groups: list(kernel_block_sizes),
        "get_dtype_size": lambda dtype: dtype.itemsize,
        "bind_kv_cache": bind_kv_cache,
        "has_kv_transfer_group": lambda: False,
        "get_kv_transfer_group": None,
        "copy_kv_blocks": None,
        **given,
    }
    return ns, bound


def initialize_kv_cache_runner(
    *,
    max_num_seqs: int,
    num_gdn: int,
    num_groups: int,
    kernel_block: int,
    get_kv_cache_shape: Callable[..., tuple[int, ...]],
    cache_config: Any,
    use_prefix_caching: bool,
    vllm_config_attrs: dict[str, Any] | None = None,
    **attrs: Any,
) -> StandIn:
    """A StandIn with what initialize_kv_cache reads: compact GDN state on for ``num_gdn`` GDN layers,
    ``num_groups`` KV cache groups, attention on ``kernel_block``-token blocks through
    ``get_kv_cache_shape``, on CPU, no bucketing; ``attrs`` are set too (or override)."""
    vllm_config = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(static_forward_context={}),
        cache_config=cache_config,
        **(vllm_config_attrs or {}),
    )
    base: dict[str, Any] = dict(
        _compact_gdn_group_ids=set(),
        _compact_gdn_group_offset={},
        _compact_gdn_enabled=True,
        _original_max_num_seqs=max_num_seqs,
        _gdn_req_to_base_slot={},
        _gdn_slot_free_list=[],
        use_prefix_caching=use_prefix_caching,
        maybe_add_kv_sharing_layers_to_kv_cache_groups=lambda cfg: None,
        may_add_encoder_only_layers_to_kv_cache_config=lambda: None,
        initialize_attn_backend=lambda cfg: None,
        may_reinitialize_input_batch=lambda cfg, sizes: None,
        num_mamba_like_layers=num_gdn,
        num_gdn=num_gdn,
        model=None,
        attn_groups=[[] for _ in range(num_groups)],
        use_hybrid_cache=True,
        use_naive_mamba_cache_sharing=False,
        device="cpu",
        block_size=kernel_block,
        attn_block_size=kernel_block,
        attn_backend=types.SimpleNamespace(get_kv_cache_shape=get_kv_cache_shape),
        runner_only_attn_layers=set(),
        shared_kv_cache_layers={},
        kv_caches=[],
        enable_bucketing=False,
        vllm_config=vllm_config,
    )
    return StandIn(**{**base, **attrs})
