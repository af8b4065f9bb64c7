"""allowed-ids-masked: a request whose allowed_token_ids the other masks leave empty gets a 400.

The sampler sets every logit outside allowed_token_ids to -inf (Sampler.apply_logits_processors,
with the mask InputBatch.add_request writes), then the one-token bad words at every step
(vllm/v1/sample/ops/bad_words.py), then MinTokensLogitsProcessor every stop token (stop_token_ids,
the EOS and the generation config's other EOS ids, the EOS even under ignore_eos) while min_tokens
is not reached. Where those leave no allowed id, the row has no finite logit: greedy sampling
(argmax) returns token 0, random sampling a NaN row whose argmax is token 0 too, and the request
answers 200 with tokens outside allowed_token_ids (our fuzzer: twelve "<|endoftext|>", id 0).

The proof runs the tree's real code on a CPU, for a model shaped like the fuzzer's tiny Qwen3 (a
vocabulary of 1024, a tokenizer of 1000 tokens, <|endoftext|> 0, EOS <|im_end|> 2):

- the frontend: SamplingParams as a plain dataclass made of the real class body of
  vllm/sampling_params.py (construction, verify, clone, update_from_generation_config,
  update_from_tokenizer with a tokenizer stand-in, the all_stop_token_ids and bad_words_token_ids
  properties, validate_allowed_token_ids_remain where the tree has it), the real
  InputProcessor._validate_params and the statement of InputProcessor.process_inputs that prepares
  the sampling parameters (compiled from the file at its own lines, so the check's place after
  update_from_tokenizer is what runs), and the server's answer: the real exception_handler
  (serve/utils/server_utils.py), create_error_response, sanitize_message, ErrorInfo / ErrorResponse
  (on the real OpenAIBaseModel) and VLLMValidationError;
- the engine, for a request the frontend accepts: the real InputBatch (gpu_input_batch.py:
  add_request writes the allowed-token mask, refresh_metadata, the SamplingMetadata) with the
  builtin logits processors of the real build_logitsprocs (MinTokensLogitsProcessor among them),
  the real Sampler.forward, apply_logits_processors, apply_bad_words, sample, greedy_sample and
  TopKTopPSampler.forward_cpu (the CPU build's random sampling, compiled_random_sample run
  eagerly), and the real check_stop after every token, over random model logits.

Refused cases (each is also run through the engine as the frontend of vLLM 0.26.0 hands it over,
to show that the engine then samples outside allowed_token_ids): the fuzzer's request; the EOS
under ignore_eos and a generation config EOS id counted as stop ids; allowed ids all one-token bad
words, without and with min_tokens or a grammar; allowed ids all stop ids or one-token bad words
with min_tokens. Accepted cases, whose answers stay inside allowed_token_ids: one allowed id that
is no stop id, min_tokens 0, stop ids without min_tokens, structured output with min_tokens (the
grammar decides, as min-tokens-grammar lets it), multi-token bad words, no allowed_token_ids.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import dataclasses
import enum
import itertools
import math
import sys
import types
from enum import Enum, IntEnum
from functools import cached_property
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
import regex
import torch
from pydantic import BaseModel, ConfigDict, model_validator

from fixpack.proofkit import Trees, compile_nodes, load_function, load_module, load_node, parse_file, stub_modules

VOCAB = 1024  # the tiny Qwen3's vocabulary: the width of the logits and of the allowed-token mask
TOKENIZER_LEN = 1000
ENDOFTEXT = 0  # "<|endoftext|>": what an all -inf row samples
EOS = 2  # "<|im_end|>"
PROMPT = [77, 5, 9]  # "the"
GENERATION_CONFIG = {"eos_token_id": EOS}  # the tiny model's generation_config.json
MAX_MODEL_LEN = 512
RED, SPACE_RED, BLUE = 103, 411, 593  # "red" and " red" (one token each), "blue"
GREEN, TREE, SPACE_GREEN = 120, 121, 122  # "green tree": two tokens, " green tree" too

SAMPLING_PARAMS = "vllm/sampling_params.py"
INPUT_PROCESSOR = "vllm/v1/engine/input_processor.py"
LP = "vllm.v1.sample.logits_processor"


class Tokenizer:
    """The tiny model's tokenizer as update_from_tokenizer and verify use it."""

    ENCODE: ClassVar[dict[str, list[int]]] = {
        "red": [RED],
        " red": [SPACE_RED],
        "blue": [BLUE],
        " blue": [220, BLUE],
        "green tree": [GREEN, TREE],
        " green tree": [SPACE_GREEN, TREE],
    }
    max_token_id = TOKENIZER_LEN - 1

    def __len__(self) -> int:
        return TOKENIZER_LEN

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert not add_special_tokens
        return list(self.ENCODE[text])


MODEL_CONFIG = SimpleNamespace(
    get_vocab_size=lambda: VOCAB,
    max_logprobs=20,
    logits_processors=None,
    is_diffusion=False,
    max_model_len=MAX_MODEL_LEN,
    runner_type="generate",
)
QUIET = SimpleNamespace(
    warning=lambda *a, **k: None,
    warning_once=lambda *a, **k: None,
    debug=lambda *a, **k: None,
    error=lambda *a, **k: None,
)


def _exec_file(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    return module


def _dataclass(cls: type, module: str) -> Any:
    """``cls`` made a dataclass, as its file's ``@dataclass`` does (which looks its module up)."""
    cls.__module__ = module
    sys.modules.setdefault(module, types.ModuleType(module))
    return dataclasses.dataclass(cls)


def _module_assigns(path: Path, names: set[str], ns: dict[str, Any]) -> None:
    """Run the file's module-level assignments of ``names`` (at their own lines) in ``ns``."""
    nodes = [
        node
        for node in parse_file(path).body
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets))
        or (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names)
    ]
    exec(compile_nodes(path, nodes), ns)


def _modules(root: Path) -> None:
    """Empty packages for what the real modules import, and the real light modules they need."""
    for stub in stub_modules("vllm", "vllm.utils.torch_utils", LP, "vllm.v1.sample.thinking_budget_state").values():
        stub.__path__ = []
        stub.__spec__ = None
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(  # type: ignore[attr-defined]
        root / "vllm/utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False}
    )
    # No custom logits processors are configured (SamplingParams._validate_logits_processors).
    sys.modules[LP].validate_logits_processors_parameters = lambda procs, params: None  # type: ignore[attr-defined]
    load_module("vllm.exceptions", root / "vllm/exceptions.py")


class Frontend:
    """What the OpenAI server does with a request's sampling parameters: the real SamplingParams,
    InputProcessor._validate_params and process_inputs' statement that prepares them, and the
    answer the app's exception handler gives to what they raise."""

    def __init__(self, root: Path) -> None:
        self.error = sys.modules["vllm.exceptions"].VLLMValidationError
        path = root / SAMPLING_PARAMS
        module = types.ModuleType("proof_sampling_params")  # dataclasses reads the class's module
        sys.modules[module.__name__] = module
        ns = module.__dict__
        ns.update(
            {
                "copy": copy,
                "field": dataclasses.field,
                "math": math,
                "cached_property": cached_property,
                "msgspec": SimpleNamespace(field=dataclasses.field),
                "envs": SimpleNamespace(VLLM_MAX_N_SEQUENCES=16384),
                "logger": QUIET,
                "VLLMValidationError": self.error,
                "SamplingType": load_function(path, "SamplingType", {"IntEnum": IntEnum}),
                "RequestOutputKind": load_function(path, "RequestOutputKind", {"Enum": Enum}),
                "validate_thinking_token_budget": load_function(
                    path, "validate_thinking_token_budget", {"VLLMValidationError": self.error}
                ),
            }
        )
        self.sampling_type = ns["SamplingType"]
        _module_assigns(path, {"_SAMPLING_EPS", "_MAX_TEMP", "MAX_LOGPROB_TOKEN_IDS"}, ns)
        cls = load_node(path, "SamplingParams")
        cls.bases, cls.keywords, cls.decorator_list = [], [], []  # msgspec.Struct -> a kw-only dataclass
        so = load_node(path, "StructuredOutputsParams")
        so.decorator_list = []  # pydantic's dataclass -> the standard one
        exec(compile_nodes(path, [so, cls]), ns)
        self.structured = dataclasses.dataclass(ns["StructuredOutputsParams"])
        self.sp = dataclasses.dataclass(kw_only=True)(ns["SamplingParams"])

        ipath = root / INPUT_PROCESSOR
        self.validate_params = load_function(
            ipath,
            "InputProcessor._validate_params",
            {
                "SamplingParams": self.sp,
                "PoolingParams": type("PoolingParams", (), {}),
                "GENERATION_TASKS": ("generate",),
            },
        )
        method = load_node(ipath, "InputProcessor.process_inputs")
        found = [
            node
            for node in method.body
            if isinstance(node, ast.If) and ast.unparse(node.test) == "isinstance(params, SamplingParams)"
        ]
        if len(found) != 1:
            raise RuntimeError(f"{ipath}: {len(found)} SamplingParams statements in process_inputs")
        self.prepare = compile_nodes(ipath, found)
        self.length = load_function(root / "vllm/utils/__init__.py", "length_from_prompt_token_ids_or_embeds")
        self.handler = _exception_handler(root)

    def params(self, structured: bool = False, **kwargs: Any) -> Any:
        if structured:
            kwargs["structured_outputs"] = self.structured(regex="(red|blue| red)*")
        return self.sp(**kwargs)

    def processor(self, generation_config: dict[str, Any]) -> SimpleNamespace:
        """The InputProcessor of a server of the tiny model: its tokenizer, EOS and generation config."""
        return SimpleNamespace(
            model_config=MODEL_CONFIG,
            speculative_config=None,
            structured_outputs_config=None,
            tokenizer=Tokenizer(),
            vllm_config=SimpleNamespace(reasoning_config=None),
            use_v2_model_runner=False,
            generation_config_fields=generation_config,
            renderer=SimpleNamespace(get_eos_token_id=lambda: EOS),
        )

    def submit(self, params: Any, generation_config: dict[str, Any]) -> tuple[int, dict[str, Any] | None, Any]:
        """The request through InputProcessor: (200, None, the engine's SamplingParams), or the
        server's answer to what it raised: (status, error body, None)."""
        proc = self.processor(generation_config)
        ns: dict[str, Any] = {
            "__builtins__": __builtins__,
            "self": proc,
            "params": params,
            "SamplingParams": self.sp,
            "prompt_token_ids": list(PROMPT),
            "prompt_embeds": None,
            "length_from_prompt_token_ids_or_embeds": self.length,
        }
        try:
            self.validate_params(proc, params, ("generate",))
            exec(self.prepare, ns)
        except ValueError as exc:
            status, body = asyncio.run(self.handler(exc))
            return status, body, exc
        return 200, None, ns["sampling_params"]

    def unchecked(self, params: Any, generation_config: dict[str, Any]) -> Any:
        """The SamplingParams vLLM 0.26.0's process_inputs hands the engine for this request (its
        real statements without the new check): to show what the engine does with a refused one."""
        proc = self.processor(generation_config)
        self.validate_params(proc, params, ("generate",))
        sp = params.clone()
        sp.update_from_generation_config(generation_config, EOS)
        sp.update_from_tokenizer(proc.tokenizer)
        return sp


def _exception_handler(root: Path) -> Any:
    """The app's exception_handler for VLLMValidationError and ValueError, with the real
    create_error_response and ErrorResponse: (HTTP status, JSON body) of the answer."""
    protocol = root / "vllm/entrypoints/openai/engine/protocol.py"
    ns: dict[str, Any] = {
        "BaseModel": BaseModel,
        "ConfigDict": ConfigDict,
        "ClassVar": ClassVar,
        "model_validator": model_validator,
        "logger": QUIET,
        "HTTPStatus": HTTPStatus,
        "re": regex,
    }
    for name in ("OpenAIBaseModel", "ErrorInfo", "ErrorResponse", "GenerationError"):
        ns[name] = load_function(protocol, name, ns)
    for name in ("ErrorInfo", "ErrorResponse"):
        ns[name].model_rebuild(force=True, _types_namespace=ns)
    ns["sanitize_message"] = load_function(root / "vllm/entrypoints/serve/utils/api_utils.py", "sanitize_message", ns)
    ns["create_error_response"] = load_function(
        root / "vllm/entrypoints/serve/utils/error_response.py", "create_error_response", ns
    )
    ns["JSONResponse"] = lambda content, status_code: (status_code, content)
    handler = load_function(root / "vllm/entrypoints/serve/utils/server_utils.py", "exception_handler", ns)
    req = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(args=SimpleNamespace(log_error_stack=False))))
    return lambda exc: handler(req, exc)


class Request:
    """The parts of vllm.v1.request.Request that check_stop reads."""

    def __init__(self, params: Any, output: list[int]) -> None:
        self.sampling_params = params
        self.pooling_params = None
        self.max_tokens = params.max_tokens
        self.output_token_ids = output
        self.status: Any = None
        self.stop_reason: int | str | None = None

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(PROMPT) + len(self.output_token_ids)


class Engine:
    """One request through vLLM's V1 worker on a CPU: the real InputBatch, logits processors,
    Sampler and check_stop; the model's logits are random, the grammar's bitmask (structured
    output) a stand-in that sets the logits of the tokens the grammar does not allow to -inf."""

    def __init__(self, root: Path, sampling_type: type) -> None:
        vllm = root / "vllm"
        interface = _exec_file(f"{LP}.interface", vllm / "v1/sample/logits_processor/interface.py")
        state = _exec_file(f"{LP}.state", vllm / "v1/sample/logits_processor/state.py")
        sys.modules[LP].LogitsProcessors = state.LogitsProcessors  # type: ignore[attr-defined]
        builtin = _exec_file(f"{LP}.builtin", vllm / "v1/sample/logits_processor/builtin.py")
        metadata = _exec_file("vllm.v1.sample.metadata", vllm / "v1/sample/metadata.py")
        lp_init = vllm / "v1/sample/logits_processor/__init__.py"
        lp_ns: dict[str, Any] = {**vars(builtin), "itertools": itertools, "LogitsProcessors": state.LogitsProcessors}
        _module_assigns(lp_init, {"BUILTIN_LOGITS_PROCESSORS"}, lp_ns)
        lp_ns["_load_custom_logitsprocs"] = lambda custom: []  # no --logits-processors
        self.build_logitsprocs = load_function(lp_init, "build_logitsprocs", lp_ns)

        batch_py = vllm / "v1/worker/gpu_input_batch.py"
        given: dict[str, Any] = {
            "np": np,
            "torch": torch,
            "cast": cast,
            "SamplingType": sampling_type,
            "PIN_MEMORY": False,
            "BatchUpdateBuilder": state.BatchUpdateBuilder,
            "LogitsProcessors": state.LogitsProcessors,
            "MoveDirectionality": interface.MoveDirectionality,
            "SamplingMetadata": metadata.SamplingMetadata,
            "MultiGroupBlockTable": lambda **kw: SimpleNamespace(add_row=lambda block_ids, row: None),
            "length_from_prompt_token_ids_or_embeds": load_function(
                vllm / "utils/__init__.py", "length_from_prompt_token_ids_or_embeds"
            ),
            "swap_dict_values": load_function(
                vllm / "utils/collection_utils.py", "swap_dict_values", {"_K": TypeVar("_K"), "_V": TypeVar("_V")}
            ),
            "copy_slice": load_function(vllm / "v1/utils.py", "copy_slice"),
            "maybe_create_thinking_budget_state_holder": load_function(
                vllm / "v1/sample/thinking_budget_state.py", "maybe_create_thinking_budget_state_holder"
            ),
        }
        self.input_batch = load_function(batch_py, "InputBatch", given)
        self.request_state = _dataclass(
            load_function(batch_py, "CachedRequestState", given), "vllm.v1.worker.gpu_input_batch"
        )
        self.sampler = self._sampler(vllm)

        sched = vllm / "v1/core/sched/utils.py"
        self.status = load_function(vllm / "v1/request.py", "RequestStatus", {"enum": enum})
        self.check_stop = load_function(
            sched,
            "check_stop",
            {
                "RequestStatus": self.status,
                "check_sequence_repetition": load_function(sched, "check_sequence_repetition"),
            },
        )

    @staticmethod
    def _sampler(vllm: Path) -> Any:
        """vLLM's Sampler, its methods the real ones, its TopKTopPSampler the CPU build's forward_cpu."""
        tts = vllm / "v1/sample/ops/topk_topp_sampler.py"
        tns: dict[str, Any] = {"torch": torch, "current_platform": SimpleNamespace(is_cpu=lambda: True)}
        tns["HAS_TRITON"] = False
        for name in (
            "apply_top_k_top_p",
            "apply_top_k_top_p_pytorch",
            "apply_top_k_only",
            "empty_exponential_noise_like",
            "sample_with_exponential_noise",
            "compiled_random_sample",  # its @torch.compile dropped: the same ops, run eagerly
        ):
            tns[name] = load_function(tts, name, tns)
        forward_cpu = load_function(tts, "TopKTopPSampler.forward_cpu", tns)
        topk_topp = SimpleNamespace(logprobs_mode="raw_logprobs", use_fp64_gumbel=False)

        sampler_py = vllm / "v1/sample/sampler.py"
        outputs = vllm / "v1/outputs.py"
        sns: dict[str, Any] = {
            "torch": torch,
            "apply_bad_words": _exec_file(
                "vllm.v1.sample.ops.bad_words", vllm / "v1/sample/ops/bad_words.py"
            ).apply_bad_words,
            "SamplerOutput": _dataclass(load_function(outputs, "SamplerOutput", {"torch": torch}), "vllm.v1.outputs"),
        }
        _module_assigns(sampler_py, {"_SAMPLING_EPS"}, sns)
        methods: dict[str, Any] = {
            name: load_function(sampler_py, f"Sampler.{name}", sns)
            for name in ("forward", "apply_logits_processors", "sample")
        }
        for name in (
            "apply_penalties",
            "greedy_sample",
            "apply_temperature",
            "compute_logprobs",
            "_combine_outputs_with_spec_tokens",
        ):
            methods[name] = staticmethod(load_function(sampler_py, f"Sampler.{name}", sns))
        sampler = type("Sampler", (), methods)()
        sampler.logprobs_mode = "raw_logprobs"
        sampler.pin_memory = False
        sampler.topk_topp_sampler = lambda logits, generators, k, p: forward_cpu(topk_topp, logits, generators, k, p)
        return sampler

    def generate(self, params: Any, grammar: set[int] | None = None, seed: int = 0) -> tuple[list[int], str]:
        """The tokens the engine samples for the request until check_stop ends it, and its status."""
        config = SimpleNamespace(speculative_config=None, scheduler_config=SimpleNamespace(max_num_seqs=4))
        batch = self.input_batch(
            max_num_reqs=4,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=64,
            device=torch.device("cpu"),
            vocab_size=VOCAB,
            block_sizes=[16],
            kernel_block_sizes=[16],
            max_num_blocks_per_req=[32],
            logitsprocs=self.build_logitsprocs(config, torch.device("cpu"), False, False),
        )
        output: list[int] = []
        state = self.request_state(
            req_id="cmpl-0",
            prompt_token_ids=list(PROMPT),
            mm_features=[],
            sampling_params=params,
            generator=None,
            block_ids=([1],),
            num_computed_tokens=0,
            output_token_ids=output,
        )
        batch.add_request(state)
        request = Request(params, output)
        torch.manual_seed(seed)
        model = torch.Generator().manual_seed(seed)
        while True:
            batch.refresh_metadata()
            logits = torch.randn((1, VOCAB), generator=model) * 4.0
            if grammar is not None:  # the runner applies the grammar bitmask before the sampler
                outside = torch.ones(VOCAB, dtype=torch.bool)
                outside[sorted(grammar)] = False
                logits[0].masked_fill_(outside, float("-inf"))
            out = self.sampler.forward(logits, batch.sampling_metadata)
            output.append(int(out.sampled_token_ids[0, 0]))
            if self.check_stop(request, MAX_MODEL_LEN):
                return list(output), request.status.name


def _show(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def _refused(
    front: Frontend,
    engine: Engine,
    what: str,
    request: dict[str, Any],
    branch: str,
    generation_config: dict[str, Any] | None = None,
    grammar: set[int] | None = None,
) -> None:
    """The request must be refused with a 400 naming allowed_token_ids; the engine, given it as vLLM
    0.26.0 does, samples tokens outside allowed_token_ids (so the 400 refuses nothing it serves)."""
    gen = generation_config or GENERATION_CONFIG
    allowed = request["allowed_token_ids"]
    params = front.unchecked(front.params(**request), gen)
    tokens, status = engine.generate(params, grammar)
    outside = [t for t in tokens if t not in allowed]
    assert outside, f"{what}: the engine sampled {tokens} ({status}), all inside allowed_token_ids {allowed}"

    code, body, result = front.submit(front.params(**request), gen)
    if code == 200:
        masks = ["The allowed-token mask"]
        if result.bad_words_token_ids:
            masks.append(f"the bad words {result.bad_words_token_ids}")
        if result.min_tokens:
            masks.append(
                f"MinTokensLogitsProcessor's stop ids {sorted(result.all_stop_token_ids)} below min_tokens="
                f"{result.min_tokens}"
            )
        raise AssertionError(
            f"{what}: POST /v1/completions {{{_show(request)}}} is accepted (HTTP 200); the engine then "
            f"samples {tokens} ({status}): {len(outside)} tokens outside allowed_token_ids {allowed}, "
            f'{outside.count(ENDOFTEXT)} of them token {ENDOFTEXT} ("<|endoftext|>"). {" and ".join(masks)} '
            "leave the row no finite logit, and the sampler returns token 0"
        )
    assert code == HTTPStatus.BAD_REQUEST, f"{what}: HTTP {code} {body}"
    assert isinstance(result, front.error), f"{what}: {result!r} is not a VLLMValidationError"
    assert result.parameter == "allowed_token_ids" and result.value == allowed, f"{what}: {result!r}"
    error = cast(dict[str, Any], body)["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400, f"{what}: {error}"
    assert error["param"] == "allowed_token_ids", f"{what}: the 400 names {error['param']!r}: {error}"
    assert branch in error["message"], f"{what}: the message does not say {branch!r}: {error['message']}"


def _accepted(
    front: Frontend,
    engine: Engine,
    what: str,
    request: dict[str, Any],
    generation_config: dict[str, Any] | None = None,
    grammar: set[int] | None = None,
    first: list[int] | None = None,
) -> list[int]:
    """The request must be accepted, and the engine's answer stay inside allowed_token_ids."""
    code, body, params = front.submit(front.params(**request), generation_config or GENERATION_CONFIG)
    assert code == 200, f"{what}: {{{_show(request)}}} refused with HTTP {code}: {body}"
    tokens, status = engine.generate(params, grammar)
    allowed = request.get("allowed_token_ids") or range(VOCAB)
    assert all(t in allowed for t in tokens), f"{what}: sampled {tokens} ({status}), outside {allowed}"
    assert len(tokens) >= request.get("min_tokens", 0), f"{what}: {tokens} ({status}) is shorter than min_tokens"
    if first is not None:
        assert tokens[: len(first)] == first, f"{what}: sampled {tokens}, expected {first} first"
    return tokens


def _check_refused(front: Frontend, engine: Engine) -> None:
    stop_branch, bad_branch = "below min_tokens", "is a bad word (bad_words)"
    # The fuzzer's request (its logprobs, return_token_ids and the rest do not touch sampling).
    fuzzer = {
        "max_tokens": 21,
        "min_tokens": 12,
        "stop_token_ids": [RED, BLUE],
        "allowed_token_ids": [RED, BLUE],
        "ignore_eos": True,
        "temperature": 1.7,
    }
    _refused(front, engine, "the fuzzer's request (random sampling)", fuzzer, stop_branch)
    _refused(front, engine, "the same, greedy", {**fuzzer, "temperature": 0.0}, stop_branch)
    # The EOS is a stop id MinTokensLogitsProcessor masks, under ignore_eos too.
    for ignore_eos in (True, False):
        request = {
            "max_tokens": 8,
            "min_tokens": 4,
            "stop_token_ids": [RED],
            "allowed_token_ids": [RED, EOS],
            "ignore_eos": ignore_eos,
            "temperature": 0.0,
        }
        _refused(front, engine, f"allowed ids a stop id and the EOS (ignore_eos={ignore_eos})", request, stop_branch)
    # So is a further EOS id of the generation config, known once update_from_generation_config ran.
    request = {"max_tokens": 8, "min_tokens": 2, "stop_token_ids": [RED], "allowed_token_ids": [RED, 7]}
    _refused(
        front, engine, "a generation config EOS id", request, stop_branch, generation_config={"eos_token_id": [EOS, 7]}
    )
    # One-token bad words, masked at every step: known once update_from_tokenizer ran.
    request = {"max_tokens": 6, "bad_words": ["red"], "allowed_token_ids": [RED, SPACE_RED], "temperature": 0.0}
    _refused(front, engine, "allowed ids all one-token bad words", request, bad_branch)
    _refused(front, engine, "the same, random", {**request, "temperature": 1.0}, bad_branch)
    _refused(front, engine, "the same with min_tokens", {**request, "min_tokens": 3}, bad_branch)
    _refused(
        front,
        engine,
        "the same with a grammar",
        {**request, "structured": True, "min_tokens": 2},
        bad_branch,
        grammar={RED, SPACE_RED, BLUE, EOS},
    )
    _refused(front, engine, "a subset of the bad words", {**request, "allowed_token_ids": [SPACE_RED]}, bad_branch)
    # Stop ids and one-token bad words together, below min_tokens.
    request = {
        "max_tokens": 8,
        "min_tokens": 3,
        "stop_token_ids": [BLUE],
        "bad_words": ["red"],
        "allowed_token_ids": [RED, BLUE],
    }
    _refused(front, engine, "allowed ids stop ids or one-token bad words", request, stop_branch)
    request = {**request, "allowed_token_ids": [RED, SPACE_RED, BLUE, EOS]}
    _refused(front, engine, "allowed ids exactly the stop ids and one-token bad words", request, stop_branch)


def _check_accepted(front: Frontend, engine: Engine) -> None:
    # No allowed_token_ids at all.
    _accepted(front, engine, "no allowed_token_ids", {"max_tokens": 6, "min_tokens": 2, "stop_token_ids": [RED]})
    # One allowed id that is no stop id nor bad word: it fills the tokens below min_tokens.
    request = {
        "max_tokens": 21,
        "min_tokens": 12,
        "stop_token_ids": [RED, BLUE],
        "allowed_token_ids": [RED, BLUE, 250],
        "ignore_eos": True,
        "temperature": 1.7,
    }
    _accepted(front, engine, "one allowed id not a stop id", request, first=[250] * 12)
    _accepted(
        front,
        engine,
        "the EOS and a plain id under ignore_eos",
        {"max_tokens": 8, "min_tokens": 3, "ignore_eos": True, "allowed_token_ids": [EOS, 250]},
        first=[250] * 3,
    )
    # Without min_tokens (or min_tokens 0) stop ids are not masked: the first token ends the answer.
    request = {"max_tokens": 8, "stop_token_ids": [RED, BLUE], "allowed_token_ids": [RED, BLUE], "min_tokens": 0}
    assert len(_accepted(front, engine, "stop ids, min_tokens 0", request)) == 1
    assert _accepted(front, engine, "the EOS alone", {"max_tokens": 8, "allowed_token_ids": [EOS]}) == [EOS]
    request = {"max_tokens": 8, "stop_token_ids": [BLUE], "bad_words": ["red"], "allowed_token_ids": [RED, BLUE]}
    assert _accepted(front, engine, "stop ids and bad words without min_tokens", request) == [BLUE]
    # Structured output: below min_tokens the grammar decides whether the answer may end
    # (min-tokens-grammar keeps the stop ids where the grammar leaves nothing else); a grammar that
    # the parameters leave no token gets grammar-no-token's 400 from the engine.
    for request in (
        {"max_tokens": 8, "min_tokens": 4, "stop_token_ids": [RED], "allowed_token_ids": [RED, EOS]},
        {
            "max_tokens": 8,
            "min_tokens": 3,
            "stop_token_ids": [BLUE],
            "bad_words": ["red"],
            "allowed_token_ids": [RED, BLUE],
        },
    ):
        what = f"structured output, allowed ids {request['allowed_token_ids']} below min_tokens"
        _accepted(front, engine, what, {**request, "structured": True}, grammar={RED, SPACE_RED, BLUE, EOS})
    # Multi-token bad words mask their last token only after the rest: not refused.
    for allowed in ([GREEN, TREE], [GREEN, SPACE_GREEN], [GREEN, TREE, SPACE_GREEN]):
        request = {"max_tokens": 8, "min_tokens": 3, "bad_words": ["green tree"], "allowed_token_ids": allowed}
        _accepted(front, engine, f"multi-token bad words, allowed ids {allowed}", request)


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    sys.dont_write_bytecode = True
    _modules(root)
    front = Frontend(root)
    sys.modules["vllm"].SamplingParams = front.sp  # type: ignore[attr-defined]
    engine = Engine(root, front.sampling_type)
    _check_refused(front, engine)
    _check_accepted(front, engine)
