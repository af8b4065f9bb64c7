"""A recipe's ``verify`` section: the page's "Verified" and "Performance" tables as checks that
``fixpack recipe accept`` runs against a live server. The one reader of the format (the recipe
reader hands it the section): VERIFY_TABLE and CHECK_TABLE declare its keys, kinds and defaults, and
PREDICATES each predicate's ``expect`` keys, all checked by :mod:`.schema` (an unknown key refused
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
from .schema import FLAG, ITEMS, MAPPING, POSITIVE, POSITIVE_NUMBER, Field, Kind, Table

__all__ = ["Check", "Verify", "PREDICATES", "TABLES", "CHECK_TABLE", "VERIFY_TABLE", "read_verify"]

Where = tuple[str | int, ...]
Fail = Callable[[Where, str], UsageError]

TABLES = ("verified", "performance")
APIS = ("chat", "completions")
MEASURES = ("tokens_per_s", "aggregate_tokens_per_s", "seconds_to_answer")

# A predicate's expect keys (its values are checked in _expect, in words naming the check)
PREDICATES: dict[str, Table] = {
    # each answer (content, not reasoning) contains (or equals) its expected text; in_flight at once
    "known-answer": Table(Field("answers"), Field("match", default=None), Field("in_flight", default=None)),
    # a haystack of each size (tokens: one or a list) generated from a seed with a number at each
    # depth, sent cold ({haystack} in the request, a fresh salt for {salt}); the answer names it
    "needle": Table(Field("tokens"), Field("depths"), Field("seed", default=None)),
    # the answer parses as JSON and is valid against the request's response_format schema
    "json-schema": Table(),
    # n entries on every generated token (top_logprobs) or every prompt position but the first
    "logprob-entries": Table(Field("field"), Field("n")),
    # a token (id, or a text the server's /tokenize makes one id) generated (every: at every position)
    "token-present": Table(Field("token"), Field("every", default=None)),
    # each request sent twice (cache_salt '{salt}' is a fresh salt per request, the same for both
    # runs, so the second hits what the first cached): same text, logprobs within tolerance
    "identical-runs": Table(Field("tolerance", default=None), Field("cached_multiple", default=None)),
    # every request answered alone, then all at once (in_flight): the same text and logprobs
    "concurrent-equals-solo": Table(Field("in_flight"), Field("tolerance", default=None)),
    # each (seeded, sampled) request sent twice: the same text
    "seeded-repeatable": Table(Field("tolerance", default=None)),
    # a valid call of the named tool, arguments JSON with these values (streamed ones assembled)
    "tool-call": Table(Field("name"), Field("arguments", default=None)),
    # requests[0] alone, then again beside requests[1:] (streamed; the 2nd, 3rd, ... start after the
    # 1st one's first token; requests[0] goes once the 1st has finished, or once all have started)
    "mixed-equals-solo": Table(Field("probe_after"), Field("tolerance", default=None)),
    # every request answered (HTTP 200, its logprobs present) and the server healthy afterwards
    "answered": Table(),
    # every request refused with HTTP status, its message naming each of mentions; healthy afterwards
    "refused": Table(Field("status"), Field("mentions", default=None)),
    # /health answers 200 and /v1/models lists the model
    "server-healthy": Table(),
    # a figure measured against the page's: tokens/s at least figure*(1-tolerance), seconds at
    # most the figure's upper end*(1+tolerance)
    "performance": Table(
        Field("measure"),
        Field("figure"),
        Field("tolerance"),
        Field("in_flight", default=None),
        Field("tokens", default=None),
    ),
}
# a check's own words: no "(quote it)", and its text read with its blanks collapsed
_TEXT = Kind("a non-empty string", schema.TEXT.test)
CHECK_TABLE = Table(
    Field("id", _TEXT),
    Field("predicate"),  # one of PREDICATES
    Field("fixes"),  # a list of fix ids, checked in words naming the check
    Field("note", _TEXT),
    Field("row", _TEXT, None),
    Field("result", _TEXT, None),
    Field("table", default="verified"),  # one of TABLES
    Field("api", default="chat"),  # one of APIS
    Field("requests", default=[]),
    Field("repeat", POSITIVE, 1),
    Field("expect", MAPPING, {}),  # its keys are its predicate's
    Field("healthy_after", FLAG, False),
    Field("timeout_s", POSITIVE_NUMBER, None),
)
VERIFY_TABLE = Table(
    Field("max_tokens", POSITIVE, 1024),
    Field("timeout_s", POSITIVE_NUMBER, 300),
    Field("max_requests", POSITIVE, 500),
    Field("checks", ITEMS, entries=CHECK_TABLE),
)


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Verify:
    max_tokens: int  # the budget a request gets when it names none (the page's "real token budget")
    timeout_s: float  # per request
    max_requests: int  # the most requests one accept run may send
    checks: tuple[Check, ...]

    def by_id(self) -> dict[str, Check]:
        return {c.id: c for c in self.checks}


def read_verify(value: Any, fail: Fail) -> Verify:
    """The ``verify`` section of a recipe, checked against VERIFY_TABLE, then each check read
    (``fail(where, message)`` makes the error at that part's line)."""
    top = schema.check(value, VERIFY_TABLE, ("verify",), schema.YAML, fail)
    checks = [_check(c, ("verify", "checks", i), fail) for i, c in enumerate(top["checks"])]
    seen: set[str] = set()
    for i, c in enumerate(checks):
        if c.id in seen:
            raise fail(("verify", "checks", i, "id"), f"check id {c.id!r} is given twice")
        seen.add(c.id)
    return schema.build(Verify, VERIFY_TABLE, top, timeout_s=float(top["timeout_s"]), checks=tuple(checks))


def _check(c: dict[str, Any], where: Where, fail: Fail) -> Check:
    cid = _words(c["id"])
    predicate, api, requests = c["predicate"], c["api"], c["requests"]
    if predicate not in PREDICATES:
        raise fail((*where, "predicate"), schema.unknown(str(predicate), "the predicates", PREDICATES))
    expect = c["expect"]
    schema.check_keys(expect, PREDICATES[predicate], (*where, "expect"), schema.YAML, fail)
    for key in PREDICATES[predicate].required:
        if key not in expect:
            raise fail((*where, "expect"), f"check {cid}: predicate {predicate} needs expect.{key}")
    if api not in APIS:
        raise fail((*where, "api"), f"check {cid}: api must be one of {', '.join(APIS)}")
    if c["table"] not in TABLES:
        raise fail((*where, "table"), f"check {cid}: table must be one of {', '.join(TABLES)}")
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
    if (c["row"] is None) != (c["result"] is None):
        raise fail(where, f"check {cid}: a page row needs both row and result")
    _expect(cid, predicate, expect, len(requests), (*where, "expect"), fail)
    return schema.build(
        Check,
        CHECK_TABLE,
        c,
        id=cid,
        expect=dict(expect),
        note=_words(c["note"]),
        row=None if c["row"] is None else _words(c["row"]),
        result=None if c["result"] is None else _words(c["result"]),
        timeout_s=None if c["timeout_s"] is None else float(c["timeout_s"]),
    )


def _words(text: str) -> str:
    return " ".join(text.split())


def _positive(value: Any, where: Where, fail: Fail) -> None:
    if not POSITIVE.test(value):
        raise fail(where, schema.YAML.wrong(where, POSITIVE))


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
