"""The fuzzer's client: a batch of requests sent at once to a server on this machine, and each
answer judged by ``fuzz_requests.judge`` (issue 46), then every served answer by the oracle of what
its request asked, ``fuzz_oracle.violations`` (issue 55). No server is started or stopped here, so the
serve tier runs a short seeded fuzz on the servers its tests already start."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import fuzz_schema
from bench.fuzz_oracle import Tokenizer, read_answer, repeatable, seeded, violations
from bench.fuzz_requests import Model, Verdict, judge


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the answer, never followed: the fuzzer sends only to the loopback server it
    was given (a 3xx could name any host)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


OPENER = urllib.request.build_opener(_NoRedirect)
TIMEOUT = 120.0  # seconds for one request before it counts as a hang
SETTLE = 5.0  # seconds a server that failed a request gets to show whether it is going down
Request = tuple[str, dict[str, Any]]  # (endpoint, JSON body)
Answer = tuple[int | None, str, float]  # (status or None when nothing answered, text, seconds)


@dataclass(frozen=True)
class Sent:
    """One batch as the server answered it."""

    batch: list[Request]
    answers: list[Answer]
    verdicts: list[Verdict]
    ids: list[str] = field(default_factory=list)  # each request's X-Request-Id, which vLLM's log names

    @property
    def failed(self) -> bool:
        return any(v.failed for v in self.verdicts)


def send(url: str, endpoint: str, body: Any, timeout: float, request_id: str | None = None) -> Answer:
    headers = {"Content-Type": "application/json"}
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    request = urllib.request.Request(url + endpoint, data=json.dumps(body).encode(), headers=headers)
    start = time.monotonic()
    try:
        with OPENER.open(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace"), time.monotonic() - start
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace"), time.monotonic() - start
    except (OSError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}", time.monotonic() - start


def send_batch(
    url: str, batch: list[Request], timeout: float, tokenizer: Tokenizer | None = None, repeat_seeded: bool = False
) -> Sent:
    """The batch's requests at once, as clients in flight together; an unanswered request that
    took the whole timeout is a hang, a served answer that breaks what its request asked a
    violation (the checks that need token ids run only with the model's ``tokenizer``). Each
    request carries an id of its own (``X-Request-Id``), so that a failure can be matched to the
    server's log lines. With ``repeat_seeded``, each seeded request that was served is sent twice
    more, alone, one after the other: texts that differ are a violation."""
    ids = [f"fuzz-{uuid.uuid4().hex[:16]}" for _ in batch]
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        answers = list(pool.map(lambda r: send(url, r[0][0], r[0][1], timeout, r[1]), zip(batch, ids)))
    verdicts = []
    for (endpoint, body), (status, text, seconds) in zip(batch, answers):
        streamed = bool(body.get("stream"))
        verdict = judge(status, text, streamed)
        if verdict.kind == "unanswered" and seconds >= timeout:
            verdict = Verdict("hang", verdict.detail)
        if verdict.kind == "served":
            found = violations(endpoint, body, read_answer(endpoint, text, streamed), tokenizer)
            if repeat_seeded and seeded(body):
                found += _again_alone(url, endpoint, body, timeout)
            if found:
                verdict = Verdict("violation", "; ".join(found)[:600])
        verdicts.append(verdict)
    return Sent(batch, answers, verdicts, ids)


def _again_alone(url: str, endpoint: str, body: dict[str, Any], timeout: float) -> list[str]:
    """A seeded request sent twice more, alone: what differs between the two answers (nothing
    when either was not served: that answer is not this check's)."""
    streamed = bool(body.get("stream"))
    answers = [send(url, endpoint, body, timeout) for _ in range(2)]
    if any(status != 200 or judge(status, text, streamed).kind != "served" for status, text, _ in answers):
        return []
    first, again = (read_answer(endpoint, text, streamed) for _, text, _ in answers)
    return repeatable(first, again)


def answers_health(url: str) -> bool:
    """Whether ``/health`` answers 200 at once."""
    try:
        with OPENER.open(url + "/health", timeout=5) as answer:
            return answer.status == 200
    except (OSError, TimeoutError):
        return False


def still_up(url: str, proc: subprocess.Popen | None, settle: float = 0.0) -> bool:
    """Whether the server (its process ``proc``) is up: at once, or through ``settle`` seconds (the
    time a failed request gets to bring its server down)."""
    deadline = time.monotonic() + settle
    while proc is not None and proc.poll() is None and answers_health(url):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.25)
    return False


def tokenizer_of(model_dir: Path) -> Tokenizer:
    """The model's own tokenizer, as vLLM loads it (transformers, the test extra)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def model_of(model_dir: Path, tokenizer: Any = None) -> Model:
    """The served name, the config's vocabulary and the tokenizer's size, read from the files."""
    config = json.loads((model_dir / "config.json").read_text())
    return Model(str(model_dir), int(config["vocab_size"]), len(tokenizer or tokenizer_of(model_dir)))


def replay(path: Path, url: str, timeout: float = TIMEOUT) -> list[Verdict]:
    """Send a replay file's batch again, at once, to ``url``: the verdict of each request. A
    Schemathesis case (``fuzz_schema``'s file: one request, maybe not even a JSON object) is sent as
    it was and judged by its status."""
    record = json.loads(path.read_text())
    if "requests" not in record:
        status, text = fuzz_schema.replay(path, url, timeout)
        return [Verdict("5xx", f"HTTP {status}: {text[:200]}") if status >= 500 else Verdict(f"{status // 100}xx")]
    # the fuzzer's server served its model from a folder of its own: this server names its own
    served = served_model(url)
    batch = [(r["endpoint"], {**r["body"], "model": served or r["body"].get("model")}) for r in record["requests"]]
    return send_batch(url, batch, timeout).verdicts


def saved_kinds(path: Path) -> list[str]:
    """The verdict of each request of a replay file as it was saved (a Schemathesis case: by its status)."""
    record = json.loads(path.read_text())
    if "requests" not in record:
        return ["5xx" if record["status"] >= 500 else f"{record['status'] // 100}xx"]
    return [r["verdict"]["kind"] for r in record["requests"]]


def served_model(url: str) -> str | None:
    """The id of the one model ``url`` serves (``/v1/models``), or None."""
    try:
        with OPENER.open(url + "/v1/models", timeout=10) as answer:
            models = json.loads(answer.read()).get("data") or []
    except (OSError, TimeoutError, ValueError):
        return None
    return models[0].get("id") if len(models) == 1 and isinstance(models[0], dict) else None
