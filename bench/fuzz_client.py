"""The fuzzer's client: a batch of requests sent at once to a server on this machine, and each
answer judged by ``fuzz_requests.judge`` (issue 46). No server is started or stopped here, so the
serve tier runs a short seeded fuzz on the servers its tests already start."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.fuzz_requests import Verdict, judge

Request = tuple[str, dict[str, Any]]  # (endpoint, JSON body)
Answer = tuple[int | None, str, float]  # (status or None when nothing answered, text, seconds)


@dataclass(frozen=True)
class Sent:
    """One batch as the server answered it."""

    batch: list[Request]
    answers: list[Answer]
    verdicts: list[Verdict]

    @property
    def failed(self) -> bool:
        return any(v.failed for v in self.verdicts)


def send(url: str, endpoint: str, body: Any, timeout: float) -> Answer:
    request = urllib.request.Request(
        url + endpoint, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace"), time.monotonic() - start
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace"), time.monotonic() - start
    except (OSError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}", time.monotonic() - start


def send_batch(url: str, batch: list[Request], timeout: float) -> Sent:
    """The batch's requests at once, as clients in flight together; an unanswered request that
    took the whole timeout is a hang."""
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        answers = list(pool.map(lambda r: send(url, r[0], r[1], timeout), batch))
    verdicts = []
    for (_, body), (status, text, seconds) in zip(batch, answers):
        verdict = judge(status, text, bool(body.get("stream")))
        if verdict.kind == "unanswered" and seconds >= timeout:
            verdict = Verdict("hang", verdict.detail)
        verdicts.append(verdict)
    return Sent(batch, answers, verdicts)


def answers_health(url: str) -> bool:
    """Whether ``/health`` answers 200 at once."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as answer:
            return answer.status == 200
    except (OSError, TimeoutError):
        return False
