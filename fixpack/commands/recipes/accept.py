"""``fixpack recipe accept SLUG --url URL``: a recipe's ``verify`` checks against a live server.

Every request goes to the one URL given, through the official ``openai`` client (the ``accept``
extra), vLLM's extensions in ``extra_body``; ``/health`` and ``/tokenize`` through the same client.
Requests are bounded: each by the section's (or the check's) timeout, the run by ``max_requests``
(a check that would pass it fails, saying so). The model is the recipe's (its
``--served-model-name`` when it serves one) or ``--model``; the answer is the content, never the
reasoning, when the recipe serves a reasoning parser; a request that names no ``max_tokens`` gets
the section's budget. Data in, a result out; progress goes to a callback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...cookbook.checks import Check
from ...cookbook.recipes import Recipe
from ...core.names import suggest
from ...errors import EnvironmentProblem, UsageError
from ...extras import install_line
from . import predicates as p
from .accept_client import HAYSTACK, Budget, Session, Ticks, fill, haystack, salted
from .predicates import Answer, Outcome

__all__ = ["accept", "AcceptResult", "CheckResult", "select", "as_json"]


@dataclass
class CheckResult:
    id: str
    ok: bool
    detail: str
    measured: str | None
    row: str | None
    page: str | None  # the page's result
    table: str
    fixes: tuple[str, ...]
    requests: int
    seconds: float


@dataclass
class AcceptResult:
    slug: str
    url: str
    model: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def select(recipe: Recipe, only: tuple[str, ...]) -> list[Check]:
    """The recipe's checks, or those ``only`` names (an unknown id is a usage error)."""
    if recipe.verify is None:
        raise UsageError(f"recipe {recipe.slug} has no verify section: nothing to accept ({recipe.shown})")
    by_id = recipe.verify.by_id()
    for cid in only:
        if cid not in by_id:
            raise UsageError(f"recipe {recipe.slug} has no check {cid!r}{suggest(cid, list(by_id))}")
    return [c for c in recipe.verify.checks if not only or c.id in only]


def served_model(recipe: Recipe) -> str:
    names = [v for o, v in recipe.serve_args if o == "--served-model-name" and v]
    return names[0].split()[0] if names else recipe.serve_model


class Runner:
    """Runs one check: sends its requests as its predicate needs, and judges them."""

    def __init__(self, session: Session, check: Check) -> None:
        self.s, self.c = session, check
        self.timeout = check.timeout_s or session.verify.timeout_s
        self.bodies = [dict(b) for b in check.requests for _ in range(check.repeat)]

    def send(self, body: dict[str, Any]) -> Answer:
        return self.s.send(self.c.api, self.expand(body), self.timeout)

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """``{haystack:N}`` in a request: a seeded filler of about N tokens with a needle halfway."""
        sizes = set(HAYSTACK.findall(json.dumps(body)))
        if not sizes:
            return body
        per_word = self.s.tokens_per_word()
        return fill(body, {f"{{haystack:{n}}}": haystack(int(n), 0.5, int(n), per_word)[0] for n in sizes})

    def at_once(self, bodies: list[dict[str, Any]], width: int) -> list[Answer]:
        with ThreadPoolExecutor(max_workers=max(1, width)) as pool:
            return list(pool.map(self.send, bodies))

    def failed(self, answers: list[Answer]) -> Outcome | None:
        errors = [a.error for a in answers if a.error]
        if errors:
            return Outcome(False, f"{len(errors)} of {len(answers)} requests failed: {errors[0]}", "error")
        return None

    def run(self) -> Outcome:
        e, name = self.c.expect, self.c.predicate.replace("-", "_")
        outcome = getattr(self, name)(e)
        if outcome.ok and self.c.healthy_after:
            why = self.s.healthy()
            if why:
                return Outcome(False, f"unhealthy afterwards: {why}", outcome.measured)
        return outcome

    def known_answer(self, e: dict[str, Any]) -> Outcome:
        width = e.get("in_flight", 1)
        expected = [a for a in e["answers"] for _ in range(self.c.repeat)]
        bodies, wants = self.bodies, expected
        if width > len(bodies):  # the same prompts again until `width` are in flight
            bodies = [bodies[i % len(bodies)] for i in range(width)]
            wants = [expected[i % len(expected)] for i in range(width)]
        answers = self.at_once(bodies, width)
        return self.failed(answers) or p.known_answer(answers, wants, e.get("match", "contains"))

    def needle(self, e: dict[str, Any]) -> Outcome:
        per_word = self.s.tokens_per_word()
        sizes = e["tokens"] if isinstance(e["tokens"], list) else [e["tokens"]]
        bodies, numbers = [], []
        for size in sizes:
            for i, depth in enumerate(e["depths"]):
                text, number = haystack(size, depth, e.get("seed", 0) + i, per_word)
                for body in self.bodies:
                    bodies.append(salted(fill(body, {"{haystack}": text})))
                    numbers.append(number)
        answers = [self.send(b) for b in bodies]
        return self.failed(answers) or p.needle(answers, numbers)

    def json_schema(self, e: dict[str, Any]) -> Outcome:
        schemas = []
        for body in self.bodies:
            fmt = body.get("response_format") or {}
            schemas.append((fmt.get("json_schema") or {}).get("schema") or {})
        answers = [self.send(b) for b in self.bodies]
        return self.failed(answers) or p.json_schema(answers, schemas)

    def logprob_entries(self, e: dict[str, Any]) -> Outcome:
        answers = [self.send(b) for b in self.bodies]
        return self.failed(answers) or p.logprob_entries(answers, e["field"], e["n"])

    def token_present(self, e: dict[str, Any]) -> Outcome:
        token = e["token"]
        if isinstance(token, str):
            ids = self.s.tokenize(token)
            if not ids or len(ids) != 1:
                return Outcome(False, f"{token!r} is not one token on this server ({ids})", "n/a")
            token = ids[0]
        bodies = [fill(b, {"{token}": str(token)}) for b in self.bodies]
        for body in bodies:  # logit_bias keys are token ids as strings
            if "logit_bias" in body:
                body["logit_bias"] = {str(token) if k == "{token}" else k: v for k, v in body["logit_bias"].items()}
        answers = [self.send(b) for b in bodies]
        return self.failed(answers) or p.token_present(answers, int(token), bool(e.get("every", False)))

    def identical_runs(self, e: dict[str, Any]) -> Outcome:
        pairs, warm = [], []
        for body in self.bodies:
            once = salted(body)
            cold = self.send(once)
            hit = self.send(once)
            pairs.append((cold, hit))
            warm.append(hit)
        flat = [a for pair in pairs for a in pair]
        outcome = self.failed(flat) or p.pairs_equal(pairs, float(e.get("tolerance", 0.0)), "identical")
        if outcome.ok and "cached_multiple" in e:
            why = p.cached_multiple(warm, e["cached_multiple"])
            if why:
                return Outcome(False, why, outcome.measured)
        return outcome

    def concurrent_equals_solo(self, e: dict[str, Any]) -> Outcome:
        width = e["in_flight"]
        bodies = [self.bodies[i % len(self.bodies)] for i in range(max(width, len(self.bodies)))]
        solo = [self.send(b) for b in self.bodies]
        together = self.at_once(bodies, width)
        failed = self.failed(solo + together)
        if failed:
            return failed
        pairs = [(solo[i % len(solo)], a) for i, a in enumerate(together)]
        return p.pairs_equal(pairs, float(e.get("tolerance", 0.0)), "equal to their solo answers")

    def seeded_repeatable(self, e: dict[str, Any]) -> Outcome:
        pairs = [(self.send(b), self.send(b)) for b in self.bodies]
        flat = [a for pair in pairs for a in pair]
        return self.failed(flat) or p.pairs_equal(pairs, float(e.get("tolerance", 0.0)), "repeated")

    def tool_call(self, e: dict[str, Any]) -> Outcome:
        answers = [self.send(b) for b in self.bodies]
        return self.failed(answers) or p.tool_call(answers, e["name"], e.get("arguments") or {})

    def answered(self, e: dict[str, Any]) -> Outcome:
        answers = [self.send(b) for b in self.bodies]
        outcome = p.answered(answers)
        why = self.s.healthy()
        return Outcome(False, f"unhealthy afterwards: {why}", outcome.measured) if why else outcome

    def refused(self, e: dict[str, Any]) -> Outcome:
        answers = [self.send(b) for b in self.bodies]
        outcome = p.refused(answers, int(e["status"]), [str(m) for m in e.get("mentions", [])])
        why = self.s.healthy()
        return Outcome(False, f"unhealthy afterwards: {why}", outcome.measured) if why else outcome

    def server_healthy(self, e: dict[str, Any]) -> Outcome:
        why = self.s.healthy()
        if why:
            return Outcome(False, why, "unhealthy")
        listed = self.s.models()
        if self.s.model not in listed:
            return Outcome(False, f"/v1/models lists {listed}, not {self.s.model}", "wrong model")
        return Outcome(True, "", "healthy")

    def mixed_equals_solo(self, e: dict[str, Any]) -> Outcome:
        """requests[0] alone; then requests[1] streamed, each other neighbour started (and waited
        for until its first token) after requests[1]'s first token, and requests[0] again once
        requests[1] has finished (probe_after: finish) or once all have started (started)."""
        probe, first, *others = self.c.requests
        pairs, errors = [], []
        for _ in range(self.c.repeat):
            solo = self.send(probe)
            mixed, neighbours = self._beside(probe, first, list(others), e["probe_after"])
            errors += [a.error for a in (solo, mixed, *neighbours) if a.error]
            pairs.append((solo, mixed))
        if errors:
            return Outcome(False, f"{len(errors)} requests failed: {errors[0]}", "error")
        return p.pairs_equal(pairs, float(e.get("tolerance", 0.0)), "equal to the solo answer")

    def _beside(self, probe: dict, first: dict, others: list[dict], after: str) -> tuple[Answer, list[Answer]]:
        ticks = [Ticks() for _ in range(len(others) + 1)]
        answers: list[Answer] = [Answer() for _ in range(len(others) + 1)]
        bodies = [first, *others]

        def stream(i: int) -> None:
            answers[i] = self._stream(self.expand(bodies[i]), ticks[i])

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(bodies))]
        for thread, tick in zip(threads, ticks):  # each started once the one before streams
            thread.start()
            tick.wait_beyond(0, self.timeout)
        if after == "finish":
            threads[0].join(self.timeout)
        probe_answer = self.send(probe)
        for thread in threads:
            thread.join(self.timeout)
        return probe_answer, answers

    def _stream(self, body: dict, ticks: Ticks) -> Answer:
        """A streamed request read to its end, each chunk counted in ``ticks`` (closed at its end)."""
        self.s.spend(1)
        body = dict(body)
        body.pop("stream", None)
        body.setdefault("max_tokens", self.s.verify.max_tokens)
        create = self.s.api.chat.completions.create if self.c.api == "chat" else self.s.api.completions.create
        main = {"messages": body.pop("messages")} if self.c.api == "chat" else {"prompt": body.pop("prompt")}
        out = Answer()
        start = time.monotonic()
        try:
            stream = create(model=self.s.model, stream=True, extra_body=body, timeout=self.timeout, **main)
            for _chunk in stream:
                ticks.tick()
                if ticks.stop.is_set():
                    stream.close()
                    break
        except self.s.openai.APIError as exc:
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            ticks.close()
        out.seconds = time.monotonic() - start
        return out

    def performance(self, e: dict[str, Any]) -> Outcome:
        measure = e["measure"]
        if measure == "seconds_to_answer":
            per_word = self.s.tokens_per_word()
            text, number = haystack(e.get("tokens", 1024), 0.5, 0, per_word)
            answers = [self.send(salted(fill(b, {"{haystack}": text}))) for b in self.bodies]
            failed = self.failed(answers)
            if failed:
                return failed
            value = max(a.seconds for a in answers)
            outcome = p.performance(measure, value, e["figure"], float(e["tolerance"]))
            missed = [a for a in answers if number not in a.text]
            if missed:
                return Outcome(
                    False, f"the answer misses the needle {number}: {missed[0].text[:40]!r}", outcome.measured
                )
            return outcome
        width = e.get("in_flight", 1)
        bodies = [self.bodies[i % len(self.bodies)] for i in range(max(width, len(self.bodies)))]
        start = time.monotonic()
        answers = self.at_once(bodies, width) if measure == "aggregate_tokens_per_s" else [self.send(b) for b in bodies]
        wall = time.monotonic() - start
        failed = self.failed(answers)
        if failed:
            return failed
        tokens = [a.completion_tokens or len(a.tokens) for a in answers]
        if measure == "aggregate_tokens_per_s":
            value = sum(tokens) / wall
        else:
            value = sum(t / a.seconds for t, a in zip(tokens, answers)) / len(answers)
        return p.performance(measure, value, e["figure"], float(e["tolerance"]))


def accept(
    recipe: Recipe,
    url: str,
    *,
    only: tuple[str, ...] = (),
    api_key: str = "EMPTY",
    model: str | None = None,
    progress: Callable[[Check, CheckResult | None], None] | None = None,
) -> AcceptResult:
    """Run the recipe's checks (or those ``only`` names) against the server at ``url``; exit-3
    problems (unreachable, not the recipe's model) raise EnvironmentProblem before any check."""
    chosen = select(recipe, only)
    assert recipe.verify is not None
    try:
        import openai  # noqa: F401
    except ImportError:
        raise EnvironmentProblem(f"recipe accept needs the openai client: {install_line('accept')}") from None
    name = model or served_model(recipe)
    parser = any(o == "--reasoning-parser" for o, _ in recipe.serve_args)
    session = Session(url, name, api_key, recipe.verify, parser)
    try:
        listed = session.models()
    except session.openai.APIError as exc:
        raise EnvironmentProblem(f"{session.root}: the server cannot be reached ({exc})") from None
    if name not in listed:
        hint = "" if model else " (give --model for a --served-model-name)"
        raise EnvironmentProblem(f"{session.root} serves {', '.join(listed) or 'no model'}, not {name}{hint}")
    result = AcceptResult(recipe.slug, session.root, name)
    for check in chosen:
        if progress is not None:
            progress(check, None)
        before, start = session.sent, time.monotonic()
        try:
            outcome = Runner(session, check).run()
        except Budget as exc:
            outcome = Outcome(False, str(exc), None)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # an answer without the fields the OpenAI API gives them: the check fails, saying so
            outcome = Outcome(False, f"the server's answer is not the API's shape: {type(exc).__name__}: {exc}", None)
        done = CheckResult(
            id=check.id,
            ok=outcome.ok,
            detail=outcome.detail,
            measured=outcome.measured,
            row=check.row,
            page=check.result,
            table=check.table,
            fixes=check.fixes,
            requests=session.sent - before,
            seconds=time.monotonic() - start,
        )
        result.checks.append(done)
        if progress is not None:
            progress(check, done)
    return result


def as_json(result: AcceptResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "slug": result.slug,
        "url": result.url,
        "model": result.model,
        "checks": [
            {
                "id": c.id,
                "ok": c.ok,
                "detail": c.detail,
                "measured": c.measured,
                "row": c.row,
                "page": c.page,
                "table": c.table,
                "fixes": list(c.fixes),
                "requests": c.requests,
                "seconds": round(c.seconds, 3),
            }
            for c in result.checks
        ],
        "error": None,
    }
