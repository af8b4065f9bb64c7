"""CPU harness for proofs that run the tree's real ``HPUModelRunner`` methods on a stand-in runner.

``sample_tokens_globals`` gives the module globals ``HPUModelRunner.sample_tokens`` and its helpers
need (with the tree's real ``shallow_tuple``), ``runner_class`` compiles the named methods from the
tree's ``hpu_model_runner.py`` onto a subclass of ``RunnerStandIn`` (whose other attributes are
MagicMocks), ``PrefillData`` has ``PrefillInputData``'s fields, and ``set_step_state`` /
``stand_in_runner`` set the attributes a ``sample_tokens`` step reads before its forward passes.

Used by the proofs of prompt-logprobs, structured-output-rows and prompt-order. Proofs import it
as ``fixes._support.runner`` (the cookbook root is on ``sys.path``).
"""

from __future__ import annotations

import builtins
import types
from collections.abc import Iterable
from dataclasses import field, fields, make_dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union
from unittest import mock

import numpy as np
import torch

from fixpack.proofkit import load_function


def load_mocked(path: Path, qualname: str, given: dict[str, Any]) -> Any:
    """The tree's function ``qualname`` with globals ``given``, plus a MagicMock for every other
    global name its code uses (not builtins), read off the compiled code itself."""
    fn = load_function(path, qualname, given)
    ns = fn.__globals__
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        for name in code.co_names:
            if name not in ns and not hasattr(builtins, name):
                ns[name] = mock.MagicMock(name=name)
    return fn


# Same field order as PrefillInputData; sample_tokens unpacks it with shallow_tuple.
PrefillData = make_dataclass(
    "PrefillData",
    [
        (name, list, field(default_factory=list))
        for name in (
            "request_ids",
            "prompt_lens",
            "token_ids",
            "position_ids",
            "attn_metadata",
            "logits_indices",
            "logits_requests",
        )
    ],
)


class RunnerStandIn:
    """Stands in for HPUModelRunner: real methods are set on the class, the rest are stand-ins."""

    def __getattr__(self, name: str) -> Any:
        value = mock.MagicMock(name=f"runner.{name}")
        setattr(self, name, value)
        return value


def sample_tokens_globals(path: Path, **given: Any) -> dict[str, Any]:
    """The globals sample_tokens reads that are not MagicMocks, ``given`` added or overriding, and the
    tree's real ``shallow_tuple`` (``path``: the tree's hpu_model_runner.py)."""
    base: dict[str, Any] = {
        "torch": torch,
        "np": np,
        "Optional": Optional,
        "Union": Union,
        "Any": Any,
        "fields": fields,
        "LMCacheConnectorMetadata": None,
        "ModelRunnerOutput": type("ModelRunnerOutput", (), {}),
        "AsyncModelRunnerOutput": type("AsyncModelRunnerOutput", (), {}),
        "Mergeable": object,
        "ensure_multi_token_decodes_last": lambda *args, **kwargs: None,
        **given,
    }
    base["shallow_tuple"] = load_mocked(path, "shallow_tuple", base)
    return base


def runner_class(path: Path, names: Iterable[str], base: dict[str, Any]) -> type[RunnerStandIn]:
    """A RunnerStandIn subclass with the tree's real ``HPUModelRunner.<name>`` methods, compiled with
    ``base`` and a MagicMock for every other global they use (each load parses the whole file)."""
    methods: dict[str, Any] = {}
    for name in names:
        qualname = f"HPUModelRunner.{name}"
        methods[name] = load_mocked(path, qualname, base)
    return type("Runner", (RunnerStandIn,), methods)


def set_step_state(runner: Any, *, merged_prefill: bool = False, profiler: Any = None) -> None:
    """What every sample_tokens step reads first: not warmup, batch changed, no spec decode, no
    async scheduling; ``profiler`` defaults to a MagicMock with ``enabled=False``."""
    runner.warmup_mode = False
    runner.batch_changed = True
    runner.vllm_config = SimpleNamespace(speculative_config=None)
    runner.speculative_config = None
    runner.use_async_scheduling = False
    runner.use_merged_prefill = merged_prefill
    runner.profiler = mock.MagicMock(enabled=False) if profiler is None else profiler


def stand_in_runner(
    cls: type[RunnerStandIn], scheduler_output: Any, req_ids: list[str], *, merged_prefill: bool = False
) -> RunnerStandIn:
    """A runner of ``cls`` for one sample_tokens step on CPU: the step state, no aux hidden states, not
    the driver worker, no KV caches, a MagicMock input batch holding ``req_ids`` (that list, in that
    order), and no-op decode reordering, multimodal inputs, LoRA and KV connector."""
    runner = cls()
    runner.scheduler_output = scheduler_output
    set_step_state(runner, merged_prefill=merged_prefill)
    runner.use_aux_hidden_state_outputs = False
    runner.is_driver_worker = False
    runner.device = torch.device("cpu")
    runner.kv_caches = None
    runner.input_batch = mock.MagicMock(name="input_batch")
    runner.input_batch.req_ids = req_ids
    runner.input_batch.req_id_to_index = {rid: i for i, rid in enumerate(req_ids)}
    runner._ensure_decodes_first = lambda *args, **kwargs: None
    runner._get_model_mm_inputs = lambda *args, **kwargs: (None, None)
    runner._configure_lora = lambda *args, **kwargs: (None, None)
    runner.maybe_setup_kv_connector = lambda *args, **kwargs: None
    return runner
