"""The failures the pack leaves, named by what failed (issues 46 and 55): ``LISTED``, each with its
vLLM issue, and ``listed``, which says which of them a failed request is.

Apart from ``fuzz_requests.py`` on purpose: Hypothesis draws the literals of the module it runs in,
so an edit to this list would move every seed's requests.
"""

from __future__ import annotations

from typing import Any

from bench.fuzz_requests import Model, Verdict

__all__ = ["LISTED", "listed", "stop_id_killer"]

# The failures the pack leaves, each listed in docs/performance.md with its replay files and vLLM issues:
# its description, and the verdicts it can be (a listed shape that fails some other way is not listed).
LISTED = {
    "grammar-without-token": (
        "an output constraint (structured_outputs, response_format) whose grammar the request's other "
        "settings leave no token or whose end they ignore (allowed_token_ids, bad_words, logit_bias, "
        "stop ids under min_tokens, ignore_eos): the engine samples a token the grammar rejects and "
        "fails the request; vLLM #53665's wider case, of which upstream's #54218 fixes only min_tokens",
        ("5xx", "stream-error"),
    ),
    "echo-stream-prompt-logprobs": (
        "a streamed completion with echo and logprobs (seen with n 1 and 2): an error event, KeyError in "
        "_create_completion_logprobs, the prompt's token ids met with logprobs that do not hold them. The "
        "cause is not established; vLLM #2703 is this combination's issue (closed, a regression reported "
        "there since), vllm-project/vllm-metal#680 the same KeyError from prompt logprobs never filled",
        ("stream-error",),
    ),
    "detokenizer-prompt-tail": (
        "a token-id prompt that ends inside a UTF-8 sequence: the incremental detokenizer, primed with the "
        "prompt's ids, puts the prompt's last characters (U+FFFD for the unfinished one) in front of the "
        "generated text, so a constrained answer is not its constraint's; the token ids are right. vLLM "
        "#48853 (open)",
        ("violation",),
    ),
    "echo-with-token-ids": (
        "a completion with echo and return_token_ids: the prompt is not detokenized, and the text comes "
        "back without it. vLLM #57996 (open; PR #58007)",
        ("violation",),
    ),
}


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


def listed(body: dict[str, Any], verdict: Verdict) -> str | None:
    """The listed failure (a key of LISTED) that this request's failure is, by the request's shape
    and what failed; None for any other: a failure the pack must fix or the docs must list. A hang,
    an unanswered request or a death is never listed."""
    constrained = "structured_outputs" in body or "response_format" in body
    masked = any(body.get(k) for k in ("allowed_token_ids", "bad_words", "logit_bias", "ignore_eos")) or bool(
        body.get("min_tokens") and body.get("stop_token_ids")
    )
    token_prompt = isinstance(body.get("prompt"), list) and all(isinstance(i, int) for i in body["prompt"])
    if verdict.kind == "violation":
        found = _findings(verdict)
        if token_prompt and found and all("\ufffd" in f for f in found):
            return "detokenizer-prompt-tail"
        if body.get("echo") and body.get("return_token_ids") and found and all("echo without" in f for f in found):
            return "echo-with-token-ids"
        return None
    candidates = []
    if constrained and masked:
        candidates.append("grammar-without-token")
    if body.get("stream") and body.get("echo") and body.get("logprobs") is not None:
        candidates.append("echo-stream-prompt-logprobs")
    return next((key for key in candidates if verdict.kind in LISTED[key][1]), None)
