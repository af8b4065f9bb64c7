"""A recipe's ``verify`` section: the page's "Verified" and "Performance" tables as checks that
``fixpack recipe accept`` runs against a live server. The one reader of the format (the recipe
reader hands it the section; every mapping's keys go through :mod:`.schema`, an unknown one refused
with a did-you-mean at its own line).

A check sends OpenAI-compatible requests (chat or completions bodies as the API takes them, vLLM's
extensions included) and says what must hold with one predicate of a closed set; what a predicate
takes goes in its ``expect`` mapping. ``fixes`` are the fixes whose ``why`` (their fix.toml) the
check exercises; a page row is named by ``row`` (the table's first column, word for word) and
``result`` (its second); a check with no ``row`` is not on the page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import schema

__all__ = ["Check", "Verify", "PREDICATES", "TABLES", "read_verify"]

Where = tuple[str | int, ...]
Fail = Callable[[Where, str], UsageError]

TABLES = ("verified", "performance")
APIS = ("chat", "completions")
MEASURES = ("tokens_per_s", "aggregate_tokens_per_s", "seconds_to_answer")

# predicate -> (its expect keys, the ones required)
PREDICATES: dict[str, tuple[set[str], set[str]]] = {
    # each answer (content, not reasoning) contains (or equals) its expected text; in_flight at once
    "known-answer": ({"answers", "match", "in_flight"}, {"answers"}),
    # a haystack of each size (tokens: one or a list) generated from a seed with a number at each
    # depth, sent cold ({haystack} in the request, a fresh salt for {salt}); the answer names it
    "needle": ({"tokens", "depths", "seed"}, {"tokens", "depths"}),
    # the answer parses as JSON and is valid against the request's response_format schema
    "json-schema": (set(), set()),
    # n entries on every generated token (top_logprobs) or every prompt position but the first
    "logprob-entries": ({"field", "n"}, {"field", "n"}),
    # a token (id, or a text the server's /tokenize makes one id) generated (every: at every position)
    "token-present": ({"token", "every"}, {"token"}),
    # each request sent twice (cache_salt '{salt}' is a fresh salt per request, the same for both
    # runs, so the second hits what the first cached): same text, logprobs within tolerance
    "identical-runs": ({"tolerance", "cached_multiple"}, set()),
    # every request answered alone, then all at once (in_flight): the same text and logprobs
    "concurrent-equals-solo": ({"in_flight", "tolerance"}, {"in_flight"}),
    # each (seeded, sampled) request sent twice: the same text
    "seeded-repeatable": ({"tolerance"}, set()),
    # a valid call of the named tool, arguments JSON with these values (streamed ones assembled)
    "tool-call": ({"name", "arguments"}, {"name"}),
    # requests[0] alone, then again beside requests[1:] (streamed; the 2nd, 3rd, ... start after the
    # 1st one's first token; requests[0] goes once the 1st has finished, or once all have started)
    "mixed-equals-solo": ({"probe_after", "tolerance"}, {"probe_after"}),
    # every request answered (HTTP 200, its logprobs present) and the server healthy afterwards
    "answered": (set(), set()),
    # every request refused with HTTP status, its message naming each of mentions; healthy afterwards
    "refused": ({"status", "mentions"}, {"status"}),
    # /health answers 200 and /v1/models lists the model
    "server-healthy": (set(), set()),
    # a figure measured against the page's: tokens/s at least figure*(1-tolerance), seconds at
    # most the figure's upper end*(1+tolerance)
    "performance": ({"measure", "figure", "tolerance", "in_flight", "tokens"}, {"measure", "figure", "tolerance"}),
}
CHECK_KEYS = {
    "id",
    "row",
    "result",
    "table",
    "api",
    "requests",
    "repeat",
    "predicate",
    "expect",
    "fixes",
    "note",
    "healthy_after",
    "timeout_s",
}
VERIFY_KEYS = {"max_tokens", "timeout_s", "max_requests", "checks"}


@dataclass(frozen=True)
class Check:
    id: str
    predicate: str
    api: str  # chat | completions
    requests: tuple[dict[str, Any], ...]  # bodies without "model" (the server's model is added)
    expect: dict[str, Any]
    fixes: tuple[str, ...]  # the fixes whose why this check exercises
    note: str  # what it stands for where the page gives no prompt, and why these fixes
    row: str | None  # the page's row (None: not on the page)
    result: str | None  # the page's result column
    table: str  # verified | performance
    repeat: int  # each request sent this many times
    healthy_after: bool  # /health must answer 200 after the check
    timeout_s: float | None  # per request, over the section's


@dataclass(frozen=True)
class Verify:
    max_tokens: int  # the budget a request gets when it names none (the page's "real token budget")
    timeout_s: float  # per request
    max_requests: int  # the most requests one accept run may send
    checks: tuple[Check, ...]

    def by_id(self) -> dict[str, Check]:
        return {c.id: c for c in self.checks}


def _keys(value: dict, where: Where, known: set[str], fail: Fail) -> None:
    name = ".".join(str(w) for w in where)
    schema.check(value, known, name, lambda key, message: fail((*where, key), message))


def _mapping(value: Any, where: Where, fail: Fail) -> dict:
    if not isinstance(value, dict):
        raise fail(where, f"{'.'.join(map(str, where))} must be a mapping")
    return value


def _positive(value: Any, where: Where, fail: Fail, number: type = int) -> Any:
    ok = isinstance(value, (int, float) if number is float else int) and not isinstance(value, bool) and value > 0
    if not ok:
        what = "a positive number" if number is float else "a positive integer"
        raise fail(where, f"{'.'.join(map(str, where))} must be {what}")
    return value


def _text(value: Any, where: Where, fail: Fail) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(where, f"{'.'.join(map(str, where))} must be a non-empty string")
    return " ".join(value.split())


def read_verify(value: Any, fail: Fail) -> Verify:
    """The ``verify`` section of a recipe, each part checked (``fail(where, message)`` makes the
    error at that part's line)."""
    top = _mapping(value, ("verify",), fail)
    _keys(top, ("verify",), VERIFY_KEYS, fail)
    if "checks" not in top:
        raise fail(("verify",), "verify has no 'checks'")
    items = top["checks"]
    if not isinstance(items, list) or not items:
        raise fail(("verify", "checks"), "verify.checks must be a non-empty list")
    checks = [_check(item, ("verify", "checks", i), fail) for i, item in enumerate(items)]
    seen: set[str] = set()
    for i, c in enumerate(checks):
        if c.id in seen:
            raise fail(("verify", "checks", i, "id"), f"check id {c.id!r} is given twice")
        seen.add(c.id)
    return Verify(
        max_tokens=_positive(top.get("max_tokens", 1024), ("verify", "max_tokens"), fail),
        timeout_s=float(_positive(top.get("timeout_s", 300), ("verify", "timeout_s"), fail, float)),
        max_requests=_positive(top.get("max_requests", 500), ("verify", "max_requests"), fail),
        checks=tuple(checks),
    )


def _check(item: Any, where: Where, fail: Fail) -> Check:
    c = _mapping(item, where, fail)
    _keys(c, where, CHECK_KEYS, fail)
    for key in ("id", "predicate", "fixes", "note"):
        if key not in c:
            raise fail(where, f"{'.'.join(map(str, where))} has no {key!r}")
    cid = _text(c["id"], (*where, "id"), fail)
    predicate = c["predicate"]
    if predicate not in PREDICATES:
        raise fail((*where, "predicate"), schema.unknown(str(predicate), "the predicates", PREDICATES))
    known, required = PREDICATES[predicate]
    expect = _mapping(c.get("expect", {}), (*where, "expect"), fail)
    _keys(expect, (*where, "expect"), known, fail)
    for key in sorted(required - set(expect)):
        raise fail((*where, "expect"), f"check {cid}: predicate {predicate} needs expect.{key}")
    api = c.get("api", "chat")
    if api not in APIS:
        raise fail((*where, "api"), f"check {cid}: api must be one of {', '.join(APIS)}")
    table = c.get("table", "verified")
    if table not in TABLES:
        raise fail((*where, "table"), f"check {cid}: table must be one of {', '.join(TABLES)}")
    requests = c.get("requests", [])
    if not isinstance(requests, list) or not all(isinstance(r, dict) for r in requests):
        raise fail((*where, "requests"), f"check {cid}: requests must be a list of request bodies (mappings)")
    if predicate != "server-healthy" and not requests:
        raise fail((*where, "requests"), f"check {cid}: predicate {predicate} needs at least one request")
    for i, body in enumerate(requests):
        if "model" in body:
            raise fail((*where, "requests", i, "model"), f"check {cid}: the model is the server's; leave it out")
        need = "messages" if api == "chat" else "prompt"
        if need not in body:
            raise fail((*where, "requests", i), f"check {cid}: a {api} request needs {need!r}")
    fixes = c["fixes"]
    if not isinstance(fixes, list) or not all(isinstance(f, str) and f for f in fixes):
        raise fail((*where, "fixes"), f"check {cid}: fixes must be a list of fix ids (may be empty)")
    row, result = c.get("row"), c.get("result")
    if (row is None) != (result is None):
        raise fail(where, f"check {cid}: a page row needs both row and result")
    _expect(cid, predicate, expect, len(requests), (*where, "expect"), fail)
    return Check(
        id=cid,
        predicate=predicate,
        api=api,
        requests=tuple(requests),
        expect=dict(expect),
        fixes=tuple(fixes),
        note=_text(c["note"], (*where, "note"), fail),
        row=None if row is None else _text(row, (*where, "row"), fail),
        result=None if result is None else _text(result, (*where, "result"), fail),
        table=table,
        repeat=_positive(c.get("repeat", 1), (*where, "repeat"), fail),
        healthy_after=_bool(c.get("healthy_after", False), (*where, "healthy_after"), fail),
        timeout_s=None
        if "timeout_s" not in c
        else float(_positive(c["timeout_s"], (*where, "timeout_s"), fail, float)),
    )


def _bool(value: Any, where: Where, fail: Fail) -> bool:
    if not isinstance(value, bool):
        raise fail(where, f"{'.'.join(map(str, where))} must be true or false")
    return value


def _expect(cid: str, predicate: str, e: dict, n_requests: int, where: Where, fail: Fail) -> None:
    """The values of a predicate's ``expect``."""
    if "answers" in e and (not isinstance(e["answers"], list) or len(e["answers"]) != n_requests):
        raise fail((*where, "answers"), f"check {cid}: expect.answers needs one answer per request ({n_requests})")
    if e.get("match", "contains") not in ("contains", "equals"):
        raise fail((*where, "match"), f"check {cid}: expect.match is contains or equals")
    for key in ("in_flight", "n", "seed", "cached_multiple"):
        if key in e:
            _positive(e[key], (*where, key), fail)
    if "tokens" in e:  # one prompt size, or several (a needle at each depth of each)
        sizes = e["tokens"] if isinstance(e["tokens"], list) and e["tokens"] else [e["tokens"]]
        for i, size in enumerate(sizes):
            _positive(size, (*where, "tokens", i) if isinstance(e["tokens"], list) else (*where, "tokens"), fail)
    if "tolerance" in e and (isinstance(e["tolerance"], bool) or not isinstance(e["tolerance"], (int, float))):
        raise fail((*where, "tolerance"), f"check {cid}: expect.tolerance must be a number")
    if "field" in e and e["field"] not in ("top_logprobs", "prompt_logprobs"):
        raise fail((*where, "field"), f"check {cid}: expect.field is top_logprobs or prompt_logprobs")
    if "depths" in e and (
        not isinstance(e["depths"], list)
        or not e["depths"]
        or not all(isinstance(d, (int, float)) and 0 <= d <= 1 for d in e["depths"])
    ):
        raise fail((*where, "depths"), f"check {cid}: expect.depths must be fractions between 0 and 1")
    if "token" in e and (isinstance(e["token"], bool) or not isinstance(e["token"], (int, str))):
        raise fail((*where, "token"), f"check {cid}: expect.token is a token id or a text")
    if "status" in e and (
        isinstance(e["status"], bool) or not isinstance(e["status"], int) or not 400 <= e["status"] < 500
    ):
        raise fail((*where, "status"), f"check {cid}: expect.status is a client error's HTTP status (4xx)")
    if "mentions" in e and (not isinstance(e["mentions"], list) or not all(isinstance(m, str) for m in e["mentions"])):
        raise fail((*where, "mentions"), f"check {cid}: expect.mentions is a list of texts")
    if "probe_after" in e and e["probe_after"] not in ("finish", "started"):
        raise fail((*where, "probe_after"), f"check {cid}: expect.probe_after is finish or started")
    if predicate == "mixed-equals-solo" and n_requests < 2:
        raise fail(where, f"check {cid}: mixed-equals-solo needs the probe and at least one neighbour")
    if "measure" in e and e["measure"] not in MEASURES:
        raise fail((*where, "measure"), f"check {cid}: expect.measure is one of {', '.join(MEASURES)}")
    if "figure" in e:
        figure = e["figure"]
        span = figure if isinstance(figure, list) else [figure]
        if not span or len(span) > 2 or not all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in span):
            raise fail((*where, "figure"), f"check {cid}: expect.figure is a number or [low, high]")
