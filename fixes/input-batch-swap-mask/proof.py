"""input-batch-swap-mask: swap_states() must move each request's allowed_token_ids mask row with it.

Runs on CPU vLLM 0.26.0's real GPUModelRunner._update_states and _may_reorder_batch
(gpu_model_runner.py, the methods vLLM's CPUModelRunner inherits) with the real
reorder_batch_to_split_decodes_and_prefills (v1/attention/backends/utils.py), which calls
swap_states(), on the tree's real InputBatch (gpu_input_batch.py: add_request, remove_request,
condense, swap_states, refresh_metadata and _make_sampling_metadata), one scheduler step at a time,
and feeds the batch's SamplingMetadata to vLLM's real Sampler.apply_logits_processors(), which
masks the logits with allowed_token_ids_mask. The tokens left finite in a request's row are the
tokens it may sample. reorder_batch_threshold is 1, what the GDN, Mamba, short-conv and linear
attention builders (hybrid models, on a CPU too), FlashInfer and MLA ask for.

The loader, the stand-ins and the step driver (Engine) are in fixes/_support/vllm_input_batch.py.
"""

from __future__ import annotations

from fixes._support.vllm_input_batch import Engine, load
from fixpack.proofkit import Trees


def check(trees: Trees) -> None:
    runner_cls, apply = load(trees)
    eng = Engine(runner_cls, apply, reorder_batch_threshold=1)
    eng.step({"A": None, "B": None, "G": None, "C": [5], "E": None, "L": [6]}, [])
    eng.check("six new requests (all prefills: no reorder)", ["A", "B", "G", "C", "E", "L"])
    # A, B and G finish; the new D, F and K take their rows 0 to 2 (prefills), in front of the
    # decodes C, E and L, so the reorder swaps rows 3 and 0, 4 and 1, 5 and 2: restricted with
    # restricted (C [5], D [9]), free with restricted (E, F [7, 8]) and restricted with free (L [6], K).
    eng.step({"D": [9], "F": [7, 8], "K": None}, ["C", "E", "L"], finished=("A", "B", "G"))
    eng.check("decodes moved in front of the new prefills", ["C", "E", "L", "D", "F", "K"])
    assert not eng.problems, (
        "swap_states() moved the requests but not their rows of allowed_token_ids_mask_cpu_tensor "
        "(a tuple swap of two row views leaves both rows with the old row i2):\n  " + "\n  ".join(eng.problems)
    )
