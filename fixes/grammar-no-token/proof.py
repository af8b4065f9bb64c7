"""grammar-no-token: a request whose sampling parameters leave its grammar no token gets a 400.

The model runner applies the grammar bitmask to the logits (-inf outside the grammar's tokens),
then the sampler masks what allowed_token_ids leaves out and the bad_words completions
(Sampler.apply_logits_processors, vllm/v1/sample/ops/bad_words.py). When the two leave no token in
common, every logit of the row is -inf, greedy sampling picks token 0 (random sampling fares no
better), the grammar rejects it in Scheduler.update_from_output ("Unexpected: grammar rejected
tokens [0] ... Terminating request.") and the request ends FINISHED_ERROR: finish_reason "error",
which the OpenAI server always answers with HTTP 500 InternalServerError, for a request that
contradicts itself.

The proof runs the tree's real code over the steps of such requests:
- the grammar: the tree's XgrammarGrammar (accept_tokens, fill_bitmask, is_terminated) and
  XgrammarBackend.allocate_token_bitmask over a stand-in of xgrammar (not installed where proofs
  run): a GrammarMatcher for the regex (yes|no) over a tiny RAW vocabulary, whose
  fill_next_token_bitmask writes int32 words as xgrammar does (bit t % 32 of word t // 32, the
  sign bit for t % 32 == 31, 0 past the vocabulary, xgrammar's checks of dtype, shape and row
  index, an error once terminated) and whose accept_token leaves its state as it was on a
  rejection; allocate_token_bitmask fills with -1. With xgrammar 0.2.9 put in their place (XGR and
  new_matcher), its bitmask words are the stand-in's for every grammar state used here, and the
  proof passes on the patched tree and fails on the pristine one the same way;
- the guidance backend: the tree's GuidanceBackend, the class conflicting_params tests for (built
  by its own __post_init__; its allocate_token_bitmask) and GuidanceGrammar (accept_tokens,
  check_error, fill_bitmask) over a stand-in of llguidance (not installed where proofs run) whose
  LLMatcher, like llguidance's, enters an error state for good on a rejected token and then allows
  EOS alone. With llguidance 1.7.6 (the version vLLM 0.26.0 pins) put in their place (LLG_TORCH,
  LLG_HF and new_ll_matcher), its consume results, is_stopped, is_error and bitmask words are the
  stand-in's for every grammar state and next token of the guidance cases, and the proof passes;
- the sampler: the real Sampler.apply_logits_processors with the real apply_bad_words, and the real
  Sampler.greedy_sample, on logits masked by the grammar bitmask (a stand-in of
  xgr.apply_token_bitmask_inplace) with allowed_token_ids as the InputBatch masks them;
- the scheduler: the real Scheduler._update_request_with_output, check_stop and the grammar-advance
  statement of Scheduler.update_from_output (compiled from the file at its own lines), the real
  StructuredOutputManager.should_advance, trim_reasoning_for_advance and conflicting_params, the
  real RequestStatus with vLLM's map to FinishReason and its strings, the real ConstantList that
  Request.output_token_ids is;
- the server: the real _raise_if_error, _convert_generation_error_to_streaming_response and
  create_streaming_error_response of the serving classes, BaseServing.create_error_response, the
  real GenerationError, ErrorInfo / ErrorResponse (on the real OpenAIBaseModel),
  create_error_response (serve/utils/error_response.py) and the app's generation_error_handler:
  the HTTP status, error type and code a client sees, streamed or not.

Cases: allowed_token_ids disjoint from the grammar's tokens; bad_words covering them (a multi-token
bad word only after its prefix); both together (both named); what the parameters leave is still
generated; a rejection where a token remained, a terminated grammar and a step of several tokens
(speculative decoding) stay a 500; with the guidance backend, a conflict and an engine fault both
stay a 500 (FINISHED_ERROR), where conflicting_params without its guard, reading llguidance's
EOS-only bitmask, would name allowed_token_ids for the engine fault and miss a bad_words conflict;
and conflicting_params against the sampler's own row over random allowed_token_ids, bad words and
grammar states.
"""

from __future__ import annotations

import ast
import asyncio
import enum
import itertools
import json
import random
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar, Generic, TypeVar, overload

import regex
import torch
from pydantic import BaseModel, ConfigDict, model_validator

from fixes._support.scheduler import advance_block
from fixpack.proofkit import Trees, compile_nodes, load_function, load_module, load_node, parse_file, stub_modules

# A RAW vocabulary (the tokenizer's 66 tokens) in a model vocabulary of 70 (a 3-word bitmask row):
# the grammar's tokens sit at the sign bit of words 0 and 1 (31, 63) and around it.
V = 70
EOS = 64
BANG, YES, Y, ES, N, OH, NO = 0, 31, 32, 33, 34, 35, 63  # "!", "yes", "y", "es", "n", "o", "no"
VOCAB = [f"#{t}" for t in range(66)]
for _t, _s in {BANG: "!", YES: "yes", Y: "y", ES: "es", N: "n", OH: "o", NO: "no", EOS: "</s>"}.items():
    VOCAB[_t] = _s
CHOICES = ("yes", "no")
START = {YES, Y, N, NO}  # the tokens the grammar allows first
# The model's preference (greedy): "y", then "es", then EOS, over small logits for every token.
LOGITS = [0.01 * t for t in range(V)]
for _t, _v in {Y: 3.0, N: 2.5, YES: 2.0, NO: 1.5, ES: 2.0, OH: 2.0, EOS: 1.0}.items():
    LOGITS[_t] = _v
MESSAGE = "The request's allowed_token_ids or bad_words leave no token that its structured output accepts"


class Matcher:
    """xgrammar.GrammarMatcher stand-in for the regex (yes|no) over VOCAB, EOS its stop token."""

    def __init__(self) -> None:
        self.text = ""
        self.terminated = False

    def _allowed(self) -> set[int]:
        out = {t for t, s in enumerate(VOCAB) if t != EOS and any(c.startswith(self.text + s) for c in CHOICES)}
        return out | {EOS} if self.text in CHOICES else out

    def accept_token(self, token: int) -> bool:
        if self.terminated or token not in self._allowed():
            return False  # xgrammar leaves the matcher's state as it was
        if token == EOS:
            self.terminated = True
        else:
            self.text += VOCAB[token]
        return True

    def is_terminated(self) -> bool:
        return self.terminated

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> bool:
        # the checks xgrammar makes (grammar_matcher.cc) on a 2-D bitmask
        if bitmask.dtype != torch.int32:
            raise RuntimeError("The provied bitmask's dtype is not valid: should be int32")
        if bitmask.dim() != 2 or bitmask.shape[1] != (V + 31) // 32:
            raise RuntimeError("The provided bitmask's shape is not valid")
        if not 0 <= index < bitmask.shape[0]:
            raise RuntimeError("The provided index is out of bounds")
        if self.terminated:
            raise RuntimeError(
                "GrammarMatcher has terminated after accepting the stop token, "
                "but is trying to find the next token mask"
            )
        words = [0] * bitmask.shape[1]
        for t in self._allowed():
            words[t // 32] |= 1 << (t % 32)
        bitmask[index] = torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)
        return True


def _allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)


# What vLLM's xgrammar backend takes from the xgrammar module.
XGR = SimpleNamespace(allocate_token_bitmask=_allocate_token_bitmask, GrammarMatcher=Matcher, CompiledGrammar=object)


def new_matcher() -> Any:
    return Matcher()


class LLMatcher:
    """llguidance.LLMatcher stand-in for the same regex, grammar and vocabulary. Like llguidance
    (1.7.6, the version vLLM 0.26.0 pins, checked by hand for every state used here): a token the
    grammar does not take, or any token once it has stopped, puts the matcher in an error state
    for good (consume_tokens False, is_error, is_stopped, get_error's message); a stopped matcher
    (a finished choice, or an error) allows EOS alone."""

    def __init__(self) -> None:
        self.grammar = Matcher()
        self.error = ""

    def is_error(self) -> bool:
        return bool(self.error)

    def get_error(self) -> str:
        return self.error

    def is_stopped(self) -> bool:
        return self.is_error() or self.grammar.text in CHOICES

    def allowed(self) -> set[int]:
        return {EOS} if self.is_stopped() else self.grammar._allowed()

    def consume_tokens(self, tokens: list[int]) -> bool:
        for token in tokens:
            if self.is_stopped():
                self.error = "parser stopped in consume_token; no error message"
            elif not self.grammar.accept_token(token):
                self.error = f'Parser Error: token "{VOCAB[token]}" doesn\'t satisfy the grammar'
            if self.error:
                return False
        return True


def _ll_fill_next_token_bitmask(matcher: Any, bitmask: torch.Tensor, index: int = 0) -> None:
    """llguidance.torch.fill_next_token_bitmask: its checks, then the row's int32 words."""
    assert bitmask.dtype == torch.int32, "Mask must be int32"
    assert bitmask.is_cpu, "Mask must be on CPU"
    assert bitmask.dim() == 2, "Mask must be 2D"
    words = [0] * bitmask.shape[1]
    for t in matcher.allowed():
        words[t // 32] |= 1 << (t % 32)
    bitmask[index] = torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)


def _ll_from_tokenizer(tokenizer: Any, n_vocab: int) -> Any:
    """llguidance.hf.from_tokenizer: the LLTokenizer's vocab_size and eos_token."""
    return SimpleNamespace(vocab_size=n_vocab, eos_token=tokenizer.eos_token_id)


# What vLLM's guidance backend takes from llguidance.torch and llguidance.hf.
LLG_TORCH = SimpleNamespace(
    allocate_token_bitmask=_allocate_token_bitmask, fill_next_token_bitmask=_ll_fill_next_token_bitmask
)
LLG_HF = SimpleNamespace(from_tokenizer=_ll_from_tokenizer)


def new_ll_matcher(ll_tokenizer: Any) -> Any:
    return LLMatcher()


class Tokenizer:
    """The HF tokenizer GuidanceBackend.__post_init__ sees: not a Mistral one, VOCAB's length."""

    eos_token_id = EOS

    def __len__(self) -> int:
        return len(VOCAB)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """xgr.apply_token_bitmask_inplace on a CPU row: -inf where the token's bit is 0."""
    words = bitmask[0].tolist()
    for t in range(logits.shape[1]):
        if not (words[t // 32] >> (t % 32)) & 1:
            logits[0, t] = float("-inf")


class Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _log(self, level: str, msg: str, *args: Any) -> None:
        self.lines.append((level, msg % args))

    def error(self, msg: str, *args: Any) -> None:
        self._log("ERROR", msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self._log("WARNING", msg, *args)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._log("DEBUG", msg, *args)

    def of(self, level: str) -> list[str]:
        return [line for lvl, line in self.lines if lvl == level]


LOG = Logger()


def _module_assign(path: Path, name: str, ns: dict[str, Any]) -> Any:
    """Run the module-level assignment of ``name`` in ``path`` (at its own lines) in ``ns``."""
    found = [
        node
        for node in parse_file(path).body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    if len(found) != 1:
        raise RuntimeError(f"{path}: {len(found)} assignments of {name}")
    exec(compile_nodes(path, [found[0]]), ns)
    return ns[name]


def _statuses(root: Path) -> tuple[Any, Any]:
    """The real RequestStatus (with get_finished_reason over _FINISHED_REASON_MAP) and FinishReason."""
    engine = root / "vllm/v1/engine/__init__.py"
    ns: dict[str, Any] = {"enum": enum, "__builtins__": __builtins__}
    _module_assign(engine, "FINISH_REASON_STRINGS", ns)
    exec(compile_nodes(engine, [load_node(engine, "FinishReason")]), ns)
    request_py = root / "vllm/v1/request.py"
    rns: dict[str, Any] = {"enum": enum, "FinishReason": ns["FinishReason"], "__builtins__": __builtins__}
    exec(compile_nodes(request_py, [load_node(request_py, "RequestStatus")]), rns)
    _module_assign(request_py, "_FINISHED_REASON_MAP", rns)
    return rns["RequestStatus"], ns["FinishReason"]


class Grammars:
    """The tree's XgrammarGrammar and XgrammarBackend.allocate_token_bitmask over XGR."""

    def __init__(self, root: Path) -> None:
        so = root / "vllm/v1/structured_output"
        self.base = load_function(
            so / "backend_types.py", "StructuredOutputGrammar", {"ABC": ABC, "abstractmethod": abstractmethod}
        )
        ns = {"StructuredOutputGrammar": self.base, "field": field, "xgr": XGR, "logger": LOG}
        cls = load_function(so / "backend_xgrammar.py", "XgrammarGrammar", ns)
        self.cls = _dataclass(cls)
        self._allocate = load_function(
            so / "backend_xgrammar.py", "XgrammarBackend.allocate_token_bitmask", {"xgr": XGR}
        )
        self.vocab_size = V

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return self._allocate(self, max_num_seqs)

    def new(self, tokens: Sequence[int] = ()) -> Any:
        grammar = self.cls(vocab_size=V, matcher=new_matcher(), ctx=None)
        if not grammar.accept_tokens("setup", list(tokens)):
            raise RuntimeError(f"the grammar rejected its setup tokens {tokens}")
        return grammar


class Guidance:
    """The tree's GuidanceBackend (its own __post_init__ and allocate_token_bitmask) and
    GuidanceGrammar over the llguidance stand-ins."""

    def __init__(self, root: Path, base_grammar: type) -> None:
        so = root / "vllm/v1/structured_output"
        base = load_function(
            so / "backend_types.py", "StructuredOutputBackend", {"ABC": ABC, "abstractmethod": abstractmethod}
        )
        ns = {
            "StructuredOutputBackend": _dataclass(base),
            "StructuredOutputGrammar": base_grammar,
            "is_mistral_tokenizer": load_function(root / "vllm/utils/mistral.py", "is_mistral_tokenizer"),
            "MistralCommonBackend": type("MistralCommonBackend", (), {}),  # transformers' class
            "llguidance_hf": LLG_HF,
            "llguidance_torch": LLG_TORCH,
            "logger": LOG,
        }
        self.backend_cls = _dataclass(load_function(so / "backend_guidance.py", "GuidanceBackend", ns))
        self.grammar_cls = _dataclass(load_function(so / "backend_guidance.py", "GuidanceGrammar", ns))
        config = SimpleNamespace(disable_any_whitespace=False, disable_additional_properties=False)
        self.backend = self.backend_cls(
            vllm_config=SimpleNamespace(structured_outputs_config=config), tokenizer=Tokenizer(), vocab_size=V
        )

    def new(self, tokens: Sequence[int] = ()) -> Any:
        ll_tokenizer = self.backend.ll_tokenizer
        grammar = self.grammar_cls(ll_matcher=new_ll_matcher(ll_tokenizer), ll_tokenizer=ll_tokenizer, vocab_size=V)
        if not grammar.accept_tokens("setup", list(tokens)):
            raise RuntimeError(f"the grammar rejected its setup tokens {tokens}")
        return grammar


def _dataclass(cls: type) -> type:
    sys.modules.setdefault(cls.__module__, ModuleType(cls.__module__))  # dataclass reads its module
    return dataclass(cls)


def _manager_class(root: Path, backend: Any, guidance_cls: type) -> type:
    """StructuredOutputManager with its real should_advance, trim_reasoning_for_advance and (where
    the tree has it) conflicting_params; no reasoning parser. ``guidance_cls`` is the class the
    module imports as GuidanceBackend."""
    path = root / "vllm/v1/structured_output/__init__.py"
    ns = {
        "torch": torch,
        "TYPE_CHECKING": False,
        "itertools": itertools,
        "Sequence": Sequence,
        "GuidanceBackend": guidance_cls,
    }
    methods: dict[str, Any] = {
        "backend": backend,
        "reasoner_cls": None,
        "enable_in_reasoning": False,
        "_get_reasoner": lambda self, request: None,
    }
    names = ["should_advance", "trim_reasoning_for_advance", "conflicting_params"]
    for name in names:
        try:
            methods[name] = load_function(path, f"StructuredOutputManager.{name}", ns)
        except LookupError:
            if name != "conflicting_params":  # the one the fix adds
                raise
    return type("StructuredOutputManager", (), methods)


class Request:
    """The parts of vllm.v1.request.Request that check_stop, update_from_output and the structured
    output manager use."""

    def __init__(self, env: Env, grammar: Any, allowed: list[int] | None, bad: list[list[int]] | None) -> None:
        self.request_id = "cmpl-0"
        self.sampling_params = SimpleNamespace(
            min_tokens=0,
            eos_token_id=EOS,
            stop_token_ids=[],
            all_stop_token_ids={EOS},
            repetition_detection=None,
            allowed_token_ids=allowed,
            bad_words_token_ids=bad,
        )
        self.pooling_params = None
        self.max_tokens = 8
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = [7, 8, 9]  # "hello"
        self.output_token_ids = env.constant_list(self._output_token_ids)
        self.status = env.status.RUNNING
        self.stop_reason: int | str | None = None
        self.resumable = True
        self.num_computed_tokens = 3
        self.num_output_placeholders = 0
        self.structured_output_request = SimpleNamespace(
            grammar=grammar, reasoning_ended=None, reasoning_end_token_index=None
        )

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        ids = [token_ids] if isinstance(token_ids, int) else token_ids
        self._output_token_ids.extend(ids)
        self._all_token_ids.extend(ids)

    @property
    def use_structured_output(self) -> bool:
        return self.structured_output_request is not None

    @property
    def all_token_ids(self) -> list[int]:
        return self._all_token_ids

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


class Server:
    """The OpenAI server's path from a finish reason to what the client sees."""

    def __init__(self, root: Path) -> None:
        protocol = root / "vllm/entrypoints/openai/engine/protocol.py"
        self.error = load_function(protocol, "GenerationError", {"HTTPStatus": HTTPStatus})
        base = load_function(
            protocol,
            "OpenAIBaseModel",
            {
                "BaseModel": BaseModel,
                "ConfigDict": ConfigDict,
                "ClassVar": ClassVar,
                "model_validator": model_validator,
                "logger": LOG,
            },
        )
        ns: dict[str, Any] = {"OpenAIBaseModel": base, "__builtins__": __builtins__}
        exec(compile_nodes(protocol, [load_node(protocol, "ErrorInfo"), load_node(protocol, "ErrorResponse")]), ns)
        ns["ErrorResponse"].model_rebuild(_types_namespace=ns)  # its annotations name ErrorInfo, in ns
        stub_modules("vllm")
        load_module("vllm.exceptions", root / "vllm/exceptions.py")
        sanitize = load_function(root / "vllm/entrypoints/serve/utils/api_utils.py", "sanitize_message", {"re": regex})
        self.create_error_response = load_function(
            root / "vllm/entrypoints/serve/utils/error_response.py",
            "create_error_response",
            {
                "HTTPStatus": HTTPStatus,
                "ErrorInfo": ns["ErrorInfo"],
                "ErrorResponse": ns["ErrorResponse"],
                "GenerationError": self.error,
                "sanitize_message": sanitize,
                "logger": LOG,
            },
        )
        self.handler = load_function(
            root / "vllm/entrypoints/serve/utils/server_utils.py",
            "generation_error_handler",
            {"create_error_response": self.create_error_response, "JSONResponse": JSONResponse},
        )
        # BaseServing.create_error_response (a staticmethod calling the module's function of that name)
        engine_serving = root / "vllm/entrypoints/serve/engine/serving.py"
        node = load_node(engine_serving, "BaseServing.create_error_response")
        node.decorator_list = []
        node.name = "_base_create_error_response"
        ens: dict[str, Any] = {
            "create_error_response": self.create_error_response,
            "HTTPStatus": HTTPStatus,
            "__builtins__": __builtins__,
        }
        exec(compile_nodes(engine_serving, [node]), ens)
        serving = root / "vllm/entrypoints/generate/base/serving.py"
        sns = {"json": json, "HTTPStatus": HTTPStatus, "GenerationError": self.error, "logger": LOG}
        self.serving = type(
            "GenerateBaseServing",
            (),
            {
                "create_error_response": staticmethod(ens["_base_create_error_response"]),
                **{
                    name: load_function(serving, f"GenerateBaseServing.{name}", sns)
                    for name in (
                        "create_streaming_error_response",
                        "_raise_if_error",
                        "_convert_generation_error_to_streaming_response",
                    )
                },
            },
        )()

    def answer(self, finish_reason: str | None) -> tuple[tuple[int, dict | None], dict | None]:
        """(HTTP status, error body) of the non-streamed answer, and the error of the streamed one."""
        try:
            self.serving._raise_if_error(finish_reason, "cmpl-0")
        except self.error as exc:
            response = asyncio.run(self.handler(None, exc))
            streamed = json.loads(self.serving._convert_generation_error_to_streaming_response(exc))
            return (response.status_code, response.content), streamed["error"]
        return (200, None), None


class JSONResponse:
    """fastapi's JSONResponse, as generation_error_handler builds it."""

    def __init__(self, content: dict, status_code: int = 200) -> None:
        self.content = content
        self.status_code = status_code


class Env:
    def __init__(self, root: Path) -> None:
        self.status = _statuses(root)[0]
        self.constant_list = load_function(
            root / "vllm/v1/utils.py",
            "ConstantList",
            {"Generic": Generic, "Sequence": Sequence, "T": TypeVar("T"), "overload": overload},
        )
        self.grammars = Grammars(root)
        self.guidance = Guidance(root, self.grammars.base)
        self.manager = _manager_class(root, self.grammars, self.guidance.backend_cls)()
        self.guidance_manager = _manager_class(root, self.guidance.backend, self.guidance.backend_cls)()
        # The same code with its guidance guard blind: a class of that name no backend is.
        self.unguarded = _manager_class(root, self.guidance.backend, type("GuidanceBackend", (), {}))()
        sched = root / "vllm/v1/core/sched/scheduler.py"
        utils_py = root / "vllm/v1/core/sched/utils.py"
        self.check_stop = load_function(
            utils_py,
            "check_stop",
            {
                "RequestStatus": self.status,
                "check_sequence_repetition": load_function(utils_py, "check_sequence_repetition"),
            },
        )
        self.update = load_function(sched, "Scheduler._update_request_with_output", {"check_stop": self.check_stop})
        self.block = compile_nodes(sched, [advance_block(sched)])
        sampler = root / "vllm/v1/sample/sampler.py"
        bad_words = root / "vllm/v1/sample/ops/bad_words.py"
        single = load_function(bad_words, "_apply_bad_words_single_batch", {"_SMALLEST_LOGIT": float("-inf")})
        apply_bad_words = load_function(bad_words, "apply_bad_words", {"_apply_bad_words_single_batch": single})
        self.apply_logits_processors = load_function(
            sampler, "Sampler.apply_logits_processors", {"apply_bad_words": apply_bad_words, "torch": torch}
        )
        self.sampler = SimpleNamespace(apply_penalties=load_function(sampler, "Sampler.apply_penalties"))
        self.greedy = load_function(sampler, "Sampler.greedy_sample", {"torch": torch})
        self.server = Server(root)

    def request(
        self,
        allowed: list[int] | None = None,
        bad: list[list[int]] | None = None,
        tokens: Sequence[int] = (),
        guidance: bool = False,
    ) -> Request:
        grammars = self.guidance if guidance else self.grammars
        request = Request(self, grammars.new(tokens), allowed, bad)
        request.append_output_token_ids(list(tokens))
        return request

    def manager_of(self, request: Request) -> Any:
        """The structured output manager of the request's backend (xgrammar or guidance)."""
        guidance = isinstance(request.structured_output_request.grammar, self.guidance.grammar_cls)
        return self.guidance_manager if guidance else self.manager

    def grammar_tokens(self, request: Request) -> set[int]:
        """The tokens the request's grammar allows now, from its bitmask row."""
        bitmask = self.manager_of(request).backend.allocate_token_bitmask(1)
        request.structured_output_request.grammar.fill_bitmask(bitmask, 0)
        words = bitmask[0].tolist()
        return {t for t in range(32 * len(words)) if (words[t // 32] >> (t % 32)) & 1}

    def row(self, request: Request) -> torch.Tensor:
        """The request's logits row as the sampler leaves it: the grammar bitmask, then the real
        apply_logits_processors with its allowed_token_ids mask and bad words."""
        grammar = request.structured_output_request.grammar
        bitmask = self.manager_of(request).backend.allocate_token_bitmask(1)
        grammar.fill_bitmask(bitmask, 0)
        logits = torch.tensor([LOGITS])
        apply_token_bitmask(logits, bitmask)
        params = request.sampling_params
        mask = None
        if params.allowed_token_ids:  # as InputBatch.add_request builds it
            mask = torch.ones(1, V, dtype=torch.bool)
            mask[0][params.allowed_token_ids] = False
        metadata = SimpleNamespace(
            bad_words_token_ids={0: params.bad_words_token_ids} if params.bad_words_token_ids else {},
            no_penalties=True,
            output_token_ids=[list(request.output_token_ids)],
            spec_token_ids=[[]],
            allowed_token_ids_mask=mask,
            logitsprocs=SimpleNamespace(non_argmax_invariant=[]),
            thinking_budget_state_holder=None,
        )
        return self.apply_logits_processors(self.sampler, logits, metadata, False)

    def step(self, request: Request, sampled: list[int]) -> bool:
        """One step of update_from_output for this request: append and check for stop, then
        advance the grammar."""
        scheduler = SimpleNamespace(structured_output_manager=self.manager_of(request), max_model_len=512)
        new_token_ids, stopped = self.update(scheduler, request, list(sampled))
        ns: dict[str, Any] = {
            "__builtins__": __builtins__,
            "self": scheduler,
            "request": request,
            "req_id": request.request_id,
            "new_token_ids": new_token_ids,
            "stopped": stopped,
            "logger": LOG,
            "RequestStatus": self.status,
            "StructuredOutputGrammar": self.grammars.base,
            "check_stop": self.check_stop,
        }
        exec(self.block, ns)
        return ns["stopped"]

    def generate(self, request: Request) -> list[int]:
        """Greedy steps until the request stops: the tokens sampled."""
        sampled = []
        for _ in range(request.max_tokens):
            token = int(self.greedy(self.row(request))[0])
            sampled.append(token)
            if self.step(request, [token]):
                break
        return sampled

    def finish_reason(self, request: Request) -> str | None:
        reason = self.status.get_finished_reason(request.status)
        return None if reason is None else str(reason)


def _refused(env: Env, request: Request, names: list[str], what: str, want_tokens: list[int]) -> None:
    """Generate; the request must end as a conflict naming ``names``, answered 400."""
    del LOG.lines[:]
    sampled = env.generate(request)
    finish = env.finish_reason(request)
    (code, body), streamed = env.server.answer(finish)
    if code != 400:
        raise AssertionError(
            f"{what}: the grammar bitmask and the sampler's {' and '.join(names)} mask left no finite "
            f"logit, greedy sampling picked token {sampled[-1]}, the grammar rejected it and the request "
            f"ended {request.status.name} (finish_reason {finish!r}): the client gets HTTP {code} "
            f"{(body or {}).get('error', {}).get('type')}, and the stream an error event with code "
            f"{(streamed or {}).get('code')}, for a request whose parameters contradict its structured output"
        )
    assert sampled == want_tokens, f"{what}: sampled {sampled}, expected {want_tokens}"
    assert request.status == env.status.FINISHED_CONFLICT and finish == "conflict", (request.status, finish)
    assert request.resumable is False, f"{what}: the request stays resumable"
    assert body == {"error": {"message": MESSAGE, "type": "BadRequestError", "param": None, "code": 400}}, body
    assert streamed == {"message": MESSAGE, "type": "BadRequestError", "param": None, "code": 400}, streamed
    want = (
        f"Request cmpl-0: its {' and '.join(names)} leave no token that its structured output accepts. "
        "Ending the request."
    )
    assert LOG.of("WARNING") == [want], f"{what}: warnings {LOG.of('WARNING')}"
    errors = LOG.of("ERROR")
    assert not any("Unexpected" in e for e in errors), f"{what}: still logged as an engine error: {errors}"
    assert errors == [f"Failed to advance FSM for request cmpl-0 for tokens {sampled[-1]}. Please file an issue."], (
        errors
    )


def _engine_error(env: Env, request: Request, sampled: list[int], what: str, guidance: bool = False) -> None:
    """A rejection that the request's parameters do not explain stays an internal error (500). With
    ``guidance``, GuidanceGrammar logs its matcher's error as a warning first, as it does in vLLM."""
    del LOG.lines[:]
    stopped = env.step(request, sampled)
    finish = env.finish_reason(request)
    (code, body), streamed = env.server.answer(finish)
    assert stopped and request.status == env.status.FINISHED_ERROR, (
        f"{what}: ended {request.status.name}, not FINISHED_ERROR"
    )
    assert finish == "error" and code == 500, f"{what}: finish_reason {finish!r}, HTTP {code}"
    assert body == {
        "error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}
    }, f"{what}: {body}"
    assert streamed == body["error"], f"{what}: streamed {streamed}"
    matcher_error = request.structured_output_request.grammar.ll_matcher.get_error() if guidance else ""
    assert LOG.of("WARNING") == ([f"LLMatcher error: {matcher_error}"] if guidance else []), (
        f"{what}: {LOG.of('WARNING')}"
    )
    assert any(f"Unexpected: grammar rejected tokens {sampled}" in e for e in LOG.of("ERROR")), LOG.lines


def _check_requests(env: Env) -> None:
    # The failing requests: allowed_token_ids disjoint from the choice's tokens; bad_words covering
    # every spelling of the choices; both at once (both named).
    _refused(env, env.request(allowed=[5, 6, 7]), ["allowed_token_ids"], "allowed_token_ids [5, 6, 7]", [BANG])
    every = [[YES], [Y], [N], [NO]]
    _refused(env, env.request(bad=every), ["bad_words"], "bad_words covering every spelling", [BANG])
    _refused(env, env.request(allowed=[YES, 5, 6], bad=[[YES]]), ["allowed_token_ids", "bad_words"], "both", [BANG])
    # allowed_token_ids that keep every token of the grammar is not named.
    _refused(env, env.request(allowed=[*START, 5], bad=every), ["bad_words"], "allowed covers the grammar", [BANG])
    # A multi-token bad word is only banned after its prefix: "y" is taken, then "es" is banned.
    bad = [[Y, ES], [YES], [N], [NO]]
    _refused(env, env.request(bad=bad), ["bad_words"], "bad word [y, es]", [Y, BANG])

    # What the parameters leave the grammar is generated as before.
    request = env.request(allowed=list(range(2, V)))
    sampled = env.generate(request)
    assert sampled == [Y, ES, EOS] and request.status == env.status.FINISHED_STOPPED, (sampled, request.status)
    assert env.server.answer(env.finish_reason(request)) == ((200, None), None)
    request = env.request(allowed=[NO, EOS], bad=[[N, OH]])
    assert env.generate(request) == [NO, EOS] and request.status == env.status.FINISHED_STOPPED, request.status

    # A rejection where a token remained is not the request's doing: 500 as before. The remaining
    # token sits at bit 31 of its word (the sign bit), once in word 0 and once in word 1.
    _engine_error(env, env.request(allowed=[NO, 5, 6, 7]), [5], "allowed_token_ids keep 'no' (63)")
    _engine_error(env, env.request(allowed=[YES, 5]), [5], "allowed_token_ids keep 'yes' (31)")
    _engine_error(env, env.request(bad=[[YES], [Y], [N]]), [BANG], "bad_words keep 'no'")
    _engine_error(env, env.request(), [BANG], "no allowed_token_ids, no bad_words")
    # A terminated grammar rejects every token: no bitmask to read (xgrammar raises), 500.
    _engine_error(env, env.request(allowed=[5], tokens=[YES, EOS]), [5], "terminated grammar")
    # A step of several tokens (spec decode): the grammar may have taken some of them, its state is
    # not the one the rejected token was sampled from: 500 as before.
    _engine_error(env, env.request(allowed=[5, 6, 7]), [Y, BANG], "two tokens in a step")


def _check_guidance(env: Env) -> None:
    """With the guidance backend conflicting_params names nothing, and a rejection ends as before
    (FINISHED_ERROR, 500): llguidance's matcher enters an error state on the rejected token, and
    its bitmask then allows EOS alone, not the tokens the row was sampled from. Read from it, the
    same code without its guard (env.unguarded) would name allowed_token_ids for any rejection
    whose allowed_token_ids leave out EOS, an engine fault included, and miss a bad_words
    conflict."""
    # What the parameters leave the grammar is generated as before, through the real GuidanceGrammar.
    request = env.request(allowed=list(range(2, V)), guidance=True)
    assert env.generate(request) == [Y, ES, EOS] and request.status == env.status.FINISHED_STOPPED, request.status

    # allowed_token_ids disjoint from the choice's tokens: the row has no finite logit, token 0 is
    # sampled and rejected; 500 as in vLLM 0.26.0, not the 400 the xgrammar backend now gets.
    request = env.request(allowed=[5, 6, 7], guidance=True)
    assert not _finite(env.row(request)) and env.grammar_tokens(request) == START
    _engine_error(env, request, [BANG], "guidance: allowed_token_ids [5, 6, 7]", guidance=True)
    assert env.grammar_tokens(request) == {EOS}, "llguidance allows EOS alone after a rejection"
    assert env.unguarded.conflicting_params(request, request.output_token_ids[:-1]) == ["allowed_token_ids"]

    # An engine fault: "no" (63) remained, yet token 5 came back and was rejected. Unguarded, the
    # check reads EOS alone from the matcher's error state and names allowed_token_ids: a 400 that
    # blames the client for the engine's fault.
    request = env.request(allowed=[NO, 5, 6, 7], guidance=True)
    assert _finite(env.row(request)) == {NO}
    _engine_error(env, request, [5], "guidance: allowed_token_ids keep 'no'", guidance=True)
    assert env.grammar_tokens(request) == {EOS}, "llguidance allows EOS alone after a rejection"
    assert env.unguarded.conflicting_params(request, request.output_token_ids[:-1]) == ["allowed_token_ids"], (
        "unguarded, conflicting_params reading llguidance's EOS-only bitmask names allowed_token_ids here"
    )

    # bad_words covering every spelling: a conflict, but no bad word bans EOS, so unguarded the
    # check finds a token left and names nothing: guarded or not, a 500.
    request = env.request(bad=[[YES], [Y], [N], [NO]], guidance=True)
    assert not _finite(env.row(request))
    _engine_error(env, request, [BANG], "guidance: bad_words covering every spelling", guidance=True)
    assert env.unguarded.conflicting_params(request, request.output_token_ids[:-1]) is None


def _check_conflicting_params(env: Env) -> None:
    conflicting = type(env.manager).conflicting_params
    manager = env.manager
    # Bad words after their prefix, and only then.
    assert conflicting(manager, env.request(bad=[[Y, ES], [YES], [N], [NO]]), []) is None
    assert conflicting(manager, env.request(bad=[[Y, OH]], tokens=[N]), [N]) is None
    assert conflicting(manager, env.request(bad=[[N, OH]], tokens=[N]), [N]) == ["bad_words"]
    assert conflicting(manager, env.request(bad=[[BANG, N, OH]], tokens=[N]), [N]) is None
    assert conflicting(manager, env.request(bad=[[BANG, N, OH]], tokens=[N]), [BANG, N]) == ["bad_words"]
    assert conflicting(manager, env.request(bad=[[N, N, OH]], tokens=[N]), [BANG, N]) is None
    # Nothing to read: no sampling parameters, no grammar, a terminated grammar.
    request = env.request(allowed=[5])
    request.sampling_params = None
    assert conflicting(manager, request, []) is None
    request = env.request(allowed=[5])
    request.structured_output_request.grammar = None
    assert conflicting(manager, request, []) is None
    assert conflicting(manager, env.request(allowed=[5], tokens=[NO, EOS]), [NO, EOS]) is None

    # Against the real sampler: conflicting_params names a parameter exactly when the sampler's
    # row has no finite logit, for random allowed_token_ids, bad words and grammar states.
    rng = random.Random(0)
    others = [ES, OH, EOS, BANG, 5, 65, 66]  # 66: past the tokenizer's vocabulary (a bitmask 0)
    states: list[list[int]] = [[], [], [], [Y], [N], [YES], [NO], [Y, ES]]  # the start (4 tokens) thrice
    for case in range(400):
        tokens = rng.choice(states)
        past = [*rng.sample([BANG, 5, 6], rng.randint(0, 2)), *tokens]  # output before the grammar's too
        grammar_only = env.row(_with_past(env.request(None, None, tokens), past))
        keeps = _finite(grammar_only)
        allowed = None
        if rng.random() < 0.5:
            allowed = rng.sample(sorted(keeps), rng.randint(0, len(keeps))) + rng.sample(others, rng.randint(1, 3))
        targets = sorted(keeps.intersection(allowed or keeps) or keeps)  # what the bad words aim at
        bad = None
        if rng.random() < 0.8:
            bad = []
            for _ in range(rng.randint(1, 6)):
                k = rng.randint(0, 3)  # a prefix of k tokens: the end of past, or any
                prefix = past[len(past) - k :] if rng.random() < 0.6 else rng.choices([BANG, Y, N, 5], k=k)
                bad.append([*prefix, rng.choice(targets) if rng.random() < 0.6 else rng.choice(others)])
        request = _with_past(env.request(allowed, bad, tokens), past)
        finite = _finite(env.row(request))
        got = conflicting(manager, request, env.constant_list(past))
        want = None
        if not finite:
            left = _finite(env.row(_with_past(env.request(allowed, None, tokens), past)))
            want = [n for n, cut in (("allowed_token_ids", left != keeps), ("bad_words", bool(left))) if cut]
        assert got == want, f"case {case}: {tokens=} {allowed=} {bad=} {past=}: {got}, sampler leaves {sorted(finite)}"


def _finite(row: torch.Tensor) -> set[int]:
    return set(torch.isfinite(row[0]).nonzero().flatten().tolist())


def _with_past(request: Request, past: list[int]) -> Request:
    request._output_token_ids[:] = past
    return request


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    env = Env(Path(trees.vllm))
    _check_requests(env)
    _check_guidance(env)
    _check_conflicting_params(env)
