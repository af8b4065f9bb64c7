"""echo-prompt-logprobs: a streamed completion with echo, logprobs and n >= 2 must echo every choice's prompt
with its prompt logprobs, not end with an error event.

Runs vLLM's real frontend from the given tree on a CPU, with only EngineCore (scheduler and model) replaced by
scripted EngineCoreOutputs:

- AsyncLLM.add_request (the n > 1 fan-out: one RequestOutputCollector shared by the n child requests), _add_request,
  generate (the consumer: ``q.get_nowait() or await q.get()``), _run_output_handler (one process_outputs call per
  engine step) and abort, with a stand-in ``self``;
- vllm/v1/engine/output_processor.py (OutputProcessor, RequestState, RequestOutputCollector), parallel_sampling.py
  (ParentRequest), v1/engine/logprobs.py (LogprobsProcessor, which pops the prompt logprobs in DELTA mode),
  vllm/logprobs.py and vllm/outputs.py (RequestOutput.add, the patched function), their other vLLM imports stubbed;
- OpenAIServingCompletion.completion_stream_generator and _create_completion_logprobs, the _raise_if_error,
  _get_decoded_token and streaming-error helpers of generate/base/serving.py, create_error_response,
  merge_async_iterators, and the pydantic response models of the OpenAI protocol files, with a stand-in ``self``.

The engine emits a step only once the consumer has taken what the previous step put (the API server's consumer is
faster than an engine step), except where a case says the consumer is behind. Detokenization in the engine is off
(tokenizer None: Logprob.decoded_token is None and the server decodes ids with its tokenizer, here a small vocabulary
stand-in); the bug is in which token ids the logprobs are paired with, not in their text.

The failing sequence (the real-server reproducer, n=4): child 0's first output carries the prompt logprobs P and is
echoed; in a later step child 0's next delta (prompt_logprobs [] since P was popped) and child 1's first output
(carrying P) are put into the shared collector before the consumer takes them, and RequestOutput.add merges the second
into the first without looking at its prompt_logprobs. The server then echoes choice 1 with the prompt's token ids but
no prompt logprobs, and _create_completion_logprobs raises KeyError(first prompt token id), which the stream generator
sends as an error event.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import copy
import enum
import json
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from collections.abc import Sequence as GenericSequence
from http import HTTPStatus
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar, Literal

import numpy as np
import pydantic
import regex
import torch

from fixpack.proofkit import Trees, compile_nodes, load_function, load_module, parse_file, stub_modules

PROMPT_TEXT = "hello world, this is a test"
PROMPT = [100, 101, 102, 103, 104, 105, 106]
VOCAB = {100: "hello", 101: " world", 102: ",", 103: " this", 104: " is", 105: " a", 106: " test"}
PROMPT_LPS = [-1.5, -2.25, -0.75, -3.0, -0.5, -1.25]  # positions 1.. (position 0 has none)
PROMPT_RANKS = [3, 1, 7, 2, 1, 4]


class Recorder:
    """vLLM's logger: records the exceptions that logger.exception reports (the stream generator logs the one it
    turns into an error event)."""

    def __init__(self) -> None:
        self.exceptions: list[BaseException] = []

    def exception(self, *args: Any, **kwargs: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            self.exceptions.append(exc)

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


LOG = Recorder()


class Tokenizer:
    """decode() as a Hugging Face tokenizer takes it: one id or a list of ids."""

    def decode(self, ids: int | list[int], **kwargs: Any) -> str:
        return "".join(VOCAB.get(i, f"<{i}>") for i in ([ids] if isinstance(ids, int) else ids))


class Params:
    """The SamplingParams fields the frontend reads, as CompletionRequest.to_sampling_params sets them for
    stream + echo + logprobs: prompt_logprobs = logprobs, output_kind DELTA (FINAL_ONLY without stream)."""

    def __init__(self, n: int, logprobs: int, max_tokens: int, output_kind: Any, flat_logprobs: bool = False) -> None:
        self.n = n
        self.logprobs = logprobs
        self.prompt_logprobs = logprobs
        self.logprob_token_ids: list[int] | None = None
        self.max_tokens = max_tokens
        self.output_kind = output_kind
        self.flat_logprobs = flat_logprobs
        self.seed: int | None = None
        self.detokenize = True
        self.top_p = 1.0
        self.temperature = 1.0

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs


class EngineCoreRequest:
    """The fields of vllm.v1.engine.EngineCoreRequest that the frontend reads (a msgspec Struct there)."""

    def __init__(self, request_id: str, prompt_token_ids: list[int], sampling_params: Params) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.sampling_params = sampling_params
        self.pooling_params = None
        self.prompt_embeds = None
        self.lora_request = None
        self.arrival_time = 0.0
        self.external_req_id: str | None = None
        self.resumable = False

    @property
    def params(self) -> Params:
        return self.sampling_params


class PoolingParams:
    pass


def _module_assign(path: Path, name: str, ns: dict[str, Any]) -> Any:
    """Run one module-level assignment of ``path`` (e.g. FINISH_REASON_STRINGS) in ``ns``."""
    nodes = [
        n
        for n in parse_file(path).body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets)
    ]
    exec(compile_nodes(path, nodes), ns)
    return ns[name]


def _load(path: Path, names: list[str], ns: dict[str, Any]) -> None:
    for name in names:
        ns[name.rsplit(".", 1)[-1]] = load_function(path, name, ns)


def _engine_modules(root: Path) -> SimpleNamespace:
    stubs = stub_modules(
        "vllm.logger",
        "vllm.lora.request",
        "vllm.v1.metrics.stats",
        "vllm.tokenizers.detokenizer_utils",
        "vllm.tracing",
        "vllm.v1.outputs",
        "vllm.sampling_params",
        "vllm.v1.engine.detokenizer",
        "vllm.utils",
    )
    stubs["vllm.logger"].init_logger = lambda name: LOG

    ns: dict[str, Any] = {"Enum": enum.Enum, "IntEnum": enum.IntEnum, "enum": enum}
    _load(root / "vllm/sampling_params.py", ["RequestOutputKind"], ns)
    stubs["vllm.sampling_params"].RequestOutputKind = ns["RequestOutputKind"]
    stubs["vllm.sampling_params"].SamplingParams = Params

    # vllm/v1/engine/__init__.py imports msgspec: its FinishReason (and the strings it prints as) come from the tree.
    engine_init = root / "vllm/v1/engine/__init__.py"
    _module_assign(engine_init, "FINISH_REASON_STRINGS", ns)
    _load(engine_init, ["FinishReason"], ns)
    engine_pkg = ModuleType("vllm.v1.engine")
    engine_pkg.__path__ = []  # a package: its submodules are loaded below
    engine_pkg.FinishReason = ns["FinishReason"]  # type: ignore[attr-defined]
    engine_pkg.EngineCoreRequest = EngineCoreRequest  # type: ignore[attr-defined]
    engine_pkg.EngineCoreOutput = SimpleNamespace  # type: ignore[attr-defined]
    sys.modules["vllm.v1.engine"] = engine_pkg

    # Detokenization off (tokenizer None): from_new_request returns the tree's base IncrementalDetokenizer.
    _load(root / "vllm/v1/engine/detokenizer.py", ["IncrementalDetokenizer"], ns)
    stubs["vllm.v1.engine.detokenizer"].IncrementalDetokenizer = ns["IncrementalDetokenizer"]
    _load(root / "vllm/utils/__init__.py", ["length_from_prompt_token_ids_or_embeds"], ns)
    stubs["vllm.utils"].length_from_prompt_token_ids_or_embeds = ns["length_from_prompt_token_ids_or_embeds"]

    load_module("vllm.logprobs", root / "vllm/logprobs.py")
    outputs = load_module("vllm.outputs", root / "vllm/outputs.py")
    load_module("vllm.v1.engine.logprobs", root / "vllm/v1/engine/logprobs.py")
    parallel = load_module("vllm.v1.engine.parallel_sampling", root / "vllm/v1/engine/parallel_sampling.py")
    op = load_module("vllm.v1.engine.output_processor", root / "vllm/v1/engine/output_processor.py")
    return SimpleNamespace(
        outputs=outputs,
        op=op,
        ParentRequest=parallel.ParentRequest,
        FinishReason=ns["FinishReason"],
        RequestOutputKind=ns["RequestOutputKind"],
    )


def _frontend_class(root: Path, eng: SimpleNamespace) -> type:
    """A stand-in AsyncLLM whose methods are the tree's add_request, _add_request, generate, _run_output_handler
    and abort."""
    path = root / "vllm/v1/engine/async_llm.py"
    ns: dict[str, Any] = {
        "asyncio": asyncio,
        "copy": copy.copy,
        "AsyncGenerator": AsyncGenerator,
        "PoolingParams": PoolingParams,
        "EngineCoreRequest": EngineCoreRequest,
        "SamplingParams": Params,
        "RequestOutputCollector": eng.op.RequestOutputCollector,
        "ParentRequest": eng.ParentRequest,
        "RequestOutput": eng.outputs.RequestOutput,
        "STREAM_FINISHED": eng.outputs.STREAM_FINISHED,
        "logger": LOG,
        "envs": SimpleNamespace(VLLM_V1_OUTPUT_PROC_CHUNK_SIZE=128, VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=False),
        "uuid": uuid,
    }
    _load(root / "vllm/v1/engine/exceptions.py", ["EngineGenerateError", "EngineDeadError"], ns)
    _load(path, ["InputStreamError"], ns)
    _load(root / "vllm/utils/collection_utils.py", ["as_list"], ns)
    _module_assign(root / "vllm/utils/__init__.py", "MASK_64_BITS", ns)
    _load(root / "vllm/utils/__init__.py", ["random_uuid"], ns)
    assign = load_function(root / "vllm/v1/engine/input_processor.py", "InputProcessor.assign_request_id", ns)
    methods: dict[str, Any] = {
        name: load_function(path, f"AsyncLLM.{name}", ns)
        for name in ("add_request", "_add_request", "generate", "_run_output_handler", "abort")
    }
    methods["input_processor"] = SimpleNamespace(assign_request_id=assign)
    return type("AsyncLLM", (), methods)


def _serving_class(root: Path) -> tuple[type, Callable[..., Any]]:
    """A stand-in OpenAIServingCompletion with the tree's stream generator and the helpers it calls, and the tree's
    merge_async_iterators."""
    ns: dict[str, Any] = {
        "BaseModel": pydantic.BaseModel,
        "ConfigDict": pydantic.ConfigDict,
        "Field": pydantic.Field,
        "model_validator": pydantic.model_validator,
        "ClassVar": ClassVar,
        "Literal": Literal,
        "Any": Any,
        "HTTPStatus": HTTPStatus,
        "logger": LOG,
        "time": time,
        "uuid": uuid,
        "json": json,
        "re": regex,
        "GenericSequence": GenericSequence,
        "AsyncIterator": AsyncIterator,
        "asyncio": asyncio,
        "contextlib": contextlib,
        "FIRST_COMPLETED": asyncio.FIRST_COMPLETED,
    }
    _module_assign(root / "vllm/utils/__init__.py", "MASK_64_BITS", ns)
    _load(root / "vllm/utils/__init__.py", ["random_uuid"], ns)
    _load(root / "vllm/utils/collection_utils.py", ["as_list"], ns)
    _load(root / "vllm/utils/async_utils.py", ["merge_async_iterators"], ns)
    protocol = root / "vllm/entrypoints/openai/engine/protocol.py"
    models = ["OpenAIBaseModel", "ErrorInfo", "ErrorResponse", "PromptTokenUsageInfo", "UsageInfo"]
    _load(protocol, [*models, "PerRequestTimingMetrics", "GenerationError"], ns)
    completion_protocol = root / "vllm/entrypoints/openai/completion/protocol.py"
    _load(completion_protocol, ["CompletionLogProbs", "CompletionResponseStreamChoice", "CompletionStreamResponse"], ns)
    for model in [
        v
        for v in ns.values()
        if isinstance(v, type) and issubclass(v, pydantic.BaseModel) and v is not pydantic.BaseModel
    ]:
        # Compiled outside their module, their annotations are resolved against the names given here.
        model.model_rebuild(force=True, _types_namespace=ns)
    exceptions = load_module("vllm.exceptions", root / "vllm/exceptions.py")
    ns["VLLMValidationError"] = exceptions.VLLMValidationError
    _load(root / "vllm/entrypoints/serve/utils/api_utils.py", ["sanitize_message", "should_include_usage"], ns)
    _load(root / "vllm/entrypoints/serve/utils/error_response.py", ["create_error_response"], ns)
    base = root / "vllm/entrypoints/generate/base/serving.py"
    _load(base, ["format_token_id_placeholder"], ns)

    serving = root / "vllm/entrypoints/openai/completion/serving.py"
    methods: dict[str, Any] = {
        "completion_stream_generator": load_function(
            serving, "OpenAIServingCompletion.completion_stream_generator", ns
        ),
        "_create_completion_logprobs": load_function(
            serving, "OpenAIServingCompletion._create_completion_logprobs", ns
        ),
        "_get_decoded_token": staticmethod(load_function(base, "GenerateBaseServing._get_decoded_token", ns)),
        "enable_force_include_usage": False,
        "enable_prompt_tokens_details": False,
        "enable_per_request_metrics": False,
        "system_fingerprint": None,
        "return_tokens_as_token_ids": False,
    }
    # BaseServing.create_error_response calls the module-level function of the same name, which compiling the
    # method into the namespace shadowed: give the method its module's function back.
    method = load_function(root / "vllm/entrypoints/serve/engine/serving.py", "BaseServing.create_error_response", ns)
    method.__globals__["create_error_response"] = ns["create_error_response"]
    methods["create_error_response"] = staticmethod(method)
    for name in (
        "_raise_if_error",
        "create_streaming_error_response",
        "_convert_generation_error_to_streaming_response",
    ):
        methods[name] = load_function(base, f"GenerateBaseServing.{name}", ns)
    return type("OpenAIServingCompletion", (), methods), ns["merge_async_iterators"]


def _generated(child: int, j: int) -> int:
    return 200 + 10 * child + j


def _sample_lp(child: int, j: int) -> float:
    return -0.125 * (1 + j + 4 * child)


class ScriptedEngineCore:
    """EngineCore as the frontend sees it: the requests added, then one EngineCoreOutputs per engine step. A step
    lists the children that get a token; a child's first token comes with its prompt logprobs (the model runner
    returns them on the step that finishes the prefill), each row led by the actual prompt token and followed by
    ``k`` top-k alternatives, as Sampler.gather_logprobs builds them. A step waits until the consumer has taken the
    previous steps' outputs unless it says the consumer is behind."""

    def __init__(self, eng: SimpleNamespace, steps: list[tuple[list[int], bool]], n: int, k: int, max_tokens: int):
        self.eng = eng
        self.steps = list(steps)
        self.n, self.k, self.max_tokens = n, k, max_tokens
        self.requests: list[EngineCoreRequest] = []
        self.emitted = [0] * n
        self.drained: Callable[[], bool] = lambda: True

    async def add_request_async(self, request: EngineCoreRequest) -> None:
        self.requests.append(request)

    async def abort_requests_async(self, request_ids: Any) -> None:
        pass

    async def get_output_async(self) -> SimpleNamespace:
        if not self.steps:
            await asyncio.Event().wait()  # nothing left to schedule
        children, consumer_caught_up = self.steps.pop(0)
        while len(self.requests) < self.n or (consumer_caught_up and not self.drained()):
            await asyncio.sleep(0)
        outputs = [self._output(child) for child in children]
        return SimpleNamespace(outputs=outputs, timestamp=time.monotonic(), scheduler_stats=None, engine_index=0)

    def _output(self, child: int) -> SimpleNamespace:
        j = self.emitted[child]
        self.emitted[child] += 1
        token = _generated(child, j)
        alternatives = [300 + a for a in range(self.k)]
        sample = (
            np.array([[token, *alternatives]]),
            np.array([[_sample_lp(child, j)] + [-6.0] * self.k]),
            np.array([1]),
            None,
        )
        prompt = None
        if j == 0:
            prompt = (
                torch.tensor([[t, *alternatives] for t in PROMPT[1:]]),
                torch.tensor([[lp] + [-6.0] * self.k for lp in PROMPT_LPS]),
                torch.tensor(PROMPT_RANKS),
                None,
            )
        finished = j + 1 == self.max_tokens
        return SimpleNamespace(
            request_id=self.requests[child].request_id,
            new_token_ids=[token],
            new_logprobs=sample,
            new_prompt_logprobs_tensors=prompt,
            pooling_output=None,
            finish_reason=self.eng.FinishReason.LENGTH if finished else None,
            stop_reason=None,
            kv_transfer_params=None,
            ec_transfer_params=None,
            routed_experts=None,
            prefill_stats=None,
            finished=finished,
            trace_headers=None,
        )


def _frontend(eng: SimpleNamespace, frontend_cls: type, core: ScriptedEngineCore) -> Any:
    fe = frontend_cls()
    fe.errored = False
    fe.vllm_config = SimpleNamespace(cache_config=SimpleNamespace(kv_sharing_fast_prefill=False))
    fe.output_handler = None
    fe.engine_core = core
    fe.output_processor = eng.op.OutputProcessor(None, log_stats=False)
    fe.log_stats = False
    fe.log_requests = False
    fe.logger_manager = None
    fe.renderer = None
    return fe


async def _stream(
    eng: SimpleNamespace,
    classes: tuple[type, type, Callable[..., Any]],
    steps: list[tuple[list[int], bool]],
    n: int,
    k: int,
    max_tokens: int,
) -> list[str]:
    """The events of one streamed /v1/completions request (stream, echo, logprobs=k, n) served over the script."""
    frontend_cls, serving_cls, merge_async_iterators = classes
    core = ScriptedEngineCore(eng, steps, n, k, max_tokens)
    fe = _frontend(eng, frontend_cls, core)
    params = Params(n=n, logprobs=k, max_tokens=max_tokens, output_kind=eng.RequestOutputKind.DELTA)
    request_id = "cmpl-proof-0"
    results = merge_async_iterators(
        fe.generate(EngineCoreRequest(request_id, list(PROMPT), params), params, request_id, prompt_text=PROMPT_TEXT)
    )
    request = SimpleNamespace(
        n=n,
        echo=True,
        max_tokens=max_tokens,
        logprobs=k,
        stream_options=None,
        return_token_ids=False,
        logprob_token_ids=None,
        return_tokens_as_token_ids=None,
    )
    stream = serving_cls().completion_stream_generator(
        request, [None], results, "cmpl-proof", 0, "proof-model", 1, Tokenizer(), SimpleNamespace()
    )

    async def consume() -> list[str]:
        return [event async for event in stream]

    consumer = asyncio.ensure_future(consume())
    states = fe.output_processor.request_states
    core.drained = lambda: consumer.done() or all(s.queue.output is None for s in states.values())
    try:
        return await asyncio.wait_for(consumer, timeout=60)
    finally:
        if fe.output_handler is not None:
            fe.output_handler.cancel()


def _check_stream(events: list[str], n: int, max_tokens: int, echoed_with: int, case: str) -> None:
    """Every choice echoes the prompt with its logprobs (position 0 None) in its first chunk, together with its first
    ``echoed_with`` generated tokens, then streams the rest: no error event."""
    assert events and events[-1] == "data: [DONE]\n\n", f"{case}: the stream did not end with [DONE]: {events[-1:]}"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    errors = [p for p in payloads if "error" in p]
    if errors:
        exc = LOG.exceptions[-1] if LOG.exceptions else None
        if isinstance(exc, (KeyError, IndexError)):
            raise AssertionError(
                f"{case}: the stream ends with the error event {json.dumps(errors[0])}: _create_completion_logprobs "
                f"raised {exc!r}. A choice was echoed with the prompt's {len(PROMPT)} token ids (the first, "
                f"{PROMPT[0]}, looked up in the first generated token's logprobs) but without the prompt logprobs: "
                "its child's first output, the only one that carries them in DELTA mode, was merged into another "
                "child's later delta by RequestOutputCollector.put, and RequestOutput.add dropped its prompt_logprobs"
            )
        raise RuntimeError(f"{case}: unexpected error event {errors[0]} ({exc!r})")

    choices: dict[int, list[dict[str, Any]]] = {i: [] for i in range(n)}
    for payload in payloads:
        for choice in payload["choices"]:
            choices[choice["index"]].append(choice)
    prompt_tokens = [VOCAB[t] for t in PROMPT]
    for i, chunks in choices.items():
        assert chunks, f"{case}: no chunk for choice {i}"
        first = chunks[0]["logprobs"]
        assert len(first["tokens"]) == len(PROMPT) + echoed_with and first["tokens"][: len(PROMPT)] == prompt_tokens, (
            f"{case}: choice {i} echoes {first['tokens']}"
        )
        assert first["top_logprobs"][0] is None, f"{case}: choice {i}: the first prompt token has top logprobs"
        assert chunks[0]["text"].startswith(PROMPT_TEXT), f"{case}: choice {i}: text {chunks[0]['text']!r}"
        tokens = [t for c in chunks for t in c["logprobs"]["tokens"]]
        logprobs = [lp for c in chunks for lp in c["logprobs"]["token_logprobs"]]
        generated = [Tokenizer().decode(_generated(i, j)) for j in range(max_tokens)]
        assert tokens == prompt_tokens + generated, f"{case}: choice {i} streamed the tokens {tokens}"
        expected = [None, *PROMPT_LPS, *(_sample_lp(i, j) for j in range(max_tokens))]
        assert logprobs == expected, f"{case}: choice {i} streamed the logprobs {logprobs}, not {expected}"
        assert chunks[-1]["finish_reason"] == "length", f"{case}: choice {i} ends with {chunks[-1]}"


async def _generate(
    eng: SimpleNamespace, frontend_cls: type, steps: list[tuple[list[int], bool]], n: int, params: Params
) -> list[Any]:
    """What AsyncLLM.generate() yields to a caller of the engine (not the OpenAI server) over the script."""
    core = ScriptedEngineCore(eng, steps, n, params.logprobs, params.max_tokens)
    fe = _frontend(eng, frontend_cls, core)

    async def consume() -> list[Any]:
        return [out async for out in fe.generate(EngineCoreRequest("req-0", list(PROMPT), params), params, "req-0")]

    consumer = asyncio.ensure_future(consume())
    states = fe.output_processor.request_states
    core.drained = lambda: consumer.done() or all(s.queue.output is None for s in states.values())
    try:
        return await asyncio.wait_for(consumer, timeout=60)
    finally:
        if fe.output_handler is not None:
            fe.output_handler.cancel()


def _prompt_entries(plp: Any) -> list[tuple[int, float]]:
    """(token id, logprob) of the actual prompt token at positions 1.. of a PromptLogprobs container."""
    return [(t, lp.logprob) for t, lp in (next(iter(plp[j].items())) for j in range(1, len(plp)))]


def _check_engine(eng: SimpleNamespace, frontend_cls: type) -> None:
    """Callers of AsyncLLM.generate() other than the OpenAI server: in DELTA mode each sequence's first output must
    arrive with the prompt logprobs (list or FlatLogprobs containers; flat_logprobs is an engine-level option); a
    FINAL_ONLY request (no merge: ParentRequest sends the n outputs together) keeps them as before."""
    expected = list(zip(PROMPT[1:], PROMPT_LPS))
    steps = [([0], True), ([0, 1], True), ([0, 1, 2], True), ([1, 2], True), ([2], True)]
    for flat in (False, True):
        params = Params(n=3, logprobs=0, max_tokens=3, output_kind=eng.RequestOutputKind.DELTA, flat_logprobs=flat)
        outs = asyncio.run(_generate(eng, frontend_cls, steps, 3, params))
        seen: set[int] = set()
        for res in outs:
            for completion in res.outputs:
                if completion.index in seen:
                    continue
                seen.add(completion.index)
                plp = res.prompt_logprobs
                assert plp and len(plp) == len(PROMPT) and _prompt_entries(plp) == expected, (
                    f"generate() (DELTA, n=3, flat_logprobs={flat}): sequence {completion.index}'s first output "
                    f"arrives with prompt_logprobs {plp!r}: they were dropped when RequestOutput.add merged it into "
                    "another sequence's later delta"
                )
        assert seen == {0, 1, 2}, f"generate() (DELTA): outputs for sequences {seen}"

    params = Params(n=2, logprobs=0, max_tokens=2, output_kind=eng.RequestOutputKind.FINAL_ONLY)
    final = asyncio.run(_generate(eng, frontend_cls, [([0], True), ([0, 1], True), ([1], True)], 2, params))
    assert len(final) == 1, f"FINAL_ONLY: generate() yielded {len(final)} outputs"
    (res,) = final
    assert [o.index for o in res.outputs] == [0, 1], f"FINAL_ONLY: outputs {res.outputs}"
    plp = res.prompt_logprobs
    assert len(plp) == len(PROMPT) and plp[0] is None and _prompt_entries(plp) == expected, f"FINAL_ONLY: {plp}"


def _check_add(outputs: ModuleType) -> None:
    """RequestOutput.add where the merge has nothing to recover: both outputs carry the prompt logprobs (kept as the
    first output's), a non-aggregate merge (FINAL_ONLY, CUMULATIVE: every output carries them), none requested."""
    RequestOutput, CompletionOutput = outputs.RequestOutput, outputs.CompletionOutput

    def out(index: int, plp: Any) -> Any:
        completion = CompletionOutput(index=index, text="", token_ids=[index], cumulative_logprob=None, logprobs=None)
        return RequestOutput("r", PROMPT_TEXT, list(PROMPT), plp, [completion], False)

    for aggregate in (True, False):
        p0, p1 = [None, {101: "p0"}], [None, {101: "p1"}]
        first, second = out(0, p0), out(0 if not aggregate else 1, p1)
        first.add(second, aggregate=aggregate)
        assert first.prompt_logprobs is p0, f"add(aggregate={aggregate}) replaced the first output's prompt logprobs"
        if not aggregate:
            assert first.outputs == second.outputs, "add(aggregate=False) did not replace the output"
        first, second = out(0, None), out(1, None)
        first.add(second, aggregate=aggregate)
        assert first.prompt_logprobs is None, f"add(aggregate={aggregate}): prompt logprobs {first.prompt_logprobs}"


STREAM_CASES = [
    # (case, steps: (children that get a token, consumer caught up with the previous steps), n, logprobs, max_tokens,
    #  generated tokens in each choice's first chunk)
    (
        "n=2, child 1 prefilled one step after child 0",
        [([0], True), ([0, 1], True), ([0, 1], True), ([1], True)],
        2,
        0,
        3,
        1,
    ),
    (
        "n=3, logprobs=1, children 1 and 2 prefilled in later steps",
        [([0], True), ([0, 1], True), ([0, 1, 2], True), ([1, 2], True), ([2], True)],
        3,
        1,
        3,
        1,
    ),
    ("n=2, both children prefilled in the same step", [([0, 1], True), ([0, 1], True), ([0, 1], True)], 2, 0, 3, 1),
    # The child's first output (with the prompt logprobs) and its next delta merged: echoed with two tokens.
    ("n=1, the consumer behind the engine", [([0], True), ([0], False), ([0], True)], 1, 0, 3, 2),
]


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    eng = _engine_modules(root)
    serving_cls, merge = _serving_class(root)
    classes = (_frontend_class(root, eng), serving_cls, merge)

    _check_add(eng.outputs)
    for case, steps, n, k, max_tokens, echoed_with in STREAM_CASES:
        LOG.exceptions.clear()
        events = asyncio.run(_stream(eng, classes, steps, n, k, max_tokens))
        _check_stream(events, n, max_tokens, echoed_with, case)

    _check_engine(eng, classes[0])
