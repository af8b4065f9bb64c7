"""request-token-ids: token ids a request names are checked against the model's vocabulary.

Runs vLLM's real request validation from the given tree on a CPU:

- ``SamplingParams`` as a plain dataclass made of the real class body of vllm/sampling_params.py
  (its fields with their defaults, ``__post_init__``, ``_verify_args``, ``verify`` and every
  ``_validate_*`` method, ``update_from_generation_config``), so that constructing one runs the
  construction-time checks and ``verify`` runs what ``InputProcessor._validate_params`` calls, with
  the tree's real VLLMValidationError (vllm/exceptions.py);
- ``InputProcessor._validate_model_input`` and ``_validate_prompt_len``
  (vllm/v1/engine/input_processor.py) on token and multimodal prompts;
- what the worker does with the ids a request got through: the real ``MinTokensLogitsProcessor``
  (vllm/v1/sample/logits_processor/builtin.py, with the real interface module and
  async_tensor_h2d) on logits of the model's width.

The model is the issue's tiny one: a vocabulary of 1024, a tokenizer of 507 tokens; the model's
vocabulary is what the logits, the allowed-token mask and the embedding are sized by.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import sys
import types
from enum import Enum
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fixpack.proofkit import Trees, compile_nodes, load_function, load_node, parse_file, stub_modules

VOCAB = 1024  # model_config.get_vocab_size(): the width of the logits
TOKENIZER_LEN = 507  # len(tokenizer); max_token_id 506
STOP_ID = 5_000_000  # the stop id
EOS = 2

SAMPLING_PARAMS = "vllm/sampling_params.py"
INPUT_PROCESSOR = "vllm/v1/engine/input_processor.py"
BUILTIN = "vllm/v1/sample/logits_processor/builtin.py"
INTERFACE = "vllm/v1/sample/logits_processor/interface.py"


class Tokenizer:
    """The tiny model's tokenizer: 507 tokens, fewer than the model's vocabulary."""

    def __init__(self, size: int = TOKENIZER_LEN) -> None:
        self.size = size
        self.max_token_id = size - 1

    def __len__(self) -> int:
        return self.size


MODEL_CONFIG = SimpleNamespace(
    get_vocab_size=lambda: VOCAB,
    max_logprobs=20,
    logits_processors=None,
    is_diffusion=False,
    max_model_len=64,
    runner_type="generate",
)


def _exec_file(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


def _sampling_params_class(root: Path) -> tuple[type, type]:
    """The tree's SamplingParams (a dataclass of its real body) and VLLMValidationError."""
    path = root / SAMPLING_PARAMS
    error = load_function(root / "vllm/exceptions.py", "VLLMValidationError", {"Any": Any})
    # _validate_logits_processors imports this; no custom logits processors are configured.
    stub_modules("vllm.v1.sample.logits_processor")
    sys.modules["vllm.v1.sample.logits_processor"].validate_logits_processors_parameters = lambda procs, params: None

    module = types.ModuleType("proof_sampling_params")  # dataclasses reads the class's module
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns.update(
        {
            "math": math,
            "cached_property": cached_property,
            "msgspec": SimpleNamespace(field=dataclasses.field),
            "envs": SimpleNamespace(VLLM_MAX_N_SEQUENCES=16384),
            "logger": SimpleNamespace(warning=lambda *a, **k: None, warning_once=lambda *a, **k: None),
            "VLLMValidationError": error,
            "RequestOutputKind": load_function(path, "RequestOutputKind", {"Enum": Enum}),
            "validate_thinking_token_budget": load_function(
                path, "validate_thinking_token_budget", {"VLLMValidationError": error}
            ),
        }
    )
    # The module's constants (_SAMPLING_EPS, _MAX_TEMP, MAX_LOGPROB_TOKEN_IDS), as the file sets them.
    consts = [
        node
        for node in parse_file(path).body
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
    ]
    cls = load_node(path, "SamplingParams")
    cls.bases, cls.keywords, cls.decorator_list = [], [], []  # msgspec.Struct -> a kw-only dataclass
    exec(compile_nodes(path, [*consts, cls]), ns)
    return dataclasses.dataclass(kw_only=True)(ns["SamplingParams"]), error


def _verify(sp: type, tokenizer: Tokenizer | None, **kwargs: Any) -> tuple[Any, ValueError | None]:
    """A request's SamplingParams as InputProcessor validates it: construction, then verify()."""
    params = sp(**kwargs)
    try:
        params.verify(MODEL_CONFIG, None, None, tokenizer)
    except ValueError as exc:
        return params, exc
    # What process_inputs does next: the EOS joins the stop ids min_tokens masks.
    params.update_from_generation_config({}, EOS)
    return params, None


def _min_tokens_processor(root: Path) -> type:
    """The tree's MinTokensLogitsProcessor with its real interface module and async_tensor_h2d."""
    stub_modules("vllm", "vllm.utils.torch_utils")
    sys.modules["vllm"].SamplingParams = object
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(
        root / "vllm/utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False}
    )
    _exec_file("vllm.v1.sample.logits_processor.interface", root / INTERFACE)
    builtin = _exec_file("vllm.v1.sample.logits_processor.builtin", root / BUILTIN)
    return builtin.MinTokensLogitsProcessor


def _apply_min_tokens(proc_cls: type, params: Any, interface: Any, spec_decode: bool) -> torch.Tensor:
    """One request with min_tokens not yet reached, in row 0 of a batch on logits of the model's width."""
    proc = proc_cls(None, torch.device("cpu"), False)
    proc.update_state(interface.BatchUpdate(batch_size=1, removed=[], added=[(0, params, [1, 2], [])], moved=[]))
    logits = torch.zeros(2 if spec_decode else 1, VOCAB)
    if spec_decode:
        return proc.apply_with_spec_decode(logits, [2])
    return proc.apply(logits)


def _check_stop_token_ids(sp: type, error: type, proc_cls: type, interface: Any) -> None:
    for tokenizer in (Tokenizer(), None):
        tok = "tokenizer of 507" if tokenizer else "no tokenizer"
        # The request: POST /v1/completions {"max_tokens": 8, "min_tokens": 4, "stop_token_ids": [5000000]}
        params, exc = _verify(sp, tokenizer, max_tokens=8, min_tokens=4, stop_token_ids=[7, STOP_ID])
        if exc is None:
            for spec_decode in (False, True):
                try:
                    _apply_min_tokens(proc_cls, params, interface, spec_decode)
                except IndexError as err:
                    what = "apply_with_spec_decode" if spec_decode else "apply"
                    raise AssertionError(
                        f"stop_token_ids=[7, {STOP_ID}] ({tok}) passed request validation; in the worker "
                        f"MinTokensLogitsProcessor.{what} then indexed logits of width {VOCAB} with it: "
                        f"{err} (EngineDeadError: one request ends the service)"
                    ) from err
            raise AssertionError(f"stop_token_ids=[7, {STOP_ID}] ({tok}) passed request validation")
        assert isinstance(exc, error) and exc.parameter == "stop_token_ids", f"{tok}: {exc!r}"
        assert exc.value == [STOP_ID] and str(VOCAB) in str(exc), f"{tok}: {exc}"

        # Negative ids are refused too (index_put_ would wrap -1 to the last column).
        _, exc = _verify(sp, tokenizer, max_tokens=8, min_tokens=4, stop_token_ids=[-1, 5])
        assert isinstance(exc, error) and exc.parameter == "stop_token_ids" and exc.value == [-1], (
            f"stop_token_ids=[-1, 5] ({tok}): {exc!r}"
        )
        _, exc = _verify(sp, tokenizer, max_tokens=8, stop_token_ids=[VOCAB])
        assert isinstance(exc, error) and exc.value == [VOCAB], f"stop_token_ids=[{VOCAB}] ({tok}): {exc!r}"

        # Ids inside the model's vocabulary, past the tokenizer's included, are accepted, and the
        # worker masks them.
        params, exc = _verify(sp, tokenizer, max_tokens=8, min_tokens=4, stop_token_ids=[0, 800, VOCAB - 1])
        assert exc is None, f"stop_token_ids=[0, 800, {VOCAB - 1}] ({tok}) refused: {exc}"
        for spec_decode in (False, True):
            logits = _apply_min_tokens(proc_cls, params, interface, spec_decode)
            masked = sorted(torch.isinf(logits[0]).nonzero().flatten().tolist())
            assert masked == [0, EOS, 800, VOCAB - 1], f"min_tokens masked {masked}"
        params, exc = _verify(sp, tokenizer)
        assert exc is None and params.stop_token_ids == [], f"no stop ids: {exc}"


def _check_allowed_token_ids(sp: type, error: type) -> None:
    for tokenizer in (Tokenizer(), None):
        tok = "tokenizer of 507" if tokenizer else "no tokenizer"
        _, exc = _verify(sp, tokenizer, allowed_token_ids=[0, 800, VOCAB - 1])
        assert exc is None, (
            f"allowed_token_ids=[0, 800, {VOCAB - 1}] ({tok}) refused although the model's vocabulary is "
            f"{VOCAB} (the allowed-token mask is that wide): {exc}"
        )
        for bad in (VOCAB, -1):
            _, exc = _verify(sp, tokenizer, allowed_token_ids=[5, bad])
            assert exc is not None, (
                f"allowed_token_ids=[5, {bad}] ({tok}) passed request validation: the worker's allowed-token "
                f"mask of width {VOCAB} is then indexed with {bad}"
            )
            assert isinstance(exc, error) and exc.parameter == "allowed_token_ids" and exc.value == [bad], (
                f"allowed_token_ids=[5, {bad}] ({tok}): {exc!r}"
            )
            assert str(VOCAB) in str(exc), f"allowed_token_ids=[5, {bad}] ({tok}): {exc}"
        _, exc = _verify(sp, tokenizer, allowed_token_ids=[])
        assert isinstance(exc, error) and exc.parameter == "allowed_token_ids", f"empty: {exc!r}"


def _check_prompt_ids(root: Path) -> None:
    path = root / INPUT_PROCESSOR
    ns = {
        "length_from_prompt_token_ids_or_embeds": load_function(
            root / "vllm/utils/__init__.py", "length_from_prompt_token_ids_or_embeds"
        )
    }
    validate = load_function(path, "InputProcessor._validate_model_input", ns)
    prompt_len = load_function(path, "InputProcessor._validate_prompt_len")
    embedding = torch.nn.Embedding(VOCAB, 4)  # the model's embedding: as wide as its vocabulary

    def run(tokenizer: Tokenizer | None, ids: list[int], kind: str = "token") -> ValueError | None:
        proc = SimpleNamespace(
            model_config=MODEL_CONFIG,
            tokenizer=tokenizer,
            skip_prompt_length_check=False,
            supports_mm_inputs=kind == "multimodal",
            mm_encoder_cache_size=0,
        )
        proc._validate_prompt_len = types.MethodType(prompt_len, proc)
        prompt: dict[str, Any] = {"type": kind, "prompt_token_ids": ids}
        if kind == "multimodal":
            prompt["mm_placeholders"] = {}
        try:
            validate(proc, prompt, "decoder")
        except ValueError as exc:
            return exc
        return None

    for tokenizer, limit in ((None, VOCAB - 1), (Tokenizer(), VOCAB - 1), (Tokenizer(2048), 2047)):
        tok = f"tokenizer of {len(tokenizer)}" if tokenizer else "no tokenizer (--skip-tokenizer-init)"
        for ids in ([1, limit + 1, 3], [4, -1, 3]):
            exc = run(tokenizer, ids)
            if exc is None:
                try:
                    embedding(torch.tensor(ids))
                except IndexError as err:
                    raise AssertionError(
                        f"prompt token ids {ids} ({tok}) passed request validation; the model's embedding "
                        f"of {VOCAB} rows then fails in the worker: {err}"
                    ) from err
            assert exc is not None and str(ids[1]) in str(exc), (
                f"prompt token ids {ids} ({tok}) passed request validation, past a vocabulary of {limit + 1}"
            )
        # The first and last ids of the vocabulary (and of the tokenizer's, when that is larger).
        for ids in ([0, 800, limit], [0, 1]):
            exc = run(tokenizer, ids)
            assert exc is None, f"prompt token ids {ids} ({tok}) refused: {exc}"
        if tokenizer is None:
            embedding(torch.tensor([0, 800, limit]))

    # Without a tokenizer a multimodal prompt's placeholder ids may lie past the model's vocabulary
    # (out-of-vocabulary multimodal tokens, masked before the embedding): not refused.
    exc = run(None, [1, VOCAB + 10, 3], "multimodal")
    assert exc is None, f"multimodal prompt with placeholder id {VOCAB + 10} refused: {exc}"
    exc = run(Tokenizer(), [1, -1, 3], "multimodal")
    assert exc is not None and "-1" in str(exc), f"multimodal prompt with id -1 (tokenizer of 507): {exc!r}"


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    sys.dont_write_bytecode = True
    sp, error = _sampling_params_class(root)
    proc_cls = _min_tokens_processor(root)
    interface = sys.modules["vllm.v1.sample.logits_processor.interface"]
    _check_stop_token_ids(sp, error, proc_cls, interface)
    _check_allowed_token_ids(sp, error)
    _check_prompt_ids(root)
