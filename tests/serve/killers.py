"""The ordinary requests that end or fail a stock vLLM 0.26.0 server (vLLM #54195, #53665), as the
serve tier sends them: their bodies, and a POST that returns the status and body whatever they are."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from server import Server

VOCAB = 1024  # make_model.py's config; its tokenizer has fewer tokens
BAD_ID = 5_000_000
STOP_ID = {"max_tokens": 8, "min_tokens": 4, "stop_token_ids": [BAD_ID]}
CHOICE = {
    "prompt": "answer yes or no:",
    "max_tokens": 16,
    "min_tokens": 6,
    "temperature": 0,
    "structured_outputs": {"choice": ["yes", "no"]},
}
# JSON bodies that are not objects (Schemathesis's finds, issue 46), and the JSON endpoints they reach
NOT_OBJECTS: list[Any] = [[None, None], "AAA", 0, False]
OBJECT_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/tokenize")
# the engine's line when the grammar rejects the token sampled from an all -inf row
GRAMMAR = re.compile(r"grammar rejected tokens \[\d+\] for request \S+\. Terminating request\.")


def post(server: Server, path: str, payload: Any, timeout: float = 120) -> tuple[int | None, str]:
    """(status, body) of a POST; status None when nothing answers (the server is gone)."""
    request = urllib.request.Request(
        server.url(path), data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return None, str(exc)


def health(server: Server) -> int | None:
    """``/health``'s status code; None when nothing answers (the server is gone)."""
    try:
        with urllib.request.urlopen(server.url("/health"), timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def stop_id_requests(model: Path) -> dict[str, dict]:
    """The same out-of-vocabulary stop id, with min_tokens, on three endpoints."""
    return {
        "/v1/completions": {"model": str(model), "prompt": "hello there", **STOP_ID},
        "/v1/chat/completions": {"model": str(model), "messages": [{"role": "user", "content": "hello"}], **STOP_ID},
        "/inference/v1/generate": {"token_ids": [5, 6, 7], "sampling_params": STOP_ID},
    }


def assert_refused(status: int | None, body: str) -> None:
    """A 400 naming the parameter, the id and the vocabulary's size."""
    assert status == 400, (status, body)
    assert "stop_token_ids" in body and str(BAD_ID) in body and str(VOCAB) in body, body


def choice_answer(server: Server, model: Path) -> tuple[int | None, str]:
    """(status, the answer's text) of min_tokens with a choice the grammar can end before it."""
    status, body = post(server, "/v1/completions", {"model": str(model), **CHOICE})
    if status != 200:
        return status, body
    return status, json.loads(body)["choices"][0]["text"]


def not_object_answers(server: Server) -> dict[str, list[int | None]]:
    """The status of each body of NOT_OBJECTS on each of OBJECT_ROUTES; each answer that is not a
    500 must say what the body should be."""
    out: dict[str, list[int | None]] = {}
    for route in OBJECT_ROUTES:
        for body in NOT_OBJECTS:
            status, text = post(server, route, body)
            assert status == 500 or "JSON object" in text, (route, body, status, text)
            out.setdefault(route, []).append(status)
    return out
