"""The failures the docs list (issues 46 and 55): ``LISTED``, each with its vLLM issue and the fixes of
the pack that remove it, and ``listed``, which says which of them a failed request is, by its
signature: the server's log line that names the request, the exception and where it was raised, or
the oracle's finding. A request of a listed shape that fails another way, a hang, an unanswered
request and a death are never listed. Every listed failure is stock vLLM 0.26.0's: on the patched
server any failure is one the pack has yet to fix.

Apart from ``fuzz_requests.py`` on purpose: Hypothesis draws the literals of the module it runs in,
so an edit to this list would move every seed's requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.fuzz_requests import Model, Verdict

__all__ = ["LISTED", "Listed", "listed", "stop_id_killer"]


@dataclass(frozen=True)
class Listed:
    what: str  # what fails, and why
    issues: tuple[str, ...]  # vLLM's, where one names this cause
    fixed_by: tuple[str, ...]  # the pack's fixes that remove it


LISTED = {
    "grammar-without-token": Listed(
        "an output constraint (structured_outputs, response_format) whose grammar the request's other "
        "settings leave no token (allowed_token_ids, bad_words) or whose end they ignore (ignore_eos): the "
        "engine samples a token the grammar rejects and fails the request with a 500; its log line "
        "'grammar rejected tokens ... for request <the request's id>'",
        ("vllm-project/vllm#53665", "vllm-project/vllm#57986"),
        ("grammar-no-token", "grammar-end-stops", "min-tokens-grammar"),
    ),
    "echo-stream-prompt-logprobs": Listed(
        "a streamed completion with echo, logprobs and n of 2 or more: its error event is a KeyError "
        "raised in _create_completion_logprobs, the prompt's token ids met with logprobs that do not hold "
        "them (the prompt logprobs of one sequence lost when its first output is merged into another's). "
        "No vLLM issue names this cause: #2703 reported the same combination before the V1 engine",
        (),
        ("echo-prompt-logprobs",),
    ),
    "detokenizer-prompt-tail": Listed(
        "a token-id prompt that ends inside a UTF-8 sequence: the incremental detokenizer, primed with the "
        "prompt's ids, puts the prompt's own text (U+FFFD for the unfinished character) in front of the "
        "generated text; the token ids are right",
        ("vllm-project/vllm#48853",),
        ("detokenizer-prompt-tail",),
    ),
    "allowed-ids-masked": Listed(
        "allowed_token_ids that are all stop ids, with min_tokens (which masks the stop ids), and no "
        "output constraint: no token is left to sample, and the engine samples an id outside the list",
        ("vllm-project/vllm#57986",),
        ("allowed-ids-masked",),
    ),
    "echo-with-token-ids": Listed(
        "a completion with echo and return_token_ids: the prompt is not detokenized, or its text is "
        "dropped, and the text comes back without it",
        ("vllm-project/vllm#57996",),
        ("echo-token-ids",),
    ),
}

# the traceback frame of the function that raised the KeyError
_RAISED_IN = re.compile(r'File "[^"]*/vllm/entrypoints/openai/completion/serving\.py", line \d+, in '
                        r"_create_completion_logprobs")  # fmt: skip


def stop_id_killer(body: dict[str, Any], model: Model) -> bool:
    """Whether a request has the shape of vLLM #54195's request-killer, which the pack refuses
    (request-token-ids): ``min_tokens`` with a stop id past the logits' width, and no other id past
    it that vLLM's own validation refuses first (``allowed_token_ids``, ``logit_bias``, the prompt)."""
    if not body.get("min_tokens") or not any(i >= model.vocab for i in body.get("stop_token_ids") or []):
        return False
    prompt = body.get("prompt")
    others = [
        *(body.get("allowed_token_ids") or []),
        *(int(k) for k in body.get("logit_bias") or {}),
        *(prompt if isinstance(prompt, list) else []),
    ]
    return all(i < model.vocab for i in others)


def _findings(verdict: Verdict) -> list[str]:
    return [f for f in verdict.detail.split("; ") if f]


def _stream_error(verdict: Verdict) -> dict[str, Any]:
    try:
        error = json.loads(verdict.detail)
    except ValueError:
        return {}
    return error if isinstance(error, dict) else {}


def listed(body: dict[str, Any], verdict: Verdict, log: Sequence[str] = (), request_id: str = "") -> str | None:
    """The listed failure (a key of LISTED) that this failure is, by its signature; None for any
    other. ``log`` is the server's log while the request's batch ran, ``request_id`` the id the
    fuzzer gave the request (``X-Request-Id``), which vLLM's log lines name."""
    if verdict.kind == "violation":
        found = _findings(verdict)
        if found and all("the text begins with the prompt's own text" in f for f in found):
            return "detokenizer-prompt-tail"
        if body.get("return_token_ids") and found and all("echo without the prompt" in f for f in found):
            return "echo-with-token-ids"
        if found and all("outside allowed_token_ids" in f for f in found) and _stops_only(body):
            return "allowed-ids-masked"
        return None
    if verdict.kind in ("5xx", "stream-error") and request_id:
        mine = [line for line in log if request_id in line]
        if any("grammar rejected tokens" in line for line in mine):
            return "grammar-without-token"
    if verdict.kind == "stream-error" and body.get("echo") and body.get("logprobs") is not None:
        error = _stream_error(verdict)
        key = str(error.get("message", ""))
        if error.get("type") == "InternalServerError" and key.isdigit() and _raised_in(log, f"KeyError: {key}"):
            return "echo-stream-prompt-logprobs"
    return None


def _stops_only(body: dict[str, Any]) -> bool:
    """Whether min_tokens leaves the request no allowed token: every allowed id a stop id, no grammar."""
    allowed, stops = body.get("allowed_token_ids"), set(body.get("stop_token_ids") or ())
    constrained = "structured_outputs" in body or "response_format" in body
    return bool(allowed and body.get("min_tokens") and not constrained and set(allowed) <= stops)


def _raised_in(log: Sequence[str], exception: str) -> bool:
    """Whether a traceback in ``log`` ends with ``exception`` raised in _create_completion_logprobs:
    the last frame before the exception's line is that function's."""
    frame = None
    for line in log:
        if line.lstrip().startswith('File "'):
            frame = line
        elif line.strip() == exception and frame is not None and _RAISED_IN.search(frame):
            return True
    return False
