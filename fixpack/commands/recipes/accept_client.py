"""The client of ``fixpack recipe accept``: one server's address, its model, the run's request
budget, and how a request goes out and its answer comes back (the official ``openai`` client, vLLM's
extensions in ``extra_body``; ``/health`` and ``/tokenize`` through the same client; a streamed
answer assembled from its chunks), and the prompts a check generates (a seeded haystack, a fresh
cache salt). Nothing here decides whether a check holds."""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from typing import Any

from ...cookbook.checks import Verify
from ...errors import UsageError
from . import predicates as p
from .predicates import Answer

__all__ = ["Session", "Ticks", "Budget", "haystack", "fill", "salted", "root_url", "HAYSTACK"]

FILLER = (
    "the river runs past the old mill and the stone bridge where the market opens at dawn while "
    "traders count their coins and farmers carry baskets of apples pears and grain into town "
    "children play near the fountain and a dog sleeps under the cart as clouds move slowly east"
).split()
HAYSTACK = re.compile(r"\{haystack:(\d+)\}")
TOKENS_PER_WORD = 1.3  # when the server has no /tokenize to measure the filler with


def root_url(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--url {url!r}: give the server's address, e.g. http://127.0.0.1:8000")
    return url


class Session:
    """The client of one accept run: the URL, the model, the budget, the count of requests."""

    def __init__(self, url: str, model: str, api_key: str, verify: Verify, parser: bool) -> None:
        import openai

        self.openai = openai
        self.root = root_url(url)
        self.model = model
        self.verify = verify
        self.parser = parser
        # trust_env off: no HTTP(S)_PROXY from the environment, so every byte goes to the URL given
        self.http = openai.DefaultHttpxClient(trust_env=False)
        self.api = openai.OpenAI(
            base_url=self.root + "/v1", api_key=api_key, max_retries=0, timeout=verify.timeout_s, http_client=self.http
        )
        self.bare = openai.OpenAI(base_url=self.root, api_key=api_key, max_retries=0, timeout=30, http_client=self.http)
        self.sent = 0
        self.lock = threading.Lock()
        self._ratio: float | None = None

    def spend(self, n: int) -> None:
        with self.lock:
            if self.sent + n > self.verify.max_requests:
                raise Budget(f"the run's budget of {self.verify.max_requests} requests (verify.max_requests) is spent")
            self.sent += n

    def models(self) -> list[str]:
        return [m.id for m in self.api.models.list().data]

    def healthy(self) -> str | None:
        """None when /health answers 200, else why."""
        self.spend(1)
        try:
            self.bare.get("/health", cast_to=object)
        except ValueError:  # 200 with a body that is not JSON: vLLM's is empty
            return None
        except self.openai.APIStatusError as exc:
            return f"/health answered {exc.status_code}"
        except self.openai.APIError as exc:
            return f"/health: {exc}"
        return None

    def tokenize(self, text: str) -> list[int] | None:
        self.spend(1)
        try:
            out = self.bare.post("/tokenize", body={"model": self.model, "prompt": text}, cast_to=object)
        except (self.openai.APIError, ValueError):
            return None
        return list(out["tokens"]) if isinstance(out, dict) and "tokens" in out else None

    def tokens_per_word(self) -> float:
        if self._ratio is None:
            sample = " ".join(FILLER * 20)
            ids = self.tokenize(sample)
            self._ratio = len(ids) / len(FILLER * 20) if ids else TOKENS_PER_WORD
        return self._ratio

    def send(self, api: str, body: dict[str, Any], timeout: float) -> Answer:
        """One request; a failure (HTTP status, timeout, a broken stream) is the answer's error."""
        self.spend(1)
        body = dict(body)
        body.setdefault("max_tokens", self.verify.max_tokens)
        stream = bool(body.pop("stream", False))
        start = time.monotonic()
        try:
            made: Any
            if api == "chat":
                messages = body.pop("messages")
                made = self.api.chat.completions.create(
                    model=self.model, messages=messages, stream=stream, extra_body=body, timeout=timeout
                )
            else:
                prompt = body.pop("prompt")
                made = self.api.completions.create(
                    model=self.model, prompt=prompt, stream=stream, extra_body=body, timeout=timeout
                )
            if stream:
                answer = _assemble(api, made, self.parser, start)
            else:
                data = made.model_dump()
                answer = p.from_chat(data, self.parser) if api == "chat" else p.from_completion(data)
        except self.openai.APIStatusError as exc:
            answer = Answer(error=f"HTTP {exc.status_code}: {str(exc.message)[:200]}")
        except self.openai.APIError as exc:
            answer = Answer(error=f"{type(exc).__name__}: {exc}")
        answer.seconds = time.monotonic() - start
        return answer


class Ticks:
    """The chunks a stream has given so far; waiting for more ends when it ends."""

    def __init__(self) -> None:
        self.count, self.closed = 0, False
        self.cond = threading.Condition()
        self.stop = threading.Event()  # set: the reader closes the stream

    def tick(self) -> None:
        with self.cond:
            self.count += 1
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait_beyond(self, n: int, timeout: float) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.count > n or self.closed, timeout)


class Budget(Exception):
    """The run's request budget is spent."""


def _assemble(api: str, stream: Any, parser: bool, start: float) -> Answer:
    """A streamed answer put together: text, reasoning, logprobs, tool calls by index, usage."""
    content, reasoning = [], []
    calls: dict[int, dict[str, str]] = {}
    out = Answer()
    first: float | None = None
    for chunk in stream:
        data = chunk.model_dump()
        if data.get("usage"):
            p.read_usage(out, data["usage"])
        for choice in data.get("choices") or []:
            if first is None:
                first = time.monotonic() - start
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
            if api == "completions":
                content.append(choice.get("text") or "")
                logprobs = choice.get("logprobs") or {}
                out.tokens += logprobs.get("tokens") or []
                out.logprobs += logprobs.get("token_logprobs") or []
                out.top += [list((d or {}).items()) for d in logprobs.get("top_logprobs") or []]
                continue
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                out.tokens.append(entry["token"])
                out.logprobs.append(entry["logprob"])
                out.top.append([(t["token"], t["logprob"]) for t in entry.get("top_logprobs") or []])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
    text = "".join(content)
    if api == "chat":
        out.text, out.reasoning = p.answer_text(text, "".join(reasoning), parser)
    else:
        out.text = text.strip()
    out.tool_calls = [calls[i] for i in sorted(calls)]
    return out


def haystack(tokens: int, depth: float, seed: int, per_word: float) -> tuple[str, str]:
    """A filler text of about ``tokens`` tokens (``per_word`` tokens a word) from ``seed``, with one
    sentence naming a number at ``depth`` (0 the start, 1 the end): (text, the number)."""
    rng = random.Random(seed)
    number = str(rng.randint(100000, 999999))
    words = max(1, int(tokens / per_word))
    filler = [rng.choice(FILLER) for _ in range(words)]
    at = int(words * depth)
    needle = f". The secret number is {number}. "
    return " ".join(filler[:at]) + needle + " ".join(filler[at:]), number


def fill(value: Any, swaps: dict[str, str]) -> Any:
    """The request with its placeholders (``{haystack}``, ``{salt}``) replaced in every string."""
    if isinstance(value, str):
        for key, text in swaps.items():
            value = value.replace(key, text)
        return value
    if isinstance(value, list):
        return [fill(v, swaps) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, swaps) for k, v in value.items()}
    return value


def salted(body: dict[str, Any]) -> dict[str, Any]:
    """A fresh salt for each ``{salt}``: a cold first run on every accept."""
    return fill(body, {"{salt}": uuid.uuid4().hex})
