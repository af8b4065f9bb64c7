"""What a check's answers must show: one function per predicate of the ``verify`` format, over the
answers as :mod:`.accept` normalises them. Pure: answers in, an outcome out (so each predicate is
tested on recorded payloads as well as against a live server)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "Outcome", "from_chat", "from_completion", "answer_text", "compare", "read_usage"]


@dataclass
class Answer:
    """One response, as the predicates read it (a chat or completions answer, streamed or not)."""

    text: str = ""  # the answer: content, never reasoning
    reasoning: str = ""
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[str, float]]] = field(default_factory=list)  # per generated token
    prompt_logprobs: list[Any] | None = None  # as the server sent it (None when absent)
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # {name, arguments}
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    seconds: float = 0.0  # end to end
    error: str | None = None  # the request failed: why (HTTP status and message)


@dataclass
class Outcome:
    ok: bool
    detail: str
    measured: str | None = None  # the figure measured, in the page's words


def answer_text(content: str | None, reasoning: str | None, parser: bool) -> tuple[str, str]:
    """(answer, reasoning): with a reasoning parser the server splits them; a closing ``</think>``
    left in the content (a parser that saw no opening tag) still ends the reasoning."""
    text, thought = content or "", reasoning or ""
    if parser and "</think>" in text:
        before, _, text = text.rpartition("</think>")
        thought = thought + before
    return text.strip(), thought


def from_chat(body: dict[str, Any], parser: bool) -> Answer:
    choice = body["choices"][0]
    message = choice.get("message") or {}
    text, thought = answer_text(
        message.get("content"), message.get("reasoning_content") or message.get("reasoning"), parser
    )
    out = Answer(text=text, reasoning=thought, finish_reason=choice.get("finish_reason"))
    for entry in (choice.get("logprobs") or {}).get("content") or []:
        out.tokens.append(entry["token"])
        out.logprobs.append(entry["logprob"])
        out.top.append([(t["token"], t["logprob"]) for t in entry.get("top_logprobs") or []])
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        out.tool_calls.append({"name": function.get("name") or "", "arguments": function.get("arguments") or ""})
    out.prompt_logprobs = body.get("prompt_logprobs")
    read_usage(out, body.get("usage"))
    return out


def from_completion(body: dict[str, Any]) -> Answer:
    choice = body["choices"][0]
    out = Answer(text=(choice.get("text") or "").strip(), finish_reason=choice.get("finish_reason"))
    logprobs = choice.get("logprobs") or {}
    out.tokens = list(logprobs.get("tokens") or [])
    out.logprobs = [x for x in logprobs.get("token_logprobs") or []]
    out.top = [list((d or {}).items()) for d in logprobs.get("top_logprobs") or []]
    out.prompt_logprobs = choice.get("prompt_logprobs")
    read_usage(out, body.get("usage"))
    return out


def read_usage(out: Answer, usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    out.prompt_tokens = usage.get("prompt_tokens")
    out.completion_tokens = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details") or {}
    out.cached_tokens = details.get("cached_tokens")


def compare(a: Answer, b: Answer, tolerance: float) -> str | None:
    """Why two answers differ (text, tokens, or a logprob beyond ``tolerance``), or None."""
    if a.text != b.text:
        tokens = f" (tokens {_first(a.tokens)} vs {_first(b.tokens)})" if a.tokens or b.tokens else ""
        return f"text {_short(a.text)} vs {_short(b.text)}{tokens}"
    if a.tokens != b.tokens:
        first = next(i for i, (x, y) in enumerate(zip(a.tokens + [""], b.tokens + [""])) if x != y)
        return f"tokens differ from token {first}"
    for i, (x, y) in enumerate(zip(a.logprobs, b.logprobs)):
        if x is None or y is None:
            continue
        if abs(x - y) > tolerance:
            return f"token {i}: logprob {x!r} vs {y!r} (tolerance {tolerance})"
    return None


def _first(tokens: list[str], n: int = 4) -> str:
    return " ".join(t.removeprefix("token_id:") for t in tokens[:n]) + (" ..." if len(tokens) > n else "")


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


# --- the predicates ------------------------------------------------------------------------------


def known_answer(answers: list[Answer], expected: list[str], match: str) -> Outcome:
    good = 0
    misses = []
    for answer, want in zip(answers, expected):
        got = answer.text.lower()
        hit = got == str(want).lower() if match == "equals" else str(want).lower() in got
        good += hit
        if not hit:
            misses.append(f"{_short(str(want))}: got {_short(answer.text)}" + _why_short(answer))
    detail = "; ".join(misses[:3])
    return Outcome(good == len(answers), detail, f"{good}/{len(answers)}")


def _why_short(answer: Answer) -> str:
    if answer.finish_reason == "length" and not answer.text:
        return " (token budget spent before an answer)"
    return ""


def needle(answers: list[Answer], numbers: list[str]) -> Outcome:
    found = sum(n in a.text for a, n in zip(answers, numbers))
    sizes = [a.prompt_tokens for a in answers if a.prompt_tokens]
    size = f" at {min(sizes):,} to {max(sizes):,} tokens" if sizes else ""
    misses = [f"depth {i + 1}: wanted {n}, got {_short(a.text)}" for i, (a, n) in enumerate(zip(answers, numbers))]
    missed = [m for m, a, n in zip(misses, answers, numbers) if n not in a.text]
    return Outcome(found == len(answers), "; ".join(missed[:3]), f"{found}/{len(answers)}{size}")


def json_schema(answers: list[Answer], schemas: list[dict[str, Any]]) -> Outcome:
    import jsonschema  # type: ignore[import-untyped]

    good, why = 0, []
    for answer, schema in zip(answers, schemas):
        try:
            jsonschema.validate(json.loads(answer.text), schema)
        except json.JSONDecodeError as exc:
            why.append(f"not JSON ({exc.msg} at {exc.pos}): {_short(answer.text)}")
        except jsonschema.ValidationError as exc:
            why.append(f"not valid against the schema: {exc.message}")
        else:
            good += 1
    return Outcome(good == len(answers), "; ".join(why[:3]), f"{good}/{len(answers)} valid")


def logprob_entries(answers: list[Answer], where: str, n: int) -> Outcome:
    """``n`` entries per generated token (top_logprobs), or at least ``n`` per prompt position after
    the first (prompt_logprobs: vLLM adds the prompt's own token when it is not among the top n)."""
    counts: list[int] = []
    for answer in answers:
        if where == "top_logprobs":
            if not answer.top:
                return Outcome(False, "no logprobs in the answer", "none")
            counts += [len(t) for t in answer.top]
        else:
            positions = answer.prompt_logprobs
            if not positions:
                return Outcome(False, "no prompt_logprobs in the answer", "none")
            counts += [len(p) for p in positions[1:] if p is not None]
            if any(p is None for p in positions[1:]):
                return Outcome(False, "a prompt position after the first has no logprobs", "missing")
    if not counts:
        return Outcome(False, "no tokens to count", "none")
    lo, hi = min(counts), max(counts)
    spread = f"{lo}" if lo == hi else f"{lo} to {hi}"
    if where == "top_logprobs":
        ok = lo == hi == n
        return Outcome(ok, "" if ok else f"{spread} entries per token, wanted {n}", f"{spread} entries on every token")
    ok = lo >= n and hi <= n + 1
    return Outcome(
        ok, "" if ok else f"{spread} entries per position, wanted {n} (or {n + 1})", f"{spread} per position"
    )


def token_present(answers: list[Answer], token_id: int, every: bool) -> Outcome:
    want = f"token_id:{token_id}"
    good, why = 0, []
    for answer in answers:
        if not answer.tokens:
            why.append("no tokens in the answer (ask for logprobs with return_tokens_as_token_ids)")
            continue
        hits = sum(t == want for t in answer.tokens)
        ok = hits == len(answer.tokens) if every else hits > 0
        good += ok
        if not ok:
            why.append(f"token {token_id} at {hits} of {len(answer.tokens)} positions")
    return Outcome(good == len(answers), "; ".join(why[:3]), f"{good}/{len(answers)}")


def pairs_equal(pairs: list[tuple[Answer, Answer]], tolerance: float, label: str) -> Outcome:
    same, why = 0, []
    for i, (a, b) in enumerate(pairs):
        diff = compare(a, b, tolerance)
        if diff is None:
            same += 1
        else:
            why.append(f"#{i + 1}: {diff}")
    return Outcome(same == len(pairs), "; ".join(why[:3]), f"{same}/{len(pairs)} {label}")


def cached_multiple(warm: list[Answer], multiple: int) -> str | None:
    for i, answer in enumerate(warm):
        if answer.cached_tokens is None:
            return f"#{i + 1}: no cached_tokens in usage (serve with --enable-prompt-tokens-details)"
        if answer.cached_tokens == 0 or answer.cached_tokens % multiple:
            return f"#{i + 1}: {answer.cached_tokens} cached tokens, not a multiple of {multiple}"
    return None


def tool_call(answers: list[Answer], name: str, arguments: dict[str, Any]) -> Outcome:
    good, why = 0, []
    for answer in answers:
        calls = [c for c in answer.tool_calls if c["name"] == name]
        if not calls:
            named = ", ".join(c["name"] for c in answer.tool_calls) or "none"
            why.append(f"no {name} call (calls: {named}; text {_short(answer.text)})")
            continue
        try:
            args = json.loads(calls[0]["arguments"])
        except json.JSONDecodeError:
            why.append(f"arguments not JSON: {_short(calls[0]['arguments'])}")
            continue
        wrong = [
            k
            for k, v in arguments.items()
            if not isinstance(args, dict) or str(v).lower() not in str(args.get(k, "")).lower()
        ]
        if wrong:
            why.append(f"arguments {calls[0]['arguments']} lack {', '.join(wrong)}")
            continue
        good += 1
    return Outcome(good == len(answers), "; ".join(why[:3]), f"{good}/{len(answers)} valid {name} calls")


def answered(answers: list[Answer]) -> Outcome:
    failed = [a.error for a in answers if a.error]
    empty = [a for a in answers if not a.error and not (a.top or a.tokens or a.prompt_logprobs)]
    good = len(answers) - len(failed) - len(empty)
    why = failed[:2] + (["an answer without its logprobs"] if empty else [])
    return Outcome(good == len(answers), "; ".join(str(w) for w in why), f"{good}/{len(answers)} answered")


def refused(answers: list[Answer], status: int, mentions: list[str]) -> Outcome:
    """Each request refused with HTTP ``status``, its message naming each of ``mentions``: a bad
    request is the client's error, not the server's (a 5xx, or an answer, fails)."""
    prefix = f"HTTP {status}: "
    wrong = [a.error or f"answered: {_short(a.text)!r}" for a in answers if not (a.error or "").startswith(prefix)]
    unnamed = [
        a.error for a in answers if a.error and a.error.startswith(prefix) and not all(m in a.error for m in mentions)
    ]
    why = wrong[:1] + [f"the message does not name {', '.join(mentions)}: {m}" for m in unnamed[:1]]
    good = len(answers) - len(wrong) - len(unnamed)
    return Outcome(good == len(answers), "; ".join(str(w) for w in why), f"{good}/{len(answers)} refused with {status}")


def performance(measure: str, value: float, figure: float | list[float], tolerance: float) -> Outcome:
    low, high = (figure[0], figure[-1]) if isinstance(figure, list) else (figure, figure)
    if measure == "seconds_to_answer":
        bound = high * (1 + tolerance)
        return Outcome(
            value <= bound, "" if value <= bound else f"{value:.1f} s, more than {bound:.1f} s", f"{value:.1f} s"
        )
    bound = low * (1 - tolerance)
    shown = f"{value:.1f} tokens/s"
    return Outcome(value >= bound, "" if value >= bound else f"{shown}, less than {bound:.1f}", shown)
