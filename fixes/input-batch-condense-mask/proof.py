"""input-batch-condense-mask: a request must never get the allowed_token_ids mask of a row's former owner.

Runs on CPU vLLM 0.26.0's real GPUModelRunner._update_states and _may_reorder_batch
(gpu_model_runner.py, the methods vLLM's CPUModelRunner inherits) on the tree's real InputBatch
(gpu_input_batch.py: add_request, remove_request, condense, refresh_metadata and
_make_sampling_metadata), one scheduler step at a time, and feeds the batch's SamplingMetadata to
vLLM's real Sampler.apply_logits_processors(), which masks the logits with allowed_token_ids_mask.
The tokens left finite in a request's row are the tokens it may sample. The batch is never
reordered here (reorder_batch_threshold None, as with the CPU attention backend), so only
condense() moves rows.

Every way _update_states gives a row to a request is covered: a new request appended behind the
batch one step after condense() moved a request down (the sequence of the recipes'
allowed-token-ids-leak check), a preempted request resumed behind it, and a new request put into
the hole a finished request left in the same step (remove_request() cleared that row).

The loader, the stand-ins and the step driver (Engine) are in fixes/_support/vllm_input_batch.py.
"""

from __future__ import annotations

from fixes._support.vllm_input_batch import Engine, load
from fixpack.proofkit import Trees


def check(trees: Trees) -> None:
    runner_cls, apply = load(trees)

    # The allowed-token-ids-leak sequence: B alone, then A (allowed_token_ids) beside it; B finishes
    # and condense() moves A from row 1 to row 0; a step later C (no allowed_token_ids) is appended
    # at row 1, which still holds A's mask.
    eng = Engine(runner_cls, apply, reorder_batch_threshold=None)
    eng.step({"B": None}, [])
    eng.step({"A": [10, 11]}, ["B"])
    eng.check("A joined B", ["B", "A"])
    eng.step({}, ["A"], finished=("B",))
    eng.check("B finished (condense)", ["A"])
    eng.step({"C": None}, ["A"])
    eng.check("C arrived one step after B finished", ["A", "C"])
    # The same step that frees a row fills it: remove_request() cleared A's row, D takes it.
    eng.step({"D": None}, ["C"], finished=("A",))
    eng.check("A finished and D took its row", ["D", "C"])
    problems = eng.problems

    # A preempted request, condense(), and the request resumed behind the batch.
    eng = Engine(runner_cls, apply, reorder_batch_threshold=None)
    eng.step({"P": None, "Q": None, "R": [5, 6]}, [])
    eng.step({}, ["Q", "R"])  # P is not scheduled: removed from the batch; R moves to row 0
    eng.check("P preempted (condense)", ["R", "Q"])
    eng.step({}, ["R", "Q"], resumed=("P",))  # P comes back to row 2, which held R's mask
    eng.check("P resumed behind the condensed batch", ["R", "Q", "P"])
    problems += eng.problems

    assert not problems, (
        "a request took a row of allowed_token_ids_mask_cpu_tensor that still held the mask of "
        "the request condense() moved out of it (condense() copies the moved request's row and "
        "leaves the old one as it was):\n  " + "\n  ".join(problems)
    )
