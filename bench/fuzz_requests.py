"""Valid requests near the edges for a vLLM server, drawn with Hypothesis, and the oracle that judges
each answer (issue 46).

A request here is one that vLLM's own validation should take or refuse with a 4xx, never a body a
schema fuzzer makes up: a completions or chat body with a random combination of the sampling
fields (``n``, ``temperature``, ``top_p``/``top_k``/``min_p``, ``seed``, ``min_tokens``,
``max_tokens``, ``stop``, ``stop_token_ids``, ``allowed_token_ids``, ``bad_words``, ``logit_bias``,
``logprobs``/``top_logprobs``, ``prompt_logprobs``, ``echo``, ``structured_outputs`` and
``response_format`` (JSON schemas with enums, nesting and ``$ref``), ``stream`` and
``stream_options``, ``ignore_eos``, penalties, ``truncate_prompt_tokens``, ``skip_special_tokens``,
token-id prompts, and what an answer says of itself for the oracle of served answers:
``include_stop_str_in_output``, ``return_token_ids``, ``return_tokens_as_token_ids``). Token ids are drawn at the edges
(0, the tokenizer's size, the vocabulary's size, one either side) as often as inside, because those
are where the request-killers were. Requests come in batches sent at once: the input-batch bugs
show only when rows move.

``batches(model, seed, count)`` draws them once, from the seed alone, so that the stock and the
patched server get the very same requests. ``judge`` is the oracle of an answer's status: a 5xx,
an answer that is not JSON, a stream that ends in an error event or with ``finish_reason:
"error"``, or a 4xx without a message each fail the request; ``fuzz_oracle`` judges what a served
answer holds, and ``fuzz_listed`` names the failures the pack leaves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

__all__ = ["Model", "Verdict", "batches", "draw", "judge", "sse_data", "ENDPOINTS"]

ENDPOINTS = ("/v1/completions", "/v1/chat/completions")
WORDS = ("the", "cat", "river", "stone", "yes", "no", "model", "server", "answer", "blue", "7", "42")


@dataclass(frozen=True)
class Model:
    """What the requests are drawn against: the served name, the model's vocabulary (its logits'
    width) and its tokenizer's size, which may be smaller (a padded ``lm_head``)."""

    name: str
    vocab: int
    tokenizer: int

    def edges(self) -> list[int]:
        near = {0, 1, self.tokenizer - 1, self.tokenizer, self.tokenizer + 1, self.vocab - 1, self.vocab}
        return sorted(i for i in near | {self.vocab + 1} if i >= 0)


def token_ids(model: Model) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(model.edges()), st.integers(0, model.vocab - 1))


def _text(min_words: int = 1, max_words: int = 6) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(WORDS), min_size=min_words, max_size=max_words).map(" ".join)


# JSON schemas as clients write them: plain, with an enum, nested, and through a $ref.
SCHEMAS = (
    {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}},
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    {
        "type": "object",
        "properties": {"verdict": {"enum": ["yes", "no", "maybe"]}, "score": {"type": "integer"}},
        "required": ["verdict"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
        "required": ["item"],
    },
    {
        "$defs": {"word": {"type": "string", "enum": list(WORDS[:4])}},
        "type": "object",
        "properties": {"first": {"$ref": "#/$defs/word"}, "more": {"type": "array", "items": {"$ref": "#/$defs/word"}}},
        "required": ["first"],
    },
)


def structured() -> st.SearchStrategy[dict[str, Any]]:
    """vLLM's structured_outputs: a choice, a regex or a JSON schema."""
    return st.one_of(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True).map(lambda c: {"choice": c}),
        st.sampled_from(["[a-z]+", "(yes|no)", "[0-9]{1,3}"]).map(lambda r: {"regex": r}),
        st.sampled_from(SCHEMAS).map(lambda s: {"json": s}),
    )


def response_format() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"type": "json_object"}),
        st.sampled_from(SCHEMAS).map(lambda s: {"type": "json_schema", "json_schema": {"name": "a", "schema": s}}),
    )


def sampling(model: Model) -> st.SearchStrategy[dict[str, Any]]:
    """A random subset of the sampling fields both endpoints take."""
    ids = token_ids(model)
    fields: dict[str, st.SearchStrategy[Any]] = {
        "n": st.integers(1, 3),
        "temperature": st.sampled_from([0.0, 0.3, 1.0, 1.7]),
        "top_p": st.sampled_from([0.05, 0.5, 1.0]),
        "top_k": st.sampled_from([-1, 0, 1, 5, 50]),
        "min_p": st.sampled_from([0.0, 0.1, 0.9]),
        "seed": st.integers(0, 2**31),
        "min_tokens": st.integers(0, 12),
        "max_tokens": st.integers(1, 24),
        "stop": st.lists(_text(1, 2), min_size=1, max_size=2),
        "stop_token_ids": st.lists(ids, min_size=1, max_size=3),
        "allowed_token_ids": st.lists(ids, min_size=1, max_size=4),
        "bad_words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=2),
        "logit_bias": st.dictionaries(ids.map(str), st.sampled_from([-100.0, -5.0, 5.0, 100.0]), max_size=3),
        "ignore_eos": st.booleans(),
        # what the answer says of itself, for the oracle (bench/fuzz_oracle.py)
        "include_stop_str_in_output": st.booleans(),
        "return_token_ids": st.booleans(),
        "return_tokens_as_token_ids": st.booleans(),
        "skip_special_tokens": st.booleans(),
        "presence_penalty": st.sampled_from([-2.0, 0.0, 1.5]),
        "frequency_penalty": st.sampled_from([-2.0, 0.0, 1.5]),
        "repetition_penalty": st.sampled_from([0.5, 1.0, 2.0]),
        "truncate_prompt_tokens": st.sampled_from([-1, 1, 4]),
    }
    # vLLM refuses two output constraints at once, and prompt_logprobs on a stream: draw one of each pair
    constraint = st.one_of(
        st.just({}),
        structured().map(lambda s: {"structured_outputs": s}),
        response_format().map(lambda f: {"response_format": f}),
    )
    streaming = st.one_of(
        st.just({}),
        st.just({"stream": True}),
        st.booleans().map(lambda usage: {"stream": True, "stream_options": {"include_usage": usage}}),
        st.integers(0, 5).map(lambda n: {"prompt_logprobs": n}),
    )
    return st.tuples(st.fixed_dictionaries({}, optional=fields), constraint, streaming).map(
        lambda parts: {**parts[0], **parts[1], **parts[2]}
    )


@st.composite
def completion(draw: st.DrawFn, model: Model) -> tuple[str, dict[str, Any]]:
    body = draw(sampling(model))
    body["prompt"] = draw(st.one_of(_text(), st.lists(token_ids(model), min_size=1, max_size=8)))
    if draw(st.booleans()):
        body["logprobs"] = draw(st.integers(0, 5))
    if draw(st.booleans()):
        body["echo"] = True
    body["model"] = model.name
    return ENDPOINTS[0], body


@st.composite
def chat(draw: st.DrawFn, model: Model) -> tuple[str, dict[str, Any]]:
    body = draw(sampling(model))
    body["messages"] = [{"role": "user", "content": draw(_text())}]
    if draw(st.booleans()):
        body["logprobs"] = True
        body["top_logprobs"] = draw(st.integers(0, 5))
    body["model"] = model.name
    return ENDPOINTS[1], body


def batches(model: Model, seed: int, count: int, in_flight: int = 3) -> list[list[tuple[str, dict[str, Any]]]]:
    """``count`` batches of 1 to ``in_flight`` (endpoint, body) requests, drawn from ``seed`` alone:
    the same seed gives the same requests, whatever server they go to and whatever process asks.

    The draw runs in a fresh interpreter that loads only this module. Hypothesis also draws the
    literals of every local module a process has loaded (its "local constants"), so a draw made
    inside a test run or the bench would change with whatever else they import, and with every edit
    to that code: seed 78's stop-id killer came and went that way. The draws still depend on this
    module and on Hypothesis's version, which the test extra pins."""
    argv = [json.dumps(asdict(model)), str(seed), str(count), str(in_flight)]
    done = subprocess.run(
        [sys.executable, "-s", "-P", "-c", _DRAW, str(Path(__file__).parent), *argv],
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"drawing seed {seed}'s batches failed: {done.stderr.strip()[-2000:]}")
    return [[(endpoint, body) for endpoint, body in batch] for batch in json.loads(done.stdout)]


_DRAW = """
import json, sys
sys.path.insert(0, sys.argv[1])
from fuzz_requests import Model, draw
model, seed, count, in_flight = Model(**json.loads(sys.argv[2])), *map(int, sys.argv[3:])
print(json.dumps(draw(model, seed, count, in_flight)))
"""


def draw(model: Model, seed: int, count: int, in_flight: int = 3) -> list[list[tuple[str, dict[str, Any]]]]:
    """The Hypothesis draw behind ``batches``, in this process: call ``batches``."""
    request = st.one_of(completion(model), chat(model))
    drawn: list[list[tuple[str, dict[str, Any]]]] = []

    # Hypothesis draws; nothing is sent here, and nothing fails, so it never shrinks.
    @hypothesis_seed(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(request, min_size=1, max_size=in_flight))
    def collect(batch: list[tuple[str, dict[str, Any]]]) -> None:
        drawn.append(batch)

    collect()
    return drawn[:count]


@dataclass(frozen=True)
class Verdict:
    kind: str  # served, 4xx, 5xx, stream-error, hang, death, unanswered, violation (a wrong 200)
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind not in ("served", "4xx")


def judge(status: int | None, text: str, streamed: bool) -> Verdict:
    """The oracle for one answer: ``status`` None when the request got no answer at all."""
    if status is None:
        return Verdict("unanswered", text[:200])
    if status >= 500:
        return Verdict("5xx", f"HTTP {status}: {text[:200]}")
    if 400 <= status < 500:
        try:
            said = json.loads(text)
        except ValueError:
            return Verdict("5xx", f"HTTP {status} without a JSON error: {text[:200]}")
        message = (said.get("error") or {}).get("message") if isinstance(said, dict) else None
        return Verdict("4xx", message) if message else Verdict("5xx", f"HTTP {status} without a message: {text[:200]}")
    if streamed:
        return _judge_stream(text)
    try:
        answer = json.loads(text)
    except ValueError:
        return Verdict("5xx", f"HTTP {status}, not JSON: {text[:200]}")
    reasons = [c.get("finish_reason") for c in answer.get("choices") or []]
    if "error" in reasons:
        return Verdict("stream-error", "finish_reason error")
    return Verdict("served")


_SSE_LINE = re.compile(r"\r\n|\r|\n")


def sse_data(text: str) -> list[str]:
    """A stream's ``data:`` events, in order. An event ends at a line break as SSE defines it, not
    at every break str.splitlines knows: a token's text may hold U+0085 or U+2028, which JSON leaves
    unescaped."""
    return [line[len("data: ") :] for line in _SSE_LINE.split(text) if line.startswith("data: ")]


def _judge_stream(text: str) -> Verdict:
    events = sse_data(text)
    if not events or events[-1].strip() != "[DONE]":
        return Verdict("stream-error", f"the stream did not end with [DONE]: {text[-200:]}")
    for event in events[:-1]:
        try:
            chunk = json.loads(event)
        except ValueError as exc:
            return Verdict("stream-error", f"an event that is not JSON ({exc}): {event[:200]}")
        if "error" in chunk:
            # vLLM refuses a streamed request inside its stream: a client error there is a refusal
            error = chunk["error"] if isinstance(chunk["error"], dict) else {}
            code = error.get("code")
            if isinstance(code, int) and 400 <= code < 500 and error.get("message"):
                return Verdict("4xx", str(error["message"]))
            return Verdict("stream-error", json.dumps(chunk["error"])[:200])
        if any(c.get("finish_reason") == "error" for c in chunk.get("choices") or []):
            return Verdict("stream-error", "finish_reason error")
    return Verdict("served")
