"""echo-token-ids: a completion with echo and return_token_ids still echoes the prompt in its text.

Runs vLLM's real request path from the given tree on a CPU, from the request to the JSON answer:

- ``CompletionRequest.build_tok_params`` (vllm/entrypoints/openai/completion/protocol.py) on a
  stand-in request carrying the class's own defaults for the fields it reads, building the tree's
  real ``TokenizeParams`` dataclass (vllm/renderers/params.py);
- the renderer's completion steps of ``BaseRenderer`` (vllm/renderers/base.py):
  ``tokenize_prompt_async``, ``_tokenize_singleton_prompt_async`` (where ``needs_detokenization``
  decides whether a token-id prompt gets its text), ``_tokenize_prompt``, ``_detokenize_prompt_async``
  through the real ``make_async``, then ``process_for_engine_async`` and ``_process_tokens_async``
  (the engine input, which keeps the prompt text only when it is not empty); the request's prompt
  is made a dict by the real ``parse_dec_only_prompt``;
- the prompt text the engine puts on its RequestOutput, by the real ``extract_prompt_components``
  (vllm/renderers/inputs/preprocess.py), as AsyncLLM.generate does; the serving's fallback
  ``_extract_prompt_text`` is the same function;
- the real ``OpenAIServingCompletion.request_output_to_completion_response`` and
  ``completion_stream_generator`` (vllm/entrypoints/openai/completion/serving.py) with the tree's
  ``should_include_usage``, ``clamp_prompt_logprobs`` and ``as_list``; the pydantic response classes
  are stand-ins that keep their fields and dump them to JSON; the streamed chunks are parsed back and
  put together as a client does.

The tokenizer is a small word-level one; the prompt is the one the fuzzer sent to a CPU vLLM 0.26.0
server: "the the stone 42 server 7".
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import functools
import json
import sys
import types
import typing
from pathlib import Path
from types import MethodType, SimpleNamespace
from typing import Any

from fixpack.proofkit import Trees, compile_nodes, load_function, load_node

PROTOCOL = "vllm/entrypoints/openai/completion/protocol.py"
SERVING = "vllm/entrypoints/openai/completion/serving.py"
PARAMS = "vllm/renderers/params.py"
RENDERER = "vllm/renderers/base.py"
PREPROCESS = "vllm/renderers/inputs/preprocess.py"

PROMPT = "the the stone 42 server 7"
WORDS = ["<unk>", "<s>", "</s>", "", "the", "stone", "42", "server", "7", "rolls", "on"]
BLANK = WORDS.index("")  # a token that decodes to no text (as a lone "▁" does in Llama's tokenizer)
OUTPUT = [(" rolls", [WORDS.index("rolls")]), (" on", [WORDS.index("on")])]  # the two steps generated
COMPLETION = "".join(text for text, _ in OUTPUT)
COMPLETION_IDS = [i for _, ids in OUTPUT for i in ids]


class Tokenizer:
    """A word-level tokenizer: ids are positions in WORDS; decode joins words with spaces."""

    max_chars_per_token = 16
    truncation_side = "right"

    def __call__(self, text: str, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [WORDS.index(w) for w in text.split()]}

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return " ".join(WORDS[i] for i in ids if WORDS[i])


class Response:
    """A stand-in for the pydantic response models: keeps its fields, dumps them as JSON."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def model_dump(self, exclude_unset: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        def dump(value: Any) -> Any:
            if isinstance(value, Response):
                return value.model_dump(exclude_unset, exclude_none)
            if isinstance(value, list):
                return [dump(v) for v in value]
            return value

        return {k: dump(v) for k, v in vars(self).items() if not (exclude_none and v is None)}

    def model_dump_json(self, exclude_unset: bool = False, exclude_none: bool = False) -> str:
        return json.dumps(self.model_dump(exclude_unset, exclude_none))


class GenerationError(Exception):
    pass


def _defaults(root: Path, names: set[str]) -> dict[str, Any]:
    """CompletionRequest's own defaults for ``names`` (a plain value or Field(default=...))."""
    cls = load_node(root / PROTOCOL, "CompletionRequest")
    found: dict[str, Any] = {}
    for item in cls.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id in names:
            value = item.value
            if isinstance(value, ast.Call):  # Field(default=...) or Field(...)
                kw = {k.arg: k.value for k in value.keywords}
                value = kw.get("default", value.args[0] if value.args else None)
            found[item.target.id] = ast.literal_eval(value)
    assert set(found) == names, f"CompletionRequest: no default found for {sorted(names - set(found))}"
    return found


def _method(path: Path, cls: str, name: str, namespace: dict[str, Any]) -> Any:
    """A method of ``cls`` as a plain function: the definition that is not an ``@overload`` stub."""
    (node,) = [
        item
        for item in load_node(path, cls).body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        and item.name == name
        and not any(getattr(d, "id", None) == "overload" for d in item.decorator_list)
    ]
    node.decorator_list = []
    glb = {"__name__": f"proof:{cls}.{name}", "__builtins__": __builtins__, **namespace}
    exec(compile_nodes(path, [node]), glb)
    return glb[name]


class Chain:
    """The tree's real request path, protocol to answer, for one completion request at a time."""

    def __init__(self, root: Path) -> None:
        error = load_function(root / "vllm/exceptions.py", "VLLMValidationError", {"Any": Any})
        quiet = SimpleNamespace(warning=lambda *a, **k: None, exception=lambda *a, **k: None)

        # protocol.py: build_tok_params, making the real TokenizeParams dataclass
        module = types.ModuleType("proof_renderers_params")  # dataclasses reads the class's module
        sys.modules[module.__name__] = module
        params_cls = load_function(
            root / PARAMS,
            "TokenizeParams",
            {"__name__": module.__name__, "VLLMValidationError": error, "logger": quiet},
        )
        self.tokenize_params = dataclasses.dataclass(frozen=True)(params_cls)
        self.build_tok_params = load_function(
            root / PROTOCOL, "CompletionRequest.build_tok_params", {"TokenizeParams": self.tokenize_params}
        )
        self.defaults = _defaults(
            root,
            {
                "echo",
                "return_token_ids",
                "max_tokens",
                "truncate_prompt_tokens",
                "truncation_side",
                "add_special_tokens",
                "return_token_offsets",
            },
        )
        self.model_config = SimpleNamespace(max_model_len=64, is_encoder_decoder=False)

        # preprocess.py: the request's prompt as a dict, and the prompt text of an engine input
        collection = root / "vllm/utils/collection_utils.py"
        is_list_of = load_function(collection, "is_list_of", {"assert_never": typing.assert_never})
        self.as_list = load_function(collection, "as_list")
        pre: dict[str, Any] = {"TextPrompt": dict, "TokensPrompt": dict, "is_list_of": is_list_of}
        pre["_validate_prompt_dict"] = load_function(root / PREPROCESS, "_validate_prompt_dict", pre)
        pre["parse_dec_only_prompt"] = load_function(root / PREPROCESS, "parse_dec_only_prompt", pre)
        pre["extract_target_prompt"] = load_function(root / PREPROCESS, "extract_target_prompt", pre)
        pre["PromptComponents"] = load_function(
            root / PREPROCESS, "PromptComponents", {"NamedTuple": typing.NamedTuple}
        )
        self.parse_prompt = pre["parse_dec_only_prompt"]
        self.extract_prompt_components = load_function(root / PREPROCESS, "extract_prompt_components", pre)

        # base.py: the renderer's steps for a completion prompt
        self.make_async = load_function(
            root / "vllm/utils/async_utils.py", "make_async", {"asyncio": asyncio, "partial": functools.partial}
        )
        tokens_input = load_function(root / "vllm/inputs/engine.py", "tokens_input", {"TokensInput": dict})
        self.renderer_ns = {"TokensPrompt": dict, "tokens_input": tokens_input}
        self.renderer_methods = {
            name: _method(root / RENDERER, "BaseRenderer", name, self.renderer_ns)
            for name in (
                "get_tokenizer",
                "_decode",
                "_wants_offsets",
                "_tokenize_prompt",
                "_detokenize_prompt_async",
                "_tokenize_singleton_prompt_async",
                "tokenize_prompt_async",
                "process_for_engine_async",
                "_process_singleton_async",
                "_process_tokens_async",
            )
        }
        self.build_tokens_prompt = load_function(root / RENDERER, "BaseRenderer._build_tokens_prompt", self.renderer_ns)

        # serving.py: the two answer builders
        serving_ns: dict[str, Any] = {
            "should_include_usage": load_function(
                root / "vllm/entrypoints/serve/utils/api_utils.py", "should_include_usage"
            ),
            "clamp_prompt_logprobs": load_function(
                root / "vllm/entrypoints/generate/base/serving.py", "clamp_prompt_logprobs"
            ),
            "as_list": self.as_list,
            "CompletionResponse": Response,
            "CompletionResponseChoice": Response,
            "CompletionStreamResponse": Response,
            "CompletionResponseStreamChoice": Response,
            "UsageInfo": Response,
            "PromptTokenUsageInfo": Response,
            "GenerationError": GenerationError,
            "build_per_request_timing_metrics": lambda *a, **k: None,
            "logger": quiet,
        }
        self.to_response = load_function(
            root / SERVING, "OpenAIServingCompletion.request_output_to_completion_response", serving_ns
        )
        self.stream = load_function(root / SERVING, "OpenAIServingCompletion.completion_stream_generator", serving_ns)

    def renderer(self) -> SimpleNamespace:
        r = SimpleNamespace(tokenizer=Tokenizer(), _build_tokens_prompt=self.build_tokens_prompt)
        for name, fn in self.renderer_methods.items():
            setattr(r, name, MethodType(fn, r))
        r._can_produce_offsets = lambda: False
        r._async_tokenizer_decode = self.make_async(r._decode)
        r._tokenize_prompt_async = self.make_async(r._tokenize_prompt)
        return r

    def request(self, **fields: Any) -> SimpleNamespace:
        base = {**self.defaults, "n": 1, "stream_options": None, "logprobs": None}
        return SimpleNamespace(**{**base, **fields})

    def serving(self, errors: list[BaseException]) -> SimpleNamespace:
        def streaming_error(e: BaseException) -> str:
            errors.append(e)
            return json.dumps({"error": repr(e)})

        return SimpleNamespace(
            enable_force_include_usage=False,
            enable_prompt_tokens_details=False,
            enable_per_request_metrics=False,
            system_fingerprint=None,
            _raise_if_error=lambda finish_reason, request_id: None,
            _extract_prompt_text=lambda p: self.extract_prompt_components(self.model_config, p).text,
            create_streaming_error_response=streaming_error,
            _convert_generation_error_to_streaming_response=streaming_error,
        )

    def render(self, request: SimpleNamespace, prompt: str | list[int]) -> tuple[Any, dict[str, Any]]:
        """The request's TokenizeParams and the engine input the renderer makes of its prompt."""
        params = self.build_tok_params(request, self.model_config)
        r = self.renderer()

        async def run() -> dict[str, Any]:
            tok_prompt = await r.tokenize_prompt_async(self.parse_prompt(prompt), params)
            return await r.process_for_engine_async(tok_prompt, 0.0)

        return params, asyncio.run(run())

    def outputs(self, engine_input: dict[str, Any], final: bool, max_tokens: int) -> list[SimpleNamespace]:
        """What the engine yields: one RequestOutput (final) or one per generated step (streaming).
        With max_tokens=0 (echo alone) the engine is asked for one token (to_sampling_params)."""
        prompt = self.extract_prompt_components(self.model_config, engine_input).text
        steps = OUTPUT[:1] if max_tokens == 0 else [(COMPLETION, COMPLETION_IDS)] if final else OUTPUT
        return [
            SimpleNamespace(
                prompt=prompt,
                prompt_token_ids=list(engine_input["prompt_token_ids"]),
                prompt_logprobs=None,
                num_cached_tokens=0,
                metrics=None,
                kv_transfer_params=None,
                ec_transfer_params=None,
                outputs=[
                    SimpleNamespace(
                        index=0,
                        text=text,
                        token_ids=ids,
                        logprobs=None,
                        finish_reason="length" if step == len(steps) - 1 else None,
                        stop_reason=None,
                        routed_experts=None,
                    )
                ],
            )
            for step, (text, ids) in enumerate(steps)
        ]

    def answer(self, prompt: str | list[int], stream: bool, **fields: Any) -> tuple[Any, dict[str, Any]]:
        """The request's TokenizeParams, and its choice as a client reads it: text and token ids."""
        request = self.request(**fields)
        params, engine_input = self.render(request, prompt)
        errors: list[BaseException] = []
        serving = self.serving(errors)
        if not stream:
            (res,) = self.outputs(engine_input, True, request.max_tokens)
            if res.prompt is None:  # what _create_completion does before building the answer
                res.prompt = serving._extract_prompt_text(engine_input)
            meta = SimpleNamespace(final_usage_info=None)
            response = self.to_response(serving, [res], request, "cmpl-1", 0, "m", Tokenizer(), meta)
            return params, json.loads(response.model_dump_json())["choices"][0]

        async def results() -> Any:
            for res in self.outputs(engine_input, False, request.max_tokens):
                yield 0, res

        async def collect() -> list[str]:
            meta = SimpleNamespace(final_usage_info=None)
            gen = self.stream(serving, request, [engine_input], results(), "cmpl-1", 0, "m", 1, Tokenizer(), meta)
            return [line async for line in gen]

        lines = asyncio.run(collect())
        if errors:
            raise errors[0]
        choice: dict[str, Any] = {"text": "", "prompt_token_ids": None, "token_ids": None}
        for line in lines:
            data = line.removeprefix("data: ").strip()
            if data == "[DONE]":
                continue
            for part in json.loads(data)["choices"]:
                choice["text"] += part["text"]
                if part.get("prompt_token_ids") is not None:
                    assert choice["prompt_token_ids"] is None, f"prompt_token_ids sent twice: {lines}"
                    choice["prompt_token_ids"] = part["prompt_token_ids"]
                if part.get("token_ids") is not None:
                    choice["token_ids"] = (choice["token_ids"] or []) + part["token_ids"]
        return params, choice


def _check_echo_with_token_ids(chain: Chain) -> None:
    """The bug: echo + return_token_ids answers a text without the prompt."""
    prompt_ids = Tokenizer()(PROMPT)["input_ids"]
    for prompt, kind in ((PROMPT, "a string"), (prompt_ids, "token ids")):
        for stream in (False, True):
            where = f"echo + return_token_ids, prompt {prompt!r} ({kind}), stream={stream}"
            params, choice = chain.answer(prompt, stream, echo=True, return_token_ids=True)
            if not choice["text"].startswith(PROMPT):
                renderer = (
                    f"; build_tok_params set needs_detokenization={params.needs_detokenization}, so the "
                    "renderer gave the token-id prompt no text"
                    if kind == "token ids" and not params.needs_detokenization
                    else ""
                )
                raise AssertionError(
                    f"{where}: the answer's text {choice['text']!r} does not echo the prompt "
                    f"{PROMPT!r}{renderer}: with return_token_ids set, echo is dropped from the text"
                )
            assert choice["text"] == PROMPT + COMPLETION, f"{where}: text {choice['text']!r}"
            assert choice["prompt_token_ids"] == prompt_ids, f"{where}: prompt_token_ids {choice['prompt_token_ids']}"
            assert choice["token_ids"] == COMPLETION_IDS, f"{where}: token_ids {choice['token_ids']}"
            assert params.needs_detokenization is True, f"{where}: needs_detokenization {params.needs_detokenization}"
            # the engine input carries the prompt text, decoded by the renderer for a token-id prompt
            _, engine_input = chain.render(chain.request(echo=True, return_token_ids=True), prompt)
            assert engine_input.get("prompt") == PROMPT, f"{where}: engine input {engine_input}"

            # echo without generation (max_tokens=0): the answer is the prompt alone
            _, choice = chain.answer(prompt, stream, echo=True, return_token_ids=True, max_tokens=0)
            assert choice["text"] == PROMPT, f"{where}, max_tokens=0: text {choice['text']!r}, not the prompt"
            assert choice["prompt_token_ids"] == prompt_ids, f"{where}, max_tokens=0: {choice['prompt_token_ids']}"


def _check_unchanged(chain: Chain) -> None:
    """What the fix leaves as it was."""
    prompt_ids = Tokenizer()(PROMPT)["input_ids"]
    for prompt, kind in ((PROMPT, "a string"), (prompt_ids, "token ids")):
        for stream in (False, True):
            where = f"prompt {prompt!r} ({kind}), stream={stream}"
            # echo alone: the prompt, then the completion; no token ids (but a stream's first chunk
            # carries prompt_token_ids whenever it echoes: vLLM 0.26.0's echo branch sets them)
            params, choice = chain.answer(prompt, stream, echo=True)
            assert choice["text"] == PROMPT + COMPLETION, f"echo, {where}: text {choice['text']!r}"
            expected = prompt_ids if stream else None
            assert choice["prompt_token_ids"] == expected and choice["token_ids"] is None, f"echo, {where}: {choice}"
            assert params.needs_detokenization is True, f"echo, {where}: needs_detokenization False"
            # return_token_ids alone: the completion alone, with both lists of ids; no detokenization
            for return_token_ids in (True, None):
                params, choice = chain.answer(prompt, stream, return_token_ids=return_token_ids)
                label = f"echo=False, return_token_ids={return_token_ids}, {where}"
                assert choice["text"] == COMPLETION, f"{label}: text {choice['text']!r}"
                assert params.needs_detokenization is False, f"{label}: needs_detokenization True"
                # without echo a token-id prompt is not decoded: the engine input has no text
                _, engine_input = chain.render(chain.request(return_token_ids=return_token_ids), prompt)
                assert engine_input.get("prompt") == (PROMPT if kind == "a string" else None), (
                    f"{label}: engine input {engine_input}"
                )
                if return_token_ids:
                    assert choice["prompt_token_ids"] == prompt_ids, f"{label}: {choice['prompt_token_ids']}"
                    assert choice["token_ids"] == COMPLETION_IDS, f"{label}: {choice['token_ids']}"
                else:
                    assert choice["prompt_token_ids"] is None and choice["token_ids"] is None, f"{label}: {choice}"


def _check_empty_prompt_text(chain: Chain) -> None:
    """A token-id prompt whose text is empty: the engine input keeps no text (_process_tokens_async
    drops an empty one), so the prompt text the serving sees is None; echo then echoes nothing, with
    or without return_token_ids (before the fix, echo alone failed the serving's
    ``assert prompt_text is not None``)."""
    for return_token_ids in (True, None):
        for stream in (False, True):
            where = f"echo, return_token_ids={return_token_ids}, prompt [{BLANK}] (no text), stream={stream}"
            _, engine_input = chain.render(chain.request(echo=True, return_token_ids=return_token_ids), [BLANK])
            assert "prompt" not in engine_input, f"{where}: engine input {engine_input}"
            try:
                _, choice = chain.answer([BLANK], stream, echo=True, return_token_ids=return_token_ids)
            except AssertionError as exc:
                raise AssertionError(f"{where}: the serving failed its own assertion (HTTP 500): {exc!r}") from exc
            assert choice["text"] == COMPLETION, f"{where}: text {choice['text']!r}"


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    chain = Chain(Path(trees.vllm))
    _check_echo_with_token_ids(chain)
    _check_unchanged(chain)
    _check_empty_prompt_text(chain)
