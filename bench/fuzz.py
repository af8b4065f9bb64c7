#!/usr/bin/env python3
"""Fuzz a real CPU ``vllm serve`` with valid requests near the edges, stock against the pack, and
count what fails a request or kills the server (issue 46).

    FIXPACK_SERVE_ENV=DIR python3 bench/fuzz.py run [--seed 1] [--batches 200] [--minutes 20]
        [--in-flight 3] [--server stock patched] [--profile vllm-0.26.0] [--repeat-seeded] [--schema-seconds 0]
        [--schema-examples 100] [--out DIR] [--json FILE]
    python3 bench/fuzz.py replay FILE --url http://127.0.0.1:PORT

The requests are ``fuzz_requests.batches(model, seed, N)``: the same seed gives both servers the
same batches, each batch's requests sent at once. After each batch the server must still answer
``/health``; a server that dies is counted, its batch saved as a replay file (the bodies, the
answers, the server's log lines since the batch began) and the server started again. A request
that takes longer than ``--timeout`` is a hang. Every failing request is saved too
(``DIR/<server>-<n>.json``). The table: requests sent, served, 4xx, 5xx, stream errors, hangs,
wrong answers (a 200 that breaks what its request asked, ``fuzz_oracle``) and deaths, per server.
``--schema-seconds N`` then runs Schemathesis (``fuzz_schema``) for N seconds against each server,
started again for it; each 5xx it finds is a replay file too. Requests go only to the servers this
command starts on 127.0.0.1 (``replay`` refuses any other address), bounded by ``--batches``,
``--minutes`` and ``--schema-seconds``.

``patched`` is the pack through the entry point: profile ``vllm-0.26.0`` (the default) applied in
place to a copy of the serve venv without vllm-gaudi, as vLLM's own builds are installed; or
``--profile v0.26.0`` with both opt-ins as an overlay over the serve venv itself. The model is the
serve tier's tiny Qwen3 (vocabulary 1024, tokenizer 1000), made on the spot. One server at a time,
each stopped by its process group. Run it with the development environment's interpreter (it
reuses the serve tier's helpers in tests/serve/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "serve")]

import build_env  # noqa: E402
from build_env import ServeEnv  # noqa: E402
from server import Server, ServerError  # noqa: E402
from vllm_serve import Pack, copy_env, serve_args, vllm_server  # noqa: E402

from bench import fuzz_schema  # noqa: E402
from bench.fuzz_client import SETTLE, TIMEOUT, Sent, model_of, replay, send_batch, still_up, tokenizer_of  # noqa: E402
from bench.fuzz_listed import listed  # noqa: E402
from bench.fuzz_oracle import Tokenizer  # noqa: E402
from bench.fuzz_requests import Verdict, batches  # noqa: E402

KINDS = ("served", "4xx", "5xx", "stream-error", "unanswered", "hang", "violation")


@dataclass
class Tally:
    server: str
    sent: int = 0
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    deaths: int = 0
    batches: int = 0
    seconds: float = 0.0
    saved: list[str] = field(default_factory=list)

    def row(self) -> str:
        k = self.kinds
        return (
            f"| {self.server} | {self.batches} | {self.sent} | {k['served']} | {k['4xx']} | {k['5xx']} | "
            f"{k['stream-error']} | {k['hang']} | {k['unanswered']} | {k['violation']} | {self.deaths} | "
            f"{self.seconds / 60:.1f} |"
        )


HEADER = (
    "| server | batches | requests | served | 4xx | 5xx | stream errors | hangs | unanswered | wrong answers | "
    "deaths | minutes |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


class Target:
    """One kind of server, started (again) on demand: ``vllm serve`` of ``env``, after ``pack`` if any."""

    def __init__(self, name: str, env: ServeEnv, model: Path, pack: Pack | None, log_dir: Path) -> None:
        self.name, self.env, self.model, self.pack, self.log_dir = name, env, model, pack, log_dir
        self.server: Server | None = None
        self.starts = 0

    def start(self) -> Server:
        self.starts += 1
        log = self.log_dir / f"{self.name}-{self.starts}.log"
        # float32, as the tiny recipe serves it: in bf16 the random model's top tokens come near-tied
        args = [*serve_args(self.model), "--dtype", "float32"]
        self.server = vllm_server(self.env, args, log, f"{self.name} #{self.starts}", pack=self.pack)
        self.server.start()
        self.server.wait_ready()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def run_batches(target: Target, drawn: list[list[tuple[str, dict[str, Any]]]], out: Path, minutes: float,
                timeout: float = TIMEOUT, tokenizer: Tokenizer | None = None,
                repeat_seeded: bool = False) -> Tally:  # fmt: skip
    tally = Tally(target.name)
    start = time.monotonic()
    server = target.start()
    try:
        for number, batch in enumerate(drawn):
            if time.monotonic() - start > minutes * 60:
                break
            offset = len(server.text())
            sent = send_batch(server.url(""), batch, timeout, tokenizer, repeat_seeded)
            tally.batches += 1
            tally.sent += len(batch)
            for verdict in sent.verdicts:
                tally.kinds[verdict.kind] += 1
            # a failure gets time to bring the server down; otherwise it must answer at once
            died = not still_up(server.url(""), server.proc, SETTLE if sent.failed else 0.0)
            if died or sent.failed:
                saved = save_replay(out, target.name, number, sent, died, server.text()[offset:])
                tally.saved.append(str(saved))
            if died:
                tally.deaths += 1
                target.stop()
                server = target.start()
    finally:
        tally.seconds = time.monotonic() - start
        target.stop()
    return tally


def save_replay(out: Path, name: str, number: int, sent: Sent, died: bool, log: str) -> Path:
    """A replay file: what was sent, what came back, and the server's log lines meanwhile."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{number:05d}.json"
    record = {
        "server": name,
        "batch": number,
        "died": died,
        "requests": [
            {
                "endpoint": e,
                "body": b,
                "request_id": i,
                "status": s,
                "answer": t[:2000],
                "seconds": round(sec, 3),
                "verdict": asdict(v),
            }
            for (e, b), (s, t, sec), v, i in zip(
                sent.batch, sent.answers, sent.verdicts, sent.ids or [""] * len(sent.batch)
            )
        ],
        "log": log.splitlines()[-200:],
    }
    path.write_text(portable(json.dumps(record, indent=1)) + "\n")
    return path


# where this machine keeps things, as tracebacks and the served model's name show them
_PLACES = [  # in this order: a copied venv lies in the fuzzer's folder
    (re.compile(r"/[^\s\"']*/site-packages/"), "SITE/"),
    (re.compile(r"/[^\s\"']*/lib/python3\.\d+/"), "PYTHON/"),
    (re.compile(r"/[^\s\"']*/fixpack-fuzz-[^/\s\"']+/"), ""),  # the model's folder: its name stays
]


def portable(text: str) -> str:
    """A replay file's text without this machine's paths, so that it can be kept and read anywhere."""
    for place, name in _PLACES:
        text = place.sub(name, text)
    return text


def schema_run(target: Target, seed: int, seconds: float, examples: int, out: Path) -> fuzz_schema.SweepResult:
    """Schemathesis against a server started for it, its 5xx cases saved as replay files."""
    server = target.start()
    try:
        result = fuzz_schema.schema_sweep(
            server.url(""), seed=seed, max_examples=examples, seconds=seconds, workdir=out / f"{target.name}-schema"
        )
    finally:
        target.stop()
    fuzz_schema.write_replays(result, out / f"{target.name}-schema")
    return result


def summary(out: Path, server: str) -> list[str]:
    """Each failed request of a run's replay files for ``server``, counted by verdict and cause: in
    a batch after which the server died, one the README lists (``fuzz_listed.listed``), or
    neither; then the files of the last."""
    counts: Counter[tuple[str, str]] = Counter()
    unlisted: dict[str, list[str]] = {}
    for path in sorted(out.glob(f"{server}-[0-9]*.json")):
        record = json.loads(path.read_text())
        for request in record["requests"]:
            kind = request["verdict"]["kind"]
            if kind in ("served", "4xx"):
                continue
            cause = "a death's batch" if record["died"] else _listed(record, request)
            cause = cause or "not listed"
            counts[(kind, cause)] += 1
            if cause == "not listed":
                unlisted.setdefault(path.name, []).append(request["verdict"]["detail"][:100])
    lines = [f"{n:5d}  {kind}: {cause}" for (kind, cause), n in sorted(counts.items())]
    return lines + [f"not listed: {name}: {'; '.join(details)}" for name, details in unlisted.items()]


def keep_distinct(out: Path, dest: Path, server: str) -> list[Path]:
    """The first replay file of each distinct failing request (its body but the model's name),
    copied to ``dest`` with its answers cut to 300 characters and only the log's error lines: the
    files a README can list and a test can send again."""
    seen: set[str] = set()
    kept: list[Path] = []
    rows: list[str] = []
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(out.glob(f"{server}-[0-9]*.json")):
        record = json.loads(path.read_text())
        failed = [r for r in record["requests"] if r["verdict"]["kind"] not in ("served", "4xx")]
        keys = {json.dumps({k: v for k, v in r["body"].items() if k != "model"}, sort_keys=True) for r in failed}
        if not keys - seen:
            continue
        seen |= keys
        for request in record["requests"]:
            request["answer"] = request["answer"][:300]
        # the error lines, and the traceback frames that say where an exception was raised
        record["log"] = [line for line in record["log"] if " ERROR " in line or "Error" in line or 'File "' in line]
        kept.append(dest / path.name)
        kept[-1].write_text(json.dumps(record, indent=1) + "\n")
        rows += [_index_row(path.name, record, r) for r in failed]
    (dest / "INDEX.md").write_text(
        f"# The failing requests of `{server}`, one replay file each\n\n"
        "Written by `python3 bench/fuzz.py keep`: each file is the first batch a distinct failing request "
        "was in; send it again with `python3 bench/fuzz.py replay FILE --url http://127.0.0.1:PORT`.\n\n"
        "| file | endpoint | verdict | constraint | other settings | listed as |\n|---|---|---|---|---|---|\n"
        + "".join(rows)
    )
    return kept


_SETTINGS = ("allowed_token_ids", "bad_words", "logit_bias", "min_tokens", "stop_token_ids", "ignore_eos",
             "n", "echo", "logprobs", "stream")  # fmt: skip


def _listed(record: dict[str, Any], request: dict[str, Any]) -> str | None:
    """The listed failure a saved request is, by its signature in the answer and the saved log."""
    return listed(request["body"], Verdict(**request["verdict"]), record["log"], request.get("request_id", ""))


def _index_row(name: str, record: dict[str, Any], request: dict[str, Any]) -> str:
    body = request["body"]
    constraint = json.dumps(body.get("structured_outputs") or body.get("response_format") or "")
    settings = ", ".join(f"{k} {json.dumps(body[k])}" for k in _SETTINGS if body.get(k) not in (None, False, [], {}))
    why = _listed(record, request) or "not listed: see bench/README.md"
    return f"| {name} | {request['endpoint']} | {request['verdict']['kind']} | `{constraint}` | {settings} | {why} |\n"


def loopback(url: str) -> bool:
    """Whether ``url`` names this machine: the fuzzer sends only to servers on 127.0.0.1."""
    return urllib.parse.urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")


def targets(env: ServeEnv, model: Path, names: list[str], profile: str, work: Path) -> list[Target]:
    out = []
    for name in names:
        if name == "stock":
            out.append(Target(name, env, model, None, work))
        elif profile == "vllm-0.26.0":  # vLLM alone, as its own builds are installed
            out.append(
                Target(name, copy_env(env, work / "env", gaudi=False), model, Pack(profile=profile, opt_ins=()), work)
            )
        else:
            out.append(Target(name, env, model, Pack(work / "overlay"), work))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="fuzz stock and patched servers with the same seed")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--batches", type=int, default=200)
    run.add_argument("--minutes", type=float, default=20.0, help="per server")
    run.add_argument("--in-flight", type=int, default=3)
    run.add_argument("--timeout", type=float, default=TIMEOUT)
    run.add_argument(
        "--repeat-seeded", action="store_true", help="send each served seeded request twice more, alone: same text?"
    )
    run.add_argument("--server", nargs="+", choices=["stock", "patched"], default=["stock", "patched"])
    run.add_argument("--profile", choices=["vllm-0.26.0", "v0.26.0"], default="vllm-0.26.0")
    run.add_argument("--schema-seconds", type=float, default=0.0, help="then Schemathesis, per server (0: not)")
    run.add_argument("--schema-examples", type=int, default=100, help="Schemathesis's bound per operation")
    run.add_argument("--out", type=Path, default=Path("fuzz-out"))
    run.add_argument("--json", type=Path)
    sums = sub.add_parser("summary", help="each failure a run saved, by cause: listed, a death, or neither")
    sums.add_argument("out", type=Path, help="the run's --out folder")
    sums.add_argument("--server", default="patched")
    keep = sub.add_parser("keep", help="copy one replay file per distinct failing request, trimmed, to keep")
    keep.add_argument("out", type=Path, help="the run's --out folder")
    keep.add_argument("dest", type=Path)
    keep.add_argument("--server", default="patched")
    again = sub.add_parser("replay", help="send a saved batch (or Schemathesis case) again")
    again.add_argument("file", type=Path)
    again.add_argument("--url", required=True, help="a server on this machine: http://127.0.0.1:PORT")
    args = parser.parse_args(argv)

    if args.command == "summary":
        for line in summary(args.out, args.server):
            print(line)
        return 0
    if args.command == "keep":
        kept = keep_distinct(args.out, args.dest, args.server)
        print(f"fuzz: kept {len(kept)} replay files in {args.dest}")
        return 0
    if args.command == "replay":
        if not loopback(args.url):
            parser.error(f"--url {args.url}: the fuzzer sends only to a server on 127.0.0.1")
        try:
            verdicts = replay(args.file, args.url.rstrip("/"))
        except (OSError, ValueError, KeyError) as exc:
            print(f"fuzz: error: {args.file}: cannot replay it ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        for verdict in verdicts:
            print(f"{verdict.kind}: {verdict.detail}")
        return 0

    root = os.environ.get("FIXPACK_SERVE_ENV")
    if not root or build_env.ready(Path(root)) is not None:
        print("fuzz: set FIXPACK_SERVE_ENV to a venv built by tests/serve/build_env.py", file=sys.stderr)
        return 2
    env = ServeEnv(Path(root).absolute())
    with tempfile.TemporaryDirectory(prefix="fixpack-fuzz-") as tmp:
        work = Path(tmp)
        model_dir = work / "tiny-qwen3"
        subprocess.run([str(env.python), str(REPO / "tests/serve/make_model.py"), str(model_dir)], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True)  # fmt: skip
        tokenizer = tokenizer_of(model_dir)
        model = model_of(model_dir, tokenizer)
        drawn = batches(model, args.seed, args.batches, args.in_flight) if args.batches > 0 else []
        print(f"fuzz: seed {args.seed}, {len(drawn)} batches, {sum(map(len, drawn))} requests; {model}", flush=True)
        tallies = []
        sweeps = []
        for target in targets(env, model_dir, args.server, args.profile, work):
            try:
                if drawn:
                    tallies.append(
                        run_batches(target, drawn, args.out, args.minutes, args.timeout, tokenizer, args.repeat_seeded)
                    )
                    print(f"fuzz: {target.name}: {tallies[-1].row()}", flush=True)
                if args.schema_seconds > 0:
                    sweep = schema_run(target, args.seed, args.schema_seconds, args.schema_examples, args.out)
                    sweeps.append(f"| {target.name} |{sweep.row()[1:]}")
                    print(f"fuzz: {target.name}, Schemathesis: {sweep.row()}", flush=True)
            except ServerError as exc:
                print(f"fuzz: {target.name} did not start: {exc}", file=sys.stderr)
                return 1
    for row in sweeps:
        print(row)
    if tallies:
        print(HEADER)
    for tally in tallies:
        print(tally.row())
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in tallies], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
