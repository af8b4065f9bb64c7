"""The serve tier's short seeded fuzz (issues 46 and 55): bench/fuzz_requests.py's batches from one
seed, sent with bench/fuzz_client.py to a server a test already started, every served answer judged
by bench/fuzz_oracle.py; the long run is bench/fuzz.py.

On the patched server every batch is answered, the server stays up, and no request fails or gets a
wrong 200; each seeded request is also sent twice more, alone, and must give the same text. A
failure is described with the listed failure (docs/performance.md) its signature matches, if any
(``fuzz_listed.listed``: the server's log lines of the batch, the request's id). On a stock server
the same seed's run ends the server at its first batch holding the stop-id killer (batch
KILLED_AT). The seed's requests are the same in every process and on every machine (``batches``
draws them apart from the test run's own modules, with the test extra's pinned Hypothesis); another
seed or a change to the strategies moves the killer, which the
stock test names."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import build_env
from server import Server

sys.path.insert(0, str(build_env.REPO))

from bench.fuzz_client import (  # noqa: E402
    SETTLE,
    TIMEOUT,
    Sent,
    model_of,
    replay,
    saved_kinds,
    send_batch,
    still_up,
    tokenizer_of,
)
from bench.fuzz_listed import listed, stop_id_killer  # noqa: E402
from bench.fuzz_requests import Model, Verdict, batches  # noqa: E402

__all__ = ["BATCHES", "KILLED_AT", "SEED", "Run", "replay", "saved_kinds", "short_fuzz"]

SEED = 7
BATCHES = 40
KILLED_AT = 5  # the seed's first batch that holds a stop-id killer


@dataclass
class Run:
    model: Model
    sent: list[Sent] = field(default_factory=list)
    logs: list[list[str]] = field(default_factory=list)  # the server's log lines while each batch ran
    died_at: int | None = None  # the batch after which the server was gone

    def failures(self) -> list[tuple[dict, Verdict]]:
        """(body, verdict) of each failed request."""
        return [(body, v) for s in self.sent for (_, body), v in zip(s.batch, s.verdicts) if v.failed]

    def killers(self) -> list[int]:
        """The batches that hold a request of the stop-id killer's shape."""
        return [n for n, s in enumerate(self.sent) if any(stop_id_killer(body, self.model) for _, body in s.batch)]

    def described(self) -> list[str]:
        """Each failure: what failed, the listed failure its signature matches (or none), its body."""
        return [
            f"{v.kind}: {v.detail} [{listed(body, v, log, rid) or 'not listed'}] {body}"
            for s, log in zip(self.sent, self.logs)
            for (_, body), v, rid in zip(s.batch, s.verdicts, s.ids)
            if v.failed
        ]


def short_fuzz(server: Server, model_dir: Path, seed: int = SEED, count: int = BATCHES) -> Run:
    """The seed's batches, one after another, until they run out or the server is gone."""
    tokenizer = tokenizer_of(model_dir)
    run = Run(model_of(model_dir, tokenizer))
    for number, batch in enumerate(batches(run.model, seed, count)):
        offset = len(server.text())
        sent = send_batch(server.url(""), batch, TIMEOUT, tokenizer, repeat_seeded=True)
        up = still_up(server.url(""), server.proc, SETTLE if sent.failed else 0.0)
        run.sent.append(sent)
        run.logs.append(server.text()[offset:].splitlines())
        if not up:
            run.died_at = number
            break
    return run
