"""Proof for gdn-prefix-cache.

Runs, on CPU, the tree's real code of a compact-GDN hybrid (two GDN groups and one attention group,
48-token blocks split into 16-token kernel blocks, two KV cache tensors):

- ``HPUModelRunner.initialize_kv_cache`` (allocates the attention caches and the compact GDN state
  tensors, and on a fixed tree builds the prefix cache from them);
- ``HPUModelRunner._update_states`` and ``HPUModelRunner.prepare_mamba_state_idxs`` for a sequence of
  scheduler steps, with the GDN layers run by the real ``hpu_causal_conv1d_fn``,
  ``hpu_fused_gdn_gating``, ``hpu_chunk_gated_delta_rule`` and ``_save_ssm_state`` on the slots the
  runner hands out;
- the post-forward statement of ``HPUModelRunner.sample_tokens`` that saves checkpoints (absent on
  the stock tree), and the tree's ``vllm_gaudi/v1/worker/hpu_gdn_prefix_cache.py`` if it exists.

Also: ``GDNPrefixCache`` is the class the runner module's own import binds (the import statement
is run), the setups the prefix cache does not serve are refused when it is built, other hybrids it
serves (one GDN group, attention blocks of two GDN blocks, a GDN state as large as an attention page)
checkpoint into the page of the right block and restore bit-exact, a warm-up request on the null
block saves nothing, compact GDN without prefix caching still runs its steps (no prefix cache
built), and the start-up of ``HPUModelRunner.__init__`` says what it serves.

The bug: a request with a prefix-cache hit starts from its compact slot, which holds whatever its
previous owner (or the request itself, after preemption) left there; nothing ever stores a state at
the block the scheduler hands out as the hit.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any, cast
from unittest import mock

import numpy as np
import torch

from fixes._support.kv_cache import (
    FullAttentionSpec,
    MambaSpec,
    StandIn,
    initialize_kv_cache_globals,
    initialize_kv_cache_runner,
)
from fixpack.proofkit import Trees, compile_nodes, load_function, parse_file

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
MODULE = "vllm_gaudi/v1/worker/hpu_gdn_prefix_cache.py"
CONV = "vllm_gaudi/ops/causal_conv1d_pytorch.py"
GDN = "vllm_gaudi/ops/hpu_gdn_pytorch.py"
QWEN = "vllm_gaudi/models/qwen3_5.py"
PAGED_ATTN = "vllm_gaudi/attention/ops/hpu_paged_attn.py"

NUM_BLOCKS = 24  # block pool; block 0 is vLLM's null block
BLOCK = 48  # scheduler block (tokens), the same for every group (align mode)
KERNEL_BLOCK = 16  # attention kernel block
MAX_REQS = 4
HEADS, KDIM, VDIM, WIDTH, CHUNK = 2, 16, 16, 4, 16
CONV_DIM = 2 * HEADS * KDIM + HEADS * VDIM
KV_HEADS, HEAD_SIZE = 1, 16
VOCAB = 512

# Layers as vLLM groups them for Qwen3.5 (layer 0 is a GDN layer): two GDN groups, one attention
# group, and one KV cache tensor per position in the group.
GDN_GROUPS = [["layers.0.linear_attn", "layers.4.linear_attn"], ["layers.1.linear_attn", "layers.5.linear_attn"]]
ATTN_LAYERS = ["layers.3.self_attn.attn", "layers.7.self_attn.attn"]
ATTN_GID = 2


class ReqState(types.SimpleNamespace):
    """Stand-in for CachedRequestState."""


class BlockTable:
    def __init__(self, num_groups: int) -> None:
        self.block_tables = [None] * num_groups
        self.cpu = torch.zeros(MAX_REQS, 8, dtype=torch.int32)

    def __getitem__(self, group_idx: int) -> Any:
        return types.SimpleNamespace(get_cpu_tensor=lambda: self.cpu)

    def append_row(self, block_ids: Any, row: int) -> None:
        pass


class InputBatch:
    """The persistent batch, as far as ``_update_states`` and ``prepare_mamba_state_idxs`` use it."""

    def __init__(self) -> None:
        self.req_ids: list[str | None] = []
        self.req_id_to_index: dict[str, int] = {}
        self.req_type: dict[str, Any] = {}
        self.num_computed_tokens_cpu = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_tokens = np.zeros(MAX_REQS, dtype=np.int32)
        self.token_ids_cpu = np.zeros((MAX_REQS, 256), dtype=np.int32)
        self.block_table = BlockTable(3)

    def remove_request(self, req_id: str) -> int | None:
        index = self.req_id_to_index.pop(req_id, None)
        if index is not None:
            self.req_ids[index] = None
        return index

    def add_request(self, req: Any, req_index: int | None = None) -> int:
        if req_index is None:
            req_index = len(self.req_ids)
            self.req_ids.append(None)
        self.req_ids[req_index] = req.req_id
        self.req_id_to_index[req.req_id] = req_index
        self.num_computed_tokens_cpu[req_index] = req.num_computed_tokens
        return req_index

    def condense(self, empty: list[int]) -> None:
        live = [r for r in self.req_ids if r is not None]
        computed = {r: self.num_computed_tokens_cpu[self.req_id_to_index[r]] for r in live}
        self.req_ids = list(live)
        self.req_id_to_index = {r: i for i, r in enumerate(live)}
        for r, i in self.req_id_to_index.items():
            self.num_computed_tokens_cpu[i] = computed[r]

    def refresh_sampling_metadata(self) -> None:
        pass


def _load_module(path: Path, name: str) -> types.ModuleType:
    sys.dont_write_bytecode = True  # never leave __pycache__ in the trees
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _kernels(root: Path) -> tuple[types.ModuleType, types.ModuleType]:
    utils = types.ModuleType("vllm.v1.attention.backends.utils")
    utils.PAD_SLOT_ID = -1  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["vllm.v1.attention.backends.utils"] = utils
    log = types.ModuleType("vllm_gaudi.extension.logger")
    log.logger = lambda: logging.getLogger("proof")  # type: ignore[attr-defined]
    sys.modules["vllm_gaudi.extension.logger"] = log
    return _load_module(root / CONV, "proof_conv1d"), _load_module(root / GDN, "proof_gdn")


def _kv_cache_config() -> types.SimpleNamespace:
    attn = FullAttentionSpec(BLOCK, KV_HEADS, HEAD_SIZE, torch.bfloat16)
    gdn = MambaSpec(BLOCK, attn.page_size_bytes, shapes=((WIDTH - 1, CONV_DIM), (HEADS, KDIM, VDIM)))
    groups = [types.SimpleNamespace(kv_cache_spec=gdn, layer_names=list(names)) for names in GDN_GROUPS]
    groups.append(types.SimpleNamespace(kv_cache_spec=attn, layer_names=list(ATTN_LAYERS)))
    tensors = [
        types.SimpleNamespace(
            size=NUM_BLOCKS * attn.page_size_bytes, shared_by=[GDN_GROUPS[0][i], GDN_GROUPS[1][i], ATTN_LAYERS[i]]
        )
        for i in range(2)
    ]
    return types.SimpleNamespace(num_blocks=NUM_BLOCKS, kv_cache_groups=groups, kv_cache_tensors=tensors)


class Model:
    """GDN layers driven by the tree's kernels on the slots the runner hands out."""

    def __init__(self, trees: Trees, runner: StandIn, caches: dict[str, Any], prepare_idxs: Any) -> None:
        assert trees.vllm_gaudi is not None
        self.conv, self.gdn = _kernels(trees.vllm_gaudi)
        self.save_ssm_state = load_function(trees.vllm_gaudi / QWEN, "_save_ssm_state", {"torch": torch})
        self.runner, self.caches, self.prepare_idxs = runner, caches, prepare_idxs
        gen = torch.Generator().manual_seed(0)
        self.weights = {}
        for gid, names in enumerate(GDN_GROUPS):
            for name in names:
                self.weights[name] = (
                    gid,
                    torch.randn(VOCAB, CONV_DIM, generator=gen).to(torch.bfloat16),
                    torch.randn(VOCAB, HEADS, generator=gen),
                    torch.randn(VOCAB, HEADS, generator=gen),
                    (torch.randn(CONV_DIM, WIDTH, generator=gen) * 0.3).to(torch.bfloat16),
                    (torch.randn(CONV_DIM, generator=gen) * 0.1).to(torch.bfloat16),
                    torch.randn(HEADS, generator=gen),
                    torch.randn(HEADS, generator=gen),
                )

    def layer(
        self,
        name: str,
        tokens: list[int],
        conv_state: torch.Tensor,
        ssm_state: torch.Tensor,
        index: int,
        has_initial_state: bool,
    ) -> torch.Tensor:
        """One GDN layer's prefill core as HPUGatedDeltaNetAttention.forward runs it."""
        _, emb, a_emb, b_emb, weight, bias, a_log, dt_bias = self.weights[name]
        ids = torch.tensor(tokens) % VOCAB
        n = len(tokens)
        state_indices = torch.tensor([index], dtype=torch.int32)
        his = torch.tensor([has_initial_state])
        mixed = self.conv.hpu_causal_conv1d_fn(
            x=emb[ids].transpose(0, 1),
            weight=weight,
            bias=bias,
            activation="silu",
            conv_states=conv_state,
            has_initial_state=his,
            cache_indices=state_indices,
            query_start_loc=torch.tensor([0, n], dtype=torch.int32),
            is_prompt=True,
        ).transpose(0, 1)
        q, k, v = torch.split(mixed, [HEADS * KDIM, HEADS * KDIM, HEADS * VDIM], dim=-1)
        q, k, v = (t.reshape(1, n, HEADS, -1).contiguous() for t in (q, k, v))
        g, beta = self.gdn.hpu_fused_gdn_gating(a_log, a_emb[ids], b_emb[ids], dt_bias)
        initial_state = ssm_state[state_indices].contiguous() * his.view(-1, 1, 1, 1).to(ssm_state.dtype)
        out, final_state = self.gdn.hpu_chunk_gated_delta_rule(
            q=q,
            k=k,
            v=v,
            g=g,
            beta=beta,
            initial_state=initial_state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            chunk_size=CHUNK,
            prefill_num_seqs=1,
            prefill_seq_len=n,
        )
        return self.save_ssm_state(out, final_state, ssm_state, state_indices)

    def forward(self, req_id: str, tokens: list[int]) -> dict[str, torch.Tensor]:
        """Prefill ``tokens`` (the request's scheduled chunk) through every GDN layer."""
        batch = self.runner.input_batch
        req_index = batch.req_id_to_index[req_id]
        indices = self.prepare_idxs(self.runner, [req_index], [0], 1)
        has_initial_state = bool(batch.num_computed_tokens_cpu[req_index] > 0)
        outs = {}
        for name, (gid, *_) in self.weights.items():
            conv_state, ssm_state = self.caches[name]
            outs[name] = self.layer(name, tokens, conv_state, ssm_state, int(indices[gid, 0]), has_initial_state)
        return outs

    def one_go(self, tokens: list[int]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Reference: ``tokens`` from a zero state in one prefill, on scratch state tensors."""
        outs, states = {}, {}
        for name in self.weights:
            conv_state = torch.zeros(3, WIDTH - 1, CONV_DIM, dtype=torch.bfloat16)
            ssm_state = torch.zeros(3, HEADS, KDIM, VDIM, dtype=torch.float32)
            outs[name] = self.layer(name, tokens, conv_state, ssm_state, 1, False)
            states[name] = torch.cat(
                [conv_state[1].reshape(-1).view(torch.uint8), ssm_state[1].reshape(-1).view(torch.uint8)]
            )
        return outs, states


def _new_req(req_id: str, tokens: list[int], computed: int, block_ids: list[list[int]]) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        req_id=req_id,
        prompt_token_ids=tokens,
        mm_features=[],
        sampling_params=None,
        pooling_params=None,
        block_ids=[list(b) for b in block_ids],
        num_computed_tokens=computed,
        lora_request=None,
    )


def _cached(entries: list[tuple[str, int, list[list[int]] | None]], resumed: set[str]) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        req_ids=[e[0] for e in entries],
        resumed_req_ids=set(resumed),
        new_token_ids=[[] for _ in entries],
        all_token_ids={},
        new_block_ids=[e[2] for e in entries],
        num_computed_tokens=[e[1] for e in entries],
        num_output_tokens=[0 for _ in entries],
    )


def _step(
    new: list[types.SimpleNamespace],
    cached: types.SimpleNamespace,
    scheduled: dict[str, int],
    finished: set[str],
    zero: list[int],
) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        scheduled_new_reqs=new,
        scheduled_cached_reqs=cached,
        num_scheduled_tokens=scheduled,
        total_num_scheduled_tokens=sum(scheduled.values()),
        scheduled_spec_decode_tokens={},
        scheduled_encoder_inputs={},
        finished_req_ids=finished,
        free_encoder_mm_hashes=[],
        preempted_req_ids=None,
        new_block_ids_to_zero=zero or None,
        kv_cache_block_copies=None,
    )


def _post_forward_hooks(runner_py: Path) -> list[ast.stmt]:
    """Statements of ``sample_tokens`` that hand the step to the GDN prefix cache."""
    tree = parse_file(runner_py)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HPUModelRunner")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_tokens")
    return [s for s in method.body if "_gdn_prefix_cache" in ast.unparse(s)]


def check(trees: Trees) -> None:
    assert trees.vllm_gaudi is not None, "needs the vllm-gaudi tree"
    root = trees.vllm_gaudi
    runner_py = root / RUNNER
    module_py = root / MODULE
    prefix_cache = _load_module(module_py, "proof_gdn_prefix_cache") if module_py.exists() else None

    get_shape = load_function(root / PAGED_ATTN, "HPUPagedAttention.get_kv_cache_shape", {})
    ns, bound = initialize_kv_cache_globals(
        [BLOCK, BLOCK, KERNEL_BLOCK],
        cast=cast,
        AttentionSpec=FullAttentionSpec,
        CachedRequestState=ReqState,
        SamplingType=types.SimpleNamespace(RANDOM_SEED=object()),
        get_pp_group=lambda: types.SimpleNamespace(is_last_rank=True),
        VllmModelForPooling=object,
    )
    if prefix_cache is not None:
        # The class the runner module's own imports bind to that name (what initialize_kv_cache and
        # __init__'s annotation look up when they run); without such an import they raise NameError.
        ns["GDNPrefixCache"] = _runner_import(runner_py, prefix_cache)

    runner = _initialized_runner(runner_py, ns, get_shape, prefix_caching=True)
    update_states = load_function(runner_py, "HPUModelRunner._update_states", ns)
    prepare_idxs = load_function(runner_py, "HPUModelRunner.prepare_mamba_state_idxs", ns)
    hooks = _post_forward_hooks(runner_py)
    hook_code = compile_nodes(runner_py, hooks)
    if prefix_cache is not None:
        assert hooks, "the tree has hpu_gdn_prefix_cache.py but sample_tokens never saves a checkpoint"
        assert runner._gdn_prefix_cache is not None, "initialize_kv_cache did not build the GDN prefix cache"

    caches = {name: bound[name] for names in GDN_GROUPS for name in names}
    model = Model(trees, runner, caches, prepare_idxs)
    states = [bound[GDN_GROUPS[0][i]] for i in range(2)]  # compact (conv, ssm) per KV cache tensor
    pages = [bound[name][:2] for name in ATTN_LAYERS]  # (key cache, value cache) per KV cache tensor

    def slot(req_id: str, gid: int) -> int:
        return runner._gdn_req_to_base_slot[req_id] * runner._num_gdn_groups + runner._compact_gdn_group_offset[gid] + 1

    def slot_bytes(tensor: int, index: int) -> torch.Tensor:
        conv, ssm = states[tensor]
        return torch.cat([conv[index].reshape(-1).view(torch.uint8), ssm[index].reshape(-1).view(torch.uint8)])

    def page_bytes(tensor: int, block_id: int) -> torch.Tensor:
        return torch.cat(
            [c[block_id * BLOCK : (block_id + 1) * BLOCK].reshape(-1).view(torch.uint8) for c in pages[tensor]]
        )

    def snapshot() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return (
            [torch.stack([slot_bytes(t, i) for i in range(states[t][0].shape[0])]) for t in range(2)],
            [torch.stack([page_bytes(t, b) for b in range(NUM_BLOCKS)]) for t in range(2)],
        )

    def changed(before: tuple[list[torch.Tensor], list[torch.Tensor]]) -> tuple[set[int], set[int]]:
        after = snapshot()
        slots = {int(i) for t in range(2) for i in (after[0][t] != before[0][t]).any(-1).nonzero().reshape(-1)}
        blocks = {int(b) for t in range(2) for b in (after[1][t] != before[1][t]).any(-1).nonzero().reshape(-1)}
        return slots, blocks

    def attention(req_id: str, tokens: list[int], start: int) -> None:
        """What the attention layers write: K/V at the request's token slots."""
        blocks = runner.requests[req_id].block_ids[ATTN_GID]
        rows = torch.tensor([blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(start, start + len(tokens))])
        kv = (torch.tensor(tokens, dtype=torch.bfloat16) + 1).view(-1, 1, 1).expand(-1, KV_HEADS, HEAD_SIZE)
        for layer in pages:
            for cache in layer:
                cache.index_copy_(0, rows, kv)

    def run(so: types.SimpleNamespace, chunks: dict[str, tuple[list[int], int]]) -> dict[str, Any]:
        """One scheduler step: _update_states, the forward passes, the post-forward hooks."""
        update_states(runner, so)
        outs = {}
        for req_id, (tokens, start) in chunks.items():
            attention(req_id, tokens, start)
            outs[req_id] = model.forward(req_id, tokens)
        exec(hook_code, {}, {"self": runner, "scheduler_output": so})
        return outs

    tok_a = list(range(100, 201))  # 101-token prompt: two full blocks and 5 tokens
    tok_b = tok_a[:96] + list(range(300, 314))  # shares A's first two blocks
    tok_c, tok_d, tok_g = list(range(400, 430)), list(range(430, 450)), list(range(460, 470))

    # Step 1: A prefills block 1 (the chunk ends on the block boundary), C its 30-token prompt.
    run(
        _step(
            [_new_req("A", tok_a, 0, [[5], [6], [7]]), _new_req("C", tok_c, 0, [[1], [2], [3]])],
            _cached([], set()),
            {"A": BLOCK, "C": 30},
            set(),
            [7, 3],
        ),
        {"A": (tok_a[:48], 0), "C": (tok_c, 0)},
    )
    a_after_1 = [[slot_bytes(t, slot("A", g)) for g in range(2)] for t in range(2)]
    slot_a, slot_c = slot("A", 0) - 1, slot("C", 0) - 1
    # Step 2: A prefills block 2; C finishes.
    out_a2 = run(
        _step([], _cached([("A", 48, [[11], [12], [10]])], set()), {"A": BLOCK}, {"C"}, [10]), {"A": (tok_a[48:96], 48)}
    )["A"]
    a_after_2 = [[slot_bytes(t, slot("A", g)) for g in range(2)] for t in range(2)]
    ref_out, ref_state = model.one_go(tok_a[:96])
    for name in ref_out:
        assert torch.equal(out_a2[name], ref_out[name][:, 48:]), f"{name}: chunked prefill differs from one go"

    # Step 3: A finishes. B arrives with a hit on A's first block (48 tokens: the GDN blocks 5 and 6)
    # and takes A's slot; D arrives without a hit and takes C's slot.
    before = snapshot()
    so = _step(
        [_new_req("B", tok_b, 48, [[5, 13], [6, 14], [7, 15]]), _new_req("D", tok_d, 0, [[8], [9], [4]])],
        _cached([], set()),
        {"B": BLOCK, "D": 20},
        {"A"},
        [15, 4],
    )
    update_states(runner, so)
    assert runner._gdn_req_to_base_slot["B"] * 2 == slot_a and runner._gdn_req_to_base_slot["D"] * 2 == slot_c
    for t in range(2):
        for g in range(2):
            got = slot_bytes(t, slot("B", g))
            stale = torch.equal(got, a_after_2[t][g])
            assert torch.equal(got, a_after_1[t][g]), (
                f"new request B with a prefix hit of 48 tokens: its GDN slot (tensor {t}, group {g}) does not hold "
                f"the state after those 48 tokens; it holds "
                f"{'the previous owner A state after 96 tokens' if stale else 'other data'}"
            )
            assert not slot_bytes(t, slot("D", g)).any(), (
                f"new request D without a hit: its recycled GDN slot (tensor {t}, group {g}) still holds C's state"
            )
    touched_slots, touched_blocks = changed(before)
    expected = {slot("B", g) for g in range(2)} | {slot("D", g) for g in range(2)}
    assert touched_slots <= expected and not touched_blocks, (
        f"step 3 restore touched slots {sorted(touched_slots - expected)} / pages {sorted(touched_blocks)}"
    )
    outs = {}
    for req_id, tokens, start in (("B", tok_b[48:96], 48), ("D", tok_d, 0)):
        attention(req_id, tokens, start)
        outs[req_id] = model.forward(req_id, tokens)
    before = snapshot()
    exec(hook_code, {}, {"self": runner, "scheduler_output": so})
    touched_slots, touched_blocks = changed(before)
    assert not touched_slots and touched_blocks == {13, 14}, (
        f"step 3 checkpoints touched slots {sorted(touched_slots)} / pages {sorted(touched_blocks)}, "
        "expected pages [13, 14] (B's blocks ending at token 96)"
    )
    for name in ref_out:
        assert torch.allclose(outs["B"][name].float(), ref_out[name][:, 48:].float()), (
            f"{name}: request B resumed from its prefix hit produces different outputs for tokens 48..95"
        )
    for t in range(2):
        for g in range(2):
            assert torch.equal(slot_bytes(t, slot("B", g)), ref_state[GDN_GROUPS[g][t]]), (
                f"request B's GDN state after 96 tokens (tensor {t}, group {g}) is not bit-identical to one prefill"
            )
            ref = ref_state[GDN_GROUPS[g][t]]
            assert torch.equal(page_bytes(t, [13, 14][g])[: ref.numel()], ref), (
                f"block {[13, 14][g]} does not hold B's checkpoint after 96 tokens"
            )

    # Step 4: B prefills its last 14 tokens; D is left out of the step (not preempted).
    d_state = snapshot()[0]
    out_b4 = run(
        _step([], _cached([("B", 96, [[19], [20], [21]])], set()), {"B": 14}, set(), [21]), {"B": (tok_b[96:], 96)}
    )["B"]
    b_after_4 = [[slot_bytes(t, slot("B", g)) for g in range(2)] for t in range(2)]

    # Step 5: B is preempted; D comes back (re-added, not resumed); G arrives and gets attention
    # block 11, which held A's checkpoint after 96 tokens (group 0) and is in new_block_ids_to_zero.
    before = snapshot()
    gdn_prefix_cache = runner.__dict__.get("_gdn_prefix_cache")
    assert gdn_prefix_cache is None or 11 in gdn_prefix_cache.dirty_blocks, "block 11 holds a checkpoint, not marked"
    so = _step(
        [_new_req("G", tok_g, 0, [[16], [17], [11]])], _cached([("D", 20, None)], set()), {"D": 1, "G": 10}, set(), [11]
    )
    update_states(runner, so)
    for t in range(2):
        for g in range(2):
            assert torch.equal(slot_bytes(t, slot("D", g)), d_state[t][slot("D", g)]), (
                f"request D, re-added without preemption, lost its running GDN state (tensor {t}, group {g})"
            )
        assert not page_bytes(t, 11).any(), f"dirty block 11 handed to attention was not zeroed (tensor {t})"
    touched_slots, touched_blocks = changed(before)
    expected = {slot("G", g) for g in range(2)}
    assert touched_slots <= expected and touched_blocks <= {11}, (
        f"step 5 touched slots {sorted(touched_slots - expected)} / pages {sorted(touched_blocks - {11})}"
    )
    attention("G", tok_g, 0)
    model.forward("G", tok_g)
    exec(hook_code, {}, {"self": runner, "scheduler_output": so})

    # Step 6: B resumes from preemption with a hit of 96 tokens (its own checkpoint, blocks 13/14);
    # G is preempted.
    before = snapshot()
    so = _step([], _cached([("B", 96, [[0, 13, 22], [0, 14, 23], [7, 15, 18]])], {"B"}), {"B": 14}, set(), [18])
    update_states(runner, so)
    for t in range(2):
        for g in range(2):
            got = slot_bytes(t, slot("B", g))
            assert torch.equal(got, ref_state[GDN_GROUPS[g][t]]), (
                f"request B resumed with a prefix hit of 96 tokens: its GDN slot (tensor {t}, group {g}) does not hold "
                f"the state after 96 tokens; it holds "
                f"{'its own state after 110 tokens' if torch.equal(got, b_after_4[t][g]) else 'other data'}"
            )
    touched_slots, touched_blocks = changed(before)
    expected = {slot("B", g) for g in range(2)}
    assert touched_slots <= expected and not touched_blocks, (
        f"step 6 touched slots {sorted(touched_slots - expected)} / pages {sorted(touched_blocks)}"
    )
    attention("B", tok_b[96:], 96)
    out_b6 = model.forward("B", tok_b[96:])
    exec(hook_code, {}, {"self": runner, "scheduler_output": so})
    for name in out_b4:
        assert torch.equal(out_b6[name], out_b4[name]), f"{name}: B's recomputed tail differs after resuming"

    # Step 7: G resumes from preemption without a hit: it starts over from a zero state. Its first
    # GDN group gets block 11 back, whose attention page holds G's own K/V from step 5 (blocks handed
    # to a GDN group are not in new_block_ids_to_zero): nothing there is a state to resume from.
    g_state = [slot_bytes(t, slot("G", 0)) for t in range(2)]
    assert any(s.any() for s in g_state)
    assert all(page_bytes(t, 11).any() for t in range(2))
    before = snapshot()
    so = _step([], _cached([("G", 0, [[11], [2], [3]])], {"G"}), {"G": 10}, set(), [3])
    update_states(runner, so)
    for t in range(2):
        for g in range(2):
            got = slot_bytes(t, slot("G", g))
            assert not got.any(), (
                f"request G resumed without a hit: its GDN slot (tensor {t}, group {g}) is not zeroed; it holds "
                f"{'its old GDN state' if g == 0 and torch.equal(got, g_state[t]) else 'other data'}"
            )
    touched_slots, touched_blocks = changed(before)
    assert touched_slots <= {slot("G", g) for g in range(2)} and not touched_blocks, "step 7 touched other state"

    # Step 8: B comes back (re-added, not resumed) and decodes one token at 110.
    b_state = [[slot_bytes(t, slot("B", g)) for g in range(2)] for t in range(2)]
    run(_step([], _cached([("B", 110, [[], [], []])], set()), {"B": 1}, set(), []), {})
    # Step 9: reset_prefix_cache(reset_running_requests=True) preempted B between the steps, and B
    # resumes at once, with a hit of 48 tokens, while it is still in the persistent batch.
    assert "B" in runner.input_batch.req_id_to_index
    before = snapshot()
    update_states(
        runner, _step([], _cached([("B", 48, [[5, 10], [6, 12], [7, 19]])], {"B"}), {"B": BLOCK}, set(), [19])
    )
    for t in range(2):
        for g in range(2):
            got = slot_bytes(t, slot("B", g))
            assert torch.equal(got, a_after_1[t][g]), (
                f"request B force-preempted and resumed in the persistent batch with a prefix hit of 48 tokens: its "
                f"GDN slot (tensor {t}, group {g}) holds "
                f"{'its own running state' if torch.equal(got, b_state[t][g]) else 'other data'}"
            )
    touched_slots, touched_blocks = changed(before)
    assert touched_slots <= {slot("B", g) for g in range(2)} and not touched_blocks, "step 9 touched other state"

    if prefix_cache is not None:
        _limits(prefix_cache.GDNPrefixCache, runner, bound)
        # A warm-up (dummy) request runs on vLLM's null block: no checkpoint is saved for it.
        before, dirty = snapshot(), set(runner._gdn_prefix_cache.dirty_blocks)
        warmup = ReqState(req_id="W", num_computed_tokens=0, block_ids=[[0], [0], [0]])
        runner._gdn_prefix_cache.save_after_forward({"W": BLOCK}, {"W": warmup}, {"W": 0})
        touched_slots, touched_blocks = changed(before)
        assert not touched_slots and not touched_blocks and runner._gdn_prefix_cache.dirty_blocks == dirty, (
            f"a warm-up request on the null block saved a checkpoint: pages {sorted(touched_blocks)}"
        )

    # Compact GDN without prefix caching (the default for GDN models): no prefix cache is built, and
    # the steps run as before (new requests, the post-forward hooks).
    _without_prefix_caching(root, ns, hook_code, get_shape)

    # Start-up: prefix caching for a GDN model without compact slots is refused, since this change
    # serves compact slots only (the non-compact GDN layers read and write one state index).
    _start_up(root)


def _runner_import(runner_py: Path, prefix_cache: types.ModuleType) -> Any:
    """What the runner module's own import of GDNPrefixCache binds (what initialize_kv_cache looks up
    at run time; without such an import it raises NameError): the statement is run as the file has
    it, with the tree's hpu_gdn_prefix_cache.py as the module it names."""
    found = [
        sub
        for node in parse_file(runner_py).body
        for sub in (ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node])
        if isinstance(sub, ast.ImportFrom) and any((a.asname or a.name) == "GDNPrefixCache" for a in sub.names)
    ]
    name = MODULE[:-3].replace("/", ".")
    if len(found) != 1 or found[0].module != name:
        raise NameError(
            f"hpu_model_runner.py binds GDNPrefixCache {len(found)} times, from "
            f"{[f.module for f in found]}, not once from {name}: initialize_kv_cache raises NameError"
        )
    bound: dict[str, Any] = {}
    with mock.patch.dict(sys.modules, {name: prefix_cache}):
        exec(compile_nodes(runner_py, found), bound)
    assert bound["GDNPrefixCache"] is prefix_cache.GDNPrefixCache
    return bound["GDNPrefixCache"]


def _limits(cls: Any, runner: Any, bound: dict[str, Any]) -> None:
    """The setups the prefix cache does not serve are refused when initialize_kv_cache builds it (or
    when a step asks for a partial-block copy), rather than served with wrong states; a KV cache
    tensor that no GDN layer shares holds no checkpoints."""
    vllm_config, config = runner.vllm_config, _kv_cache_config()
    args = (config, bound, runner._compact_gdn_group_offset, runner._num_gdn_groups, ATTN_GID)

    def with_cache(**attrs: Any) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            **{
                **vars(vllm_config),
                "cache_config": types.SimpleNamespace(**{**vars(vllm_config.cache_config), **attrs}),
            }
        )

    other_block = copy.copy(config.kv_cache_groups[1].kv_cache_spec)
    other_block.block_size = 2 * BLOCK
    two_sizes = types.SimpleNamespace(
        **{
            **vars(config),
            "kv_cache_groups": [
                config.kv_cache_groups[0],
                types.SimpleNamespace(kv_cache_spec=other_block, layer_names=config.kv_cache_groups[1].layer_names),
                config.kv_cache_groups[2],
            ],
        }
    )
    fine_block = copy.copy(config.kv_cache_groups[ATTN_GID].kv_cache_spec)
    fine_block.block_size = KERNEL_BLOCK
    fine_attention = types.SimpleNamespace(
        **{
            **vars(config),
            "kv_cache_groups": [
                *config.kv_cache_groups[:ATTN_GID],
                types.SimpleNamespace(
                    kv_cache_spec=fine_block, layer_names=config.kv_cache_groups[ATTN_GID].layer_names
                ),
            ],
        }
    )
    no_attention = types.SimpleNamespace(
        **{
            **vars(config),
            "kv_cache_tensors": [
                types.SimpleNamespace(size=t.size, shared_by=[n for n in t.shared_by if n not in ATTN_LAYERS])
                for t in config.kv_cache_tensors
            ],
        }
    )
    small = torch.zeros(NUM_BLOCKS * BLOCK + 1, 1, 1, dtype=torch.bfloat16)  # one byte pair per token
    small_pages = {**bound, ATTN_LAYERS[0]: (small, small.clone())}
    refused: list[tuple[str, type[Exception], str, Any]] = [
        (
            "mamba_cache_mode 'all'",
            NotImplementedError,
            "align",
            lambda: cls.create(with_cache(mamba_cache_mode="all"), *args),
        ),
        (
            "two GDN block sizes",
            NotImplementedError,
            "one GDN block size",
            lambda: cls.create(vllm_config, two_sizes, *args[1:]),
        ),
        (
            "speculative decoding",
            NotImplementedError,
            "speculative decoding",
            lambda: cls.create(types.SimpleNamespace(**{**vars(vllm_config), "speculative_config": object()}), *args),
        ),
        (
            "prefix_match_unit 16 with 48-token blocks",
            NotImplementedError,
            "inside a block",
            lambda: cls.create(with_cache(prefix_match_unit=KERNEL_BLOCK), *args),
        ),
        # Without prefix_match_unit vLLM hashes every gcd of the group block sizes: 16 tokens here.
        (
            "16-token attention blocks with 48-token GDN blocks",
            NotImplementedError,
            "inside a block",
            lambda: cls.create(vllm_config, fine_attention, *args[1:]),
        ),
        (
            "KV cache tensors without an attention layer",
            NotImplementedError,
            "one attention layer",
            lambda: cls.create(vllm_config, no_attention, *args[1:]),
        ),
        (
            "attention pages smaller than a GDN state",
            ValueError,
            "does not fit",
            lambda: cls.create(vllm_config, config, small_pages, *args[2:]),
        ),
        (
            "a step with kv_cache_block_copies",
            NotImplementedError,
            "kv_cache_block_copies",
            lambda: runner._gdn_prefix_cache.update_states(
                types.SimpleNamespace(kv_cache_block_copies=[(1, 2)]), [], {}, {}
            ),
        ),
    ]
    for what, error, says, call in refused:
        try:
            call()
        except error as exc:
            assert says in str(exc), f"{what}: refused, but the error does not say why: {exc!r}"
        else:
            raise AssertionError(f"{what}: not refused; the prefix cache would serve it with wrong GDN states")
    # A third layer of the attention group whose KV cache tensor no GDN layer shares.
    lone = "layers.11.self_attn.attn"
    attn_group = config.kv_cache_groups[ATTN_GID]
    extra = types.SimpleNamespace(
        **{
            **vars(config),
            "kv_cache_groups": [
                *config.kv_cache_groups[:ATTN_GID],
                types.SimpleNamespace(
                    kv_cache_spec=attn_group.kv_cache_spec, layer_names=[*attn_group.layer_names, lone]
                ),
            ],
            "kv_cache_tensors": [*config.kv_cache_tensors, types.SimpleNamespace(size=0, shared_by=[lone])],
        }
    )
    extra_caches = {**bound, lone: tuple(torch.zeros_like(c) for c in bound[ATTN_LAYERS[0]][:2]) + (None, None)}
    assert len(cls.create(vllm_config, extra, extra_caches, *args[2:]).tensors) == 2, (
        "a tensor without GDN layers got pages"
    )
    _layouts(cls, vllm_config)


def _layouts(cls: Any, vllm_config: Any) -> None:
    """Other hybrids that the prefix cache serves: one GDN group; attention blocks of two GDN blocks
    (vLLM hashes every gcd of the block sizes, 48 here); a GDN state exactly as large as an
    attention page. A checkpoint saved at a block boundary lands in the attention page of its
    block (the state bytes over the K page, then the V page) and restores bit-exact."""
    attn = FullAttentionSpec(BLOCK, KV_HEADS, HEAD_SIZE, torch.bfloat16)
    gdn = MambaSpec(BLOCK, attn.page_size_bytes, shapes=((WIDTH - 1, CONV_DIM), (HEADS, KDIM, VDIM)))
    # 1024 bf16 + 256 float32 = 3072 bytes = 2 * 48 tokens * 16 values * 2 bytes: the whole page.
    exact = MambaSpec(BLOCK, attn.page_size_bytes, shapes=((1024,), (256,)))
    wide = FullAttentionSpec(2 * BLOCK, KV_HEADS, HEAD_SIZE, torch.bfloat16)
    gen = torch.Generator().manual_seed(1)
    for what, gdn_spec, num_gdn, attn_spec in [
        ("one GDN group", gdn, 1, attn),
        ("96-token attention blocks over 48-token GDN blocks", gdn, 2, wide),
        ("a GDN state exactly as large as an attention page", exact, 2, attn),
    ]:
        groups = [
            types.SimpleNamespace(kv_cache_spec=gdn_spec, layer_names=list(GDN_GROUPS[g])) for g in range(num_gdn)
        ]
        groups.append(types.SimpleNamespace(kv_cache_spec=attn_spec, layer_names=list(ATTN_LAYERS)))
        config = types.SimpleNamespace(
            num_blocks=NUM_BLOCKS,
            kv_cache_groups=groups,
            kv_cache_tensors=[
                types.SimpleNamespace(
                    size=NUM_BLOCKS * attn_spec.page_size_bytes,
                    shared_by=[*(GDN_GROUPS[g][i] for g in range(num_gdn)), ATTN_LAYERS[i]],
                )
                for i in range(2)
            ],
        )
        kv_caches: dict[str, Any] = {}
        states = []
        for i in range(2):
            # As initialize_kv_cache allocates them: one compact state tuple for the GDN layers of a
            # tensor, and K/V caches over the pool plus a spare kernel block.
            state = tuple(
                torch.randn(MAX_REQS * num_gdn + 2, *shape, generator=gen).to(dtype)
                for shape, dtype in zip(gdn_spec.shapes, gdn_spec.dtypes)
            )
            kv_caches.update({GDN_GROUPS[g][i]: state for g in range(num_gdn)})
            rows = NUM_BLOCKS * attn_spec.block_size + KERNEL_BLOCK
            kv_caches[ATTN_LAYERS[i]] = (
                torch.zeros(rows, KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16),
                torch.zeros(rows, KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16),
                None,
                None,
            )
            states.append(state)
        try:
            cache = cls.create(vllm_config, config, kv_caches, {g: g for g in range(num_gdn)}, num_gdn, num_gdn)
        except Exception as exc:
            raise AssertionError(f"{what}: refused, but it can be served: {exc!r}") from exc
        # Request R (base slot 1, so slot num_gdn + g + 1 of group g) ends its first 48 tokens: group g
        # checkpoints into block 5 + g.
        req = ReqState(req_id="R", num_computed_tokens=0, block_ids=[[5 + g] for g in range(num_gdn)] + [[9]])
        saved = [[_row_bytes(states[i], num_gdn + g + 1).clone() for g in range(num_gdn)] for i in range(2)]
        cache.save_after_forward({"R": BLOCK}, {"R": req}, {"R": 1})
        size = attn_spec.block_size
        for i in range(2):
            kc, vc = kv_caches[ATTN_LAYERS[i]][:2]
            for g in range(num_gdn):
                b = 5 + g
                page = torch.cat([c[b * size : (b + 1) * size].reshape(-1).view(torch.uint8) for c in (kc, vc)])
                assert torch.equal(page[: saved[i][g].numel()], saved[i][g]), (
                    f"{what}: the checkpoint of GDN group {g} is not in the attention page of block {b} (tensor {i})"
                )
            written = sum(int(c.view(torch.uint8).count_nonzero()) for c in (kc, vc))
            assert written <= sum(int(s.count_nonzero()) for s in saved[i]), (
                f"{what}: the checkpoints wrote outside their pages (tensor {i})"
            )
        for state in states:
            for s in state:
                s.zero_()
        cache.load_slot(1, req.block_ids, BLOCK)
        for i in range(2):
            for g in range(num_gdn):
                assert torch.equal(_row_bytes(states[i], num_gdn + g + 1), saved[i][g]), (
                    f"{what}: GDN group {g} (tensor {i}) does not restore its checkpoint bit-exact"
                )


def _row_bytes(state: tuple[torch.Tensor, ...], index: int) -> torch.Tensor:
    """The bytes of one compact slot: its conv state, then its SSM state."""
    return torch.cat([s[index].reshape(-1).view(torch.uint8) for s in state])


def _initialized_runner(runner_py: Path, ns: dict[str, Any], get_shape: Any, prefix_caching: bool) -> Any:
    """A stand-in runner (compact GDN on, align mode) after the tree's real initialize_kv_cache."""
    cache_config = types.SimpleNamespace(
        block_size=BLOCK,
        mamba_block_size=BLOCK,
        mamba_cache_mode="align",
        enable_prefix_caching=prefix_caching,
        prefix_match_unit=None,
    )
    runner = initialize_kv_cache_runner(
        max_num_seqs=MAX_REQS,
        num_gdn=4,
        num_groups=3,
        kernel_block=KERNEL_BLOCK,
        get_kv_cache_shape=get_shape,
        cache_config=cache_config,
        use_prefix_caching=prefix_caching,
        vllm_config_attrs={"speculative_config": None},
        requests={},
        input_batch=InputBatch(),
        encoder_cache={},
        uses_mrope=False,
        use_async_scheduling=False,
    )
    runner.__dict__["_get_attention_group_id_for_hybrid"] = types.MethodType(
        load_function(runner_py, "HPUModelRunner._get_attention_group_id_for_hybrid", ns), runner
    )
    load_function(runner_py, "HPUModelRunner.initialize_kv_cache", ns)(runner, _kv_cache_config())
    return runner


def _without_prefix_caching(root: Path, ns: dict[str, Any], hook_code: Any, get_shape: Any) -> None:
    runner_py = root / RUNNER
    runner = _initialized_runner(runner_py, ns, get_shape, prefix_caching=False)
    assert runner.__dict__.get("_gdn_prefix_cache") is None, "a GDN prefix cache was built without prefix caching"
    update_states = load_function(runner_py, "HPUModelRunner._update_states", ns)
    tok_a, tok_c = list(range(100, 201)), list(range(400, 430))
    steps = [
        _step(
            [_new_req("A", tok_a, 0, [[5], [6], [7]]), _new_req("C", tok_c, 0, [[1], [2], [3]])],
            _cached([], set()),
            {"A": BLOCK, "C": 30},
            set(),
            [7, 3],
        ),
        _step([], _cached([("A", 48, [[11], [12], [10]])], set()), {"A": BLOCK}, {"C"}, [10]),
    ]
    for n, so in enumerate(steps, 1):
        try:
            update_states(runner, so)
            exec(hook_code, {}, {"self": runner, "scheduler_output": so})
        except AttributeError as exc:
            raise AssertionError(f"compact GDN without prefix caching: step {n} fails: {exc!r}") from exc
    assert sorted(runner._gdn_req_to_base_slot) == ["A"], (
        f"compact GDN without prefix caching: slots {runner._gdn_req_to_base_slot} after C finished"
    )


def _start_up(root: Path) -> None:
    """The GDN set-up of the tree's HPUModelRunner.__init__ (fixes/_support/gdn_init.py)."""
    from fixes._support.gdn_init import describe, gdn_start

    for what, env, kwargs in [
        ("VLLM_COMPACT_GDN=0, no prefix caching", {"VLLM_COMPACT_GDN": "0"}, {}),
        ("compact GDN, no prefix caching", {}, {}),
    ]:
        start = gdn_start(root, prefix_caching=False, env=env, **kwargs)
        if start.error is not None:
            raise RuntimeError(f"{what}: must start, but {describe(start)}")
        # Only initialize_kv_cache builds a prefix cache; until then the steps must see none.
        assert getattr(start.runner, "_gdn_prefix_cache", None) is None, (
            f"{what}: __init__ leaves _gdn_prefix_cache = {start.runner._gdn_prefix_cache!r}"
        )
    # Compact GDN with prefix caching, what this change serves: it says so, instead of the stock
    # warning. verify's whole-pack tree also carries gdn-prefix-cache-guard, which this fix
    # supersedes, and whose check comes later in the same block: there the start is refused by it
    # (apply never installs both).
    # VLLM_COMPACT_GDN=True is compact mode too (_compact_gdn_enabled lower-cases it), so it is served
    # as well, not refused as non-compact.
    for what, env in [
        ("compact GDN, --enable-prefix-caching", {}),
        ("VLLM_COMPACT_GDN=True, --enable-prefix-caching", {"VLLM_COMPACT_GDN": "True"}),
    ]:
        start = gdn_start(root, prefix_caching=True, env=env)
        guard = isinstance(start.error, ValueError) and "does not support prefix caching" in str(start.error)
        assert (start.error is None and start.compact) or guard, f"{what}: {describe(start)}"
        assert not start.warnings and any("prefix-cache hits restore GDN states" in i for i in start.infos), (
            f"{what}: warnings {start.warnings}, infos {start.infos}"
        )
    for what, env, kwargs in [
        ("VLLM_COMPACT_GDN=0, --enable-prefix-caching", {"VLLM_COMPACT_GDN": "0"}, {}),
        ("PD serving (compact GDN turned off), --enable-prefix-caching", {}, {"kv_transfer": True}),
    ]:
        start = gdn_start(root, prefix_caching=True, env=env, **kwargs)
        assert start.error is not None, (
            f"{what}: the worker starts with non-compact GDN state and prefix caching on, which this change "
            f"does not serve ({describe(start)})"
        )
        assert isinstance(start.error, ValueError) and "VLLM_COMPACT_GDN" in str(start.error), (
            f"{what}: refused, but not with a clear error: {describe(start)}"
        )
