"""Whether a served answer is right, not only an answer (issue 55): the oracle of every 200.

``read_answer`` reassembles an answer, plain or streamed, into its choices; ``violations`` judges
them against the request that asked for them, as a client would, and says what each broke. Pure:
text in, findings out; the tokenizer is passed in where a check needs token ids.

Each check keeps the exceptions vLLM documents, so that it raises no false alarm:

- structured output (``choice``, ``regex``, ``json``, ``response_format``) is judged on the
  generated text, an echoed prompt and what ``include_stop_str_in_output`` kept stripped (a stop
  string, or the text of the stop id or end-of-text token that ended it, which
  ``skip_special_tokens: false`` spells out). An answer that ended early (``finish_reason``
  "length", or a ``stop_reason`` that is the request's own stop string or stop id) need only be a
  prefix that can still complete: exactly for ``choice`` and ``regex`` (the ``regex`` module's
  partial match), and for JSON only where it is already decidable (it does not begin with ``{``,
  or it parses and fails the schema);
- every choice once, with indices ``0..n-1``; each no longer than ``max_tokens`` and not shorter
  than ``min_tokens`` unless a grammar ended it (a grammar that has ended may stop a request
  before ``min_tokens``);
- no stop string in the generated text where vLLM looks for one (past the first ``min_tokens``
  tokens), unless ``include_stop_str_in_output``;
- ``echo``: the text begins with the prompt; a token-id prompt that ends inside a character (as
  the engine got it, ``truncate_prompt_tokens`` applied) does not begin the generated text (its own
  text, U+FFFD for the unfinished character, in front of it, after an echo too: vLLM #48853); the
  rest of the text is judged without it;
- logprobs: every value finite and at most 0 (vLLM writes -inf as -9999.0), no more alternatives
  than asked, the sampled token among them where vLLM returns it (completions, always; chat, when
  ``top_logprobs`` is at least 1); ``prompt_logprobs`` one entry per prompt token, the first None;
- a seeded request sampled at a temperature, sent again twice alone, gives the same text each time
  (``seeded``, ``repeatable``: the client sends them);
- with token ids returned: each generated id in ``allowed_token_ids`` (the end-of-text id counts:
  vLLM masks it like any other id outside the list), and no ``bad_words`` sequence (each word as
  vLLM tokenizes it, with and without a leading space) among them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
import regex

from bench.fuzz_requests import sse_data

__all__ = ["Answer", "Choice", "Tokenizer", "read_answer", "repeatable", "seeded", "violations"]

COMPLETIONS_MAX_TOKENS = 16  # vLLM's default max_tokens for /v1/completions
LOGPROB_SLACK = 1e-5  # a logprob a rounding above 0 is still a probability of 1


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass
class Choice:
    """One choice as the client sees it, its stream's chunks put together."""

    index: int
    text: str = ""
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    token_ids: list[int] | None = None  # return_token_ids
    tokens: list[str] | None = None  # the logprobs' tokens (echoed prompt tokens first)
    logprobs: list[float | None] = field(default_factory=list)
    top: list[Any] = field(default_factory=list)  # completions: {token: logprob} | None; chat: [{token, logprob}]
    prompt_logprobs: list[Any] | None = None


@dataclass
class Answer:
    choices: list[Choice]
    usage: dict[str, Any] | None = None
    streamed: bool = False
    repeated: list[int] = field(default_factory=list)  # indices seen in two choices of a plain answer
    prompt_logprobs: list[Any] | None = None  # chat's, on the answer itself


def _take_logprobs(choice: Choice, logprobs: dict[str, Any] | None, chat: bool) -> None:
    if not logprobs:
        return
    if chat:
        content = logprobs.get("content") or []
        choice.tokens = (choice.tokens or []) + [c.get("token") for c in content]
        choice.logprobs += [c.get("logprob") for c in content]
        choice.top += [c.get("top_logprobs") for c in content]
    else:
        choice.tokens = (choice.tokens or []) + list(logprobs.get("tokens") or [])
        choice.logprobs += list(logprobs.get("token_logprobs") or [])
        choice.top += list(logprobs.get("top_logprobs") or [])


def read_answer(endpoint: str, text: str, streamed: bool) -> Answer:
    """The answer's choices, a stream's chunks joined by index in the order they came."""
    chat = endpoint.endswith("/chat/completions")
    if not streamed:
        data = json.loads(text)
        answer = Answer([], data.get("usage"), prompt_logprobs=data.get("prompt_logprobs"))
        seen: set[int] = set()
        for raw in data.get("choices") or []:
            choice = Choice(raw.get("index", -1))
            if choice.index in seen:
                answer.repeated.append(choice.index)
            seen.add(choice.index)
            choice.text = ((raw.get("message") or {}).get("content") if chat else raw.get("text")) or ""
            choice.finish_reason, choice.stop_reason = raw.get("finish_reason"), raw.get("stop_reason")
            choice.token_ids = raw.get("token_ids")
            choice.prompt_logprobs = raw.get("prompt_logprobs")
            _take_logprobs(choice, raw.get("logprobs"), chat)
            answer.choices.append(choice)
        return answer
    by_index: dict[int, Choice] = {}
    answer = Answer([], streamed=True)
    for chunk in (json.loads(event) for event in sse_data(text) if event.startswith("{")):
        if chunk.get("usage"):
            answer.usage = chunk["usage"]
        for raw in chunk.get("choices") or []:
            choice = by_index.setdefault(raw.get("index", -1), Choice(raw.get("index", -1)))
            choice.text += ((raw.get("delta") or {}).get("content") or "") if chat else raw.get("text") or ""
            if raw.get("finish_reason") is not None:
                choice.finish_reason, choice.stop_reason = raw["finish_reason"], raw.get("stop_reason")
            if raw.get("token_ids") is not None:
                choice.token_ids = (choice.token_ids or []) + list(raw["token_ids"])
            _take_logprobs(choice, raw.get("logprobs"), chat)
    answer.choices = [by_index[i] for i in sorted(by_index)]
    return answer


# --- the request's asks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """What a request asks of its answer, read once from its body."""

    chat: bool
    body: dict[str, Any]

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)

    @property
    def echo(self) -> bool:
        return not self.chat and bool(self.body.get("echo"))

    @property
    def stops(self) -> list[str]:
        stop = self.body.get("stop") or []
        return [stop] if isinstance(stop, str) else list(stop)

    @property
    def max_tokens(self) -> int | None:
        value = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        return value if value is not None else (None if self.chat else COMPLETIONS_MAX_TOKENS)

    def constraint(self) -> tuple[str, Any] | None:
        """("choice", [...]) | ("regex", pattern) | ("json", schema or None for any object)."""
        so = self.body.get("structured_outputs") or {}
        for kind in ("choice", "regex"):
            if so.get(kind) is not None:
                return kind, so[kind]
        if so.get("json") is not None:
            schema = so["json"]
            return "json", json.loads(schema) if isinstance(schema, str) else schema
        if so.get("json_object"):
            return "json", None
        rf = self.body.get("response_format") or {}
        if rf.get("type") == "json_object":
            return "json", None
        if rf.get("type") == "json_schema":
            return "json", (rf.get("json_schema") or {}).get("schema") or {}
        return None

    def ended_early(self, choice: Choice) -> bool:
        """Cut by its length or by one of the request's own stops, where a grammar need not be done."""
        if choice.finish_reason == "length":
            return True
        reason = choice.stop_reason
        return reason is not None and (reason in self.stops or reason in (self.body.get("stop_token_ids") or []))


# --- the checks ---------------------------------------------------------------------------------


def _prompt_text(asked: Asked, tokenizer: Tokenizer | None) -> str | None:
    """The prompt as an echo shows it: its text, or its ids decoded; None where it cannot be told.
    vLLM echoes the prompt as sent, ``truncate_prompt_tokens`` or not (seen: the whole prompt)."""
    prompt = asked.body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt) and tokenizer is not None:
        return tokenizer.decode(prompt)
    return None


def _after_echo(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> str | None:
    """The choice's text after an echoed prompt; None where the echoed prompt cannot be told apart."""
    if not asked.echo:
        return choice.text
    prompt = _prompt_text(asked, tokenizer)
    if prompt is None or not choice.text.startswith(prompt):
        return None
    return choice.text[len(prompt) :]


def _prompt_tail(asked: Asked, text: str, tokenizer: Tokenizer | None) -> str | None:
    """The text of a token-id prompt that ends inside a character (the prompt as the engine got it:
    ``truncate_prompt_tokens`` keeps its last ids), where it begins ``text``, the answer's text
    after any echo: text the model did not generate."""
    prompt = asked.body.get("prompt")
    if asked.chat or tokenizer is None or not isinstance(prompt, list):
        return None
    if not prompt or not all(isinstance(i, int) for i in prompt):
        return None
    keep = asked.body.get("truncate_prompt_tokens")
    ids = prompt[-keep:] if isinstance(keep, int) and keep > 0 else prompt
    tail = tokenizer.decode(ids, skip_special_tokens=asked.body.get("skip_special_tokens", True))
    return tail if tail.endswith("\ufffd") and text.startswith(tail) else None


def generated_text(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> str | None:
    """The text the model generated: an echoed prompt, a prompt's own text in front of it and a kept
    stop string stripped; None where the echoed prompt cannot be told apart."""
    text = _after_echo(asked, choice, tokenizer)
    if text is None:
        return None
    tail = _prompt_tail(asked, text, tokenizer)
    if tail is not None:
        text = text[len(tail) :]
    if asked.body.get("include_stop_str_in_output") and choice.finish_reason == "stop":
        kept = _kept_stop(asked, choice, tokenizer)
        if kept and text.endswith(kept):
            text = text[: len(text) - len(kept)]
    return text


def _kept_stop(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> str | None:
    """What ``include_stop_str_in_output`` appended: the stop string, or the text of the stop id or
    of the end-of-text token that ended the choice (its name, with ``skip_special_tokens`` false)."""
    reason = choice.stop_reason
    if isinstance(reason, str):
        return reason
    if tokenizer is None:
        return None
    if isinstance(reason, int):
        return tokenizer.decode([reason])
    if choice.token_ids:
        return tokenizer.decode(choice.token_ids[-1:])
    return getattr(tokenizer, "eos_token", None)


def check_indices(asked: Asked, answer: Answer) -> list[str]:
    indices = [c.index for c in answer.choices]
    if answer.repeated:
        return [f"choice index {answer.repeated[0]} twice"]
    if sorted(indices) != list(range(asked.n)):
        return [f"choices {sorted(indices)} for n={asked.n}"]
    return []


def check_constraint(asked: Asked, choice: Choice, generated: str) -> list[str]:
    constraint = asked.constraint()
    if constraint is None:
        return []
    kind, spec = constraint
    early = asked.ended_early(choice)
    where = f"choice {choice.index} ({choice.finish_reason}, stop_reason {choice.stop_reason!r})"
    if kind == "choice":
        fits = any(c.startswith(generated) for c in spec) if early else generated in spec
        return [] if fits else [f"{where}: {generated[:80]!r} is not {'a prefix of ' if early else ''}one of {spec}"]
    if kind == "regex":
        if regex.fullmatch(spec, generated, partial=early) is None:
            return [f"{where}: {generated[:80]!r} does not {'begin a ' if early else ''}match {spec!r}"]
        return []
    try:
        value = json.loads(generated)
    except ValueError as exc:
        if not early:
            return [f"{where}: not JSON ({exc}): {generated[:80]!r}"]
        if generated.strip() and not generated.lstrip().startswith("{"):
            return [f"{where}: cut short, and not the start of a JSON object: {generated[:80]!r}"]
        return []
    if spec is None:
        return [] if isinstance(value, dict) else [f"{where}: JSON but not an object: {generated[:80]!r}"]
    try:
        jsonschema.validate(value, spec)
    except jsonschema.ValidationError as exc:
        return [f"{where}: not valid against the schema ({exc.message}): {generated[:80]!r}"]
    return []


def _generated_count(asked: Asked, choice: Choice) -> int | None:
    """How many tokens the choice generated: its returned ids, else its logprob entries (less an
    echoed prompt, whose entries come first); None where the answer does not say."""
    if choice.token_ids is not None:
        return len(choice.token_ids)
    if choice.tokens is not None and not asked.echo:
        return len(choice.tokens)
    return None


def check_lengths(asked: Asked, choice: Choice) -> list[str]:
    count = _generated_count(asked, choice)
    if count is None:
        return []
    out = []
    limit = asked.max_tokens
    if limit is not None and count > limit:
        out.append(f"choice {choice.index}: {count} tokens, max_tokens {limit}")
    least = int(asked.body.get("min_tokens") or 0)
    grammar_ended = asked.constraint() is not None and choice.finish_reason == "stop"
    if count < least and not grammar_ended:
        out.append(f"choice {choice.index}: {count} tokens, min_tokens {least} ({choice.finish_reason})")
    return out


def _boundary(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> int | None:
    """How many characters of the generated text the first ``min_tokens`` tokens made, before which
    vLLM does not look for a stop string; None where that cannot be told."""
    least = int(asked.body.get("min_tokens") or 0)
    if least == 0:
        return 0
    if choice.token_ids is not None and tokenizer is not None:
        return len(tokenizer.decode(choice.token_ids[:least]))
    if choice.tokens is not None and not asked.echo and not asked.body.get("return_tokens_as_token_ids"):
        return sum(len(t or "") for t in choice.tokens[:least])
    return None


def check_stop_strings(asked: Asked, choice: Choice, generated: str, tokenizer: Tokenizer | None) -> list[str]:
    if not asked.stops or asked.body.get("include_stop_str_in_output"):
        return []
    boundary = _boundary(asked, choice, tokenizer)
    if boundary is None:
        return []
    for stop in asked.stops:
        at = generated.find(stop)
        while at != -1:
            if at + len(stop) > boundary:
                return [f"choice {choice.index}: stop string {stop!r} in the text at {at}: {generated[:80]!r}"]
            at = generated.find(stop, at + 1)
    return []


def check_echo(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> list[str]:
    if not asked.echo:
        return []
    prompt = _prompt_text(asked, tokenizer)
    if prompt is None or "\ufffd" in prompt:  # ids that decode to no whole character are not checked
        return []
    return [] if choice.text.startswith(prompt) else [f"choice {choice.index}: echo without the prompt {prompt!r}"]


def check_prompt_tail(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> list[str]:
    text = _after_echo(asked, choice, tokenizer)
    tail = None if text is None else _prompt_tail(asked, text, tokenizer)
    if tail is None:
        return []
    where = "after the echoed prompt, " if asked.echo else ""
    return [f"choice {choice.index}: {where}the text begins with the prompt's own text {tail!r}"]


def check_usage(asked: Asked, answer: Answer) -> list[str]:
    """A stream has usage only with ``stream_options.include_usage``; ``completion_tokens`` sums
    every choice, where each says its count."""
    wanted = not answer.streamed or bool((asked.body.get("stream_options") or {}).get("include_usage"))
    if wanted != bool(answer.usage):
        return [
            f"usage {'missing' if wanted else 'sent'} (stream {answer.streamed}, {asked.body.get('stream_options')})"
        ]
    counts = [_generated_count(asked, c) for c in answer.choices]
    if answer.usage and counts and None not in counts:
        told = answer.usage.get("completion_tokens")
        if told != sum(c for c in counts if c is not None):
            return [f"usage.completion_tokens {told}, the choices' tokens {counts}"]
    return []


def _bad_value(value: Any) -> bool:
    return not isinstance(value, (int, float)) or not math.isfinite(value) or value > LOGPROB_SLACK


def check_logprobs(asked: Asked, choice: Choice) -> list[str]:
    where = f"choice {choice.index}"
    if asked.chat:
        k = int(asked.body.get("top_logprobs") or 0) if asked.body.get("logprobs") else None
    else:
        k = asked.body.get("logprobs")
    if k is None or choice.tokens is None:
        return []
    for i, (token, value, top) in enumerate(zip(choice.tokens, choice.logprobs, choice.top)):
        first_echoed = asked.echo and i == 0
        if value is None and first_echoed:
            continue
        if _bad_value(value):
            return [f"{where}: token {i} ({token!r}): logprob {value!r}"]
        entries = [(t.get("token"), t.get("logprob")) for t in top or []] if asked.chat else list((top or {}).items())
        if any(_bad_value(v) for _, v in entries):
            return [f"{where}: token {i}: an alternative's logprob is not finite and at most 0: {entries}"]
        most = k if asked.chat else k + 1  # completions add the sampled token to the k best
        if len(entries) > most:
            return [f"{where}: token {i}: {len(entries)} alternatives, {k} asked"]
        if (not asked.chat or k >= 1) and token not in {t for t, _ in entries}:
            return [f"{where}: token {i}: the sampled {token!r} not among its alternatives {entries}"]
    return []


def check_prompt_logprobs(asked: Asked, prompt_logprobs: list[Any] | None, where: str) -> list[str]:
    k = asked.body.get("prompt_logprobs")
    if k is None:
        return []
    if not prompt_logprobs:
        return [f"{where}: prompt_logprobs {k} asked, none returned"]
    if prompt_logprobs[0] is not None:
        return [f"{where}: the first prompt position has logprobs {prompt_logprobs[0]}"]
    for i, entry in enumerate(prompt_logprobs[1:], 1):
        values = [e.get("logprob") if isinstance(e, dict) else e for e in (entry or {}).values()]
        if not values or any(_bad_value(v) for v in values):
            return [f"{where}: prompt position {i}: {entry}"]
    return []


def _contains(ids: list[int], seq: list[int]) -> bool:
    return bool(seq) and any(ids[i : i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def check_token_ids(asked: Asked, choice: Choice, tokenizer: Tokenizer | None) -> list[str]:
    ids = choice.token_ids
    if ids is None:
        return []
    allowed = asked.body.get("allowed_token_ids")
    if allowed:
        outside = [i for i in ids if i not in set(allowed)]
        if outside:
            return [f"choice {choice.index}: ids {outside[:5]} outside allowed_token_ids {allowed}"]
    if tokenizer is not None:
        for word in asked.body.get("bad_words") or []:
            for form in (word, " " + word.lstrip()):
                seq = tokenizer.encode(form, add_special_tokens=False)
                if _contains(ids, seq):
                    return [f"choice {choice.index}: bad word {word!r} ({form!r} = ids {seq}) among {ids}"]
    return []


def violations(endpoint: str, body: dict[str, Any], answer: Answer, tokenizer: Tokenizer | None = None) -> list[str]:
    """What the answer breaks of what ``body`` asked; [] for a right answer."""
    asked = Asked(endpoint.endswith("/chat/completions"), body)
    found = check_indices(asked, answer) + check_usage(asked, answer)
    if asked.chat:
        found += check_prompt_logprobs(asked, answer.prompt_logprobs, "the answer")
    for choice in answer.choices:
        found += check_echo(asked, choice, tokenizer)
        found += check_prompt_tail(asked, choice, tokenizer)
        found += check_lengths(asked, choice)
        found += check_logprobs(asked, choice)
        if not asked.chat:
            found += check_prompt_logprobs(asked, choice.prompt_logprobs, f"choice {choice.index}")
        found += check_token_ids(asked, choice, tokenizer)
        generated = generated_text(asked, choice, tokenizer)
        if generated is not None:
            found += check_constraint(asked, choice, generated)
            found += check_stop_strings(asked, choice, generated, tokenizer)
    return found


def seeded(body: dict[str, Any]) -> bool:
    """Whether a request promises the same text for the same seed: a seed, sampled at a temperature
    (vLLM's default is 1; at 0 every request is greedy, seed or not)."""
    return body.get("seed") is not None and body.get("temperature", 1.0) != 0


def repeatable(first: Answer, again: Answer) -> list[str]:
    """What differs between two answers to the same seeded request, each sent alone."""
    texts = [{c.index: c.text for c in answer.choices} for answer in (first, again)]
    if texts[0] == texts[1]:
        return []
    return [f"seed: sent again alone, the texts differ: {texts[0]} then {texts[1]}"[:400]]
