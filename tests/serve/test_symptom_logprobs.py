"""logprobs-decode-guard's symptom through the API of a real ``vllm serve`` (CPU, TP 1).

The model (``make_sp_model.py``): a random Qwen3 whose config has 1024 ids and whose SentencePiece
(slow) tokenizer has 400 pieces, so most ids the model samples or ranks have no piece. vLLM's
logprobs path decodes each such id with ``tokenizer.decode``; sentencepiece raises ``IndexError``
inside AsyncLLM's output handler, which ends it: the request gets HTTP 500, ``/health`` 503, and the
API server shuts itself down.

- The stock server (the serve environment as built, no fixpack): the tiny recipe's check
  ``logprobs-decode-guard-sentencepiece`` run by ``fixpack recipe accept`` fails; its first
  ``/v1/completions`` with ``logprobs: 0`` answers 500, ``/health`` never answers 200 again, and
  every process of the server ends by itself; its log holds the traceback through ``convert_ids_list_to_tokens``.
- The same environment with the pack applied as an overlay through the entry point
  (``fixes/apply_all.py --overlay DIR --exec vllm serve ...``, the venv untouched): REQUESTS
  requests of four kinds (completions with ``logprobs: 0``, the same streamed, chat with
  ``top_logprobs``, completions with ``prompt_logprobs``), each carrying ids past the tokenizer's
  pieces in its logprobs, all answered; ``/health`` 200 after; the recipe's check holds.
- The control, without a third server: stock vLLM's ``convert_ids_list_to_tokens`` decodes ids
  past the vocabulary to "" with a fast (byte-level) tokenizer (the other serve tests' tiny model),
  and raises with this one.

Requests go through the official ``openai`` client (no retries: a retried 500 would hide the
failure).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import build_env
import openai
from build_env import ServeEnv
from killers import health
from make_sp_model import PIECES
from server import Server, logs_on_failure
from tiny_recipe import one, run_cli
from vllm_serve import CHECK_LINE, Pack, assert_no_fixpack, serve_args, stock_server, vllm_environ, vllm_server

HERE = Path(__file__).resolve().parent
REQUESTS = 32  # 8 of each kind, one per prompt
MAX_TOKENS = 16
TOP = 5
EXIT_TIMEOUT = 120.0  # after the 500, for every process of the stock server to end on its own
PROMPTS = [
    "Hello world, the tiny cat",
    "The model server answers the request",
    "Red green blue river stone cloud",
    "Apply the fix to the site",
    "Seven eight nine ten, the bird",
    "Which patch did the worker start",
    "A small random weight layer",
    "The greedy sample of the prompt",
]
# The stock server's own lines, in this order: the handler's failure, the frame that raised (the
# logprobs path's detokenizer), sentencepiece's error, the 500, then the shutdown.
STOCK_LOG = [
    "AsyncLLM output_handler failed.",
    'vllm/tokenizers/detokenizer_utils.py", line 165, in convert_ids_list_to_tokens',
    "IndexError: OUT_OF_RANGE: piece id is out of range.",
    '"POST /v1/completions HTTP/1.1" 500',
    "Shutting down",
]
SLOW = "Using a slow tokenizer."  # vLLM's warning when the tokenizer it loaded is not a fast one
# The tiny recipe's check of this symptom (tests/recipes/tiny-qwen3.yaml), run through recipe accept.
RECIPE_CHECK = "logprobs-decode-guard-sentencepiece"


# --- the four kinds of request; each returns (token id, decoded text) for every logprob entry -----


def token_id(token: str) -> int:
    assert token.startswith("token_id:"), token
    return int(token.partition(":")[2])


def completion(api: openai.OpenAI, model: Path, prompt: str) -> list[tuple[int, str]]:
    """The issue's request: ``logprobs: 0`` (the sampled token's only)."""
    answer = api.completions.create(
        model=str(model),
        prompt=prompt,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    )
    lp = answer.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == MAX_TOKENS, lp
    return [(token_id(t), "") for t in lp.tokens]


def completion_stream(api: openai.OpenAI, model: Path, prompt: str) -> list[tuple[int, str]]:
    ids = []
    for chunk in api.completions.create(
        model=str(model),
        prompt=prompt,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=0,
        stream=True,
        extra_body={"return_tokens_as_token_ids": True},
    ):
        for choice in chunk.choices:
            if choice.logprobs is not None:
                ids += [(token_id(t), "") for t in choice.logprobs.tokens]
    assert len(ids) == MAX_TOKENS, ids
    return ids


def chat(api: openai.OpenAI, model: Path, prompt: str) -> list[tuple[int, str]]:
    answer = api.chat.completions.create(
        model=str(model),
        messages=[{"role": "user", "content": prompt}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
        top_logprobs=TOP,
        extra_body={"return_tokens_as_token_ids": True},
    )
    content = answer.choices[0].logprobs.content
    assert content and all(len(c.top_logprobs) == TOP for c in content), content
    return [(token_id(t.token), "") for c in content for t in c.top_logprobs]


def prompt_logprobs(api: openai.OpenAI, model: Path, prompt: str) -> list[tuple[int, str]]:
    """vLLM's ``prompt_logprobs``: per prompt position a dict keyed by token id, each entry with
    its ``decoded_token``."""
    answer = api.completions.create(
        model=str(model),
        prompt=prompt,
        max_tokens=1,
        temperature=0,
        extra_body={"prompt_logprobs": TOP},
    )
    positions = answer.choices[0].model_extra["prompt_logprobs"]
    assert positions[0] is None and len(positions) > 1, positions
    return [(int(tid), entry["decoded_token"]) for pos in positions[1:] for tid, entry in pos.items()]


KINDS = {
    "completions logprobs 0": completion,
    "completions logprobs 0, streamed": completion_stream,
    f"chat top_logprobs {TOP}": chat,
    f"completions prompt_logprobs {TOP}": prompt_logprobs,
}


def ask_all(server: Server, model: Path) -> tuple[dict[str, int], int]:
    """REQUESTS requests, the kinds in turn, one after another (the first is the stock test's): the
    number answered of each kind and of logprob entries past the tokenizer's pieces. Each request
    must carry such ids (so that each alone would end a stock server), decoded to ""."""
    api = server.client()
    answered = dict.fromkeys(KINDS, 0)
    padded = 0
    names = list(KINDS)
    for i in range(REQUESTS):
        kind = names[i % len(names)]
        entries = KINDS[kind](api, model, PROMPTS[i // len(names) % len(PROMPTS)])
        past = [(tid, text) for tid, text in entries if tid >= PIECES]
        assert past, f"request {i} ({kind}): no id past the tokenizer's {PIECES} pieces in {entries}"
        assert all(text == "" for _, text in past), f"request {i} ({kind}): {past}"
        answered[kind] += 1
        padded += len(past)
    return answered, padded


# --- the tests -----------------------------------------------------------------------------------


def test_stock_server_dies_on_logprobs(serve_env: ServeEnv, sp_model: Path, tmp_path: Path) -> None:
    """Without fixpack: the tiny recipe's check, through ``recipe accept``, fails on its first
    request (a completion with ``logprobs: 0``: HTTP 500); /health never answers 200 again, and the
    server's processes end by themselves, after the traceback through the logprobs path's
    detokenizer."""
    stock = stock_server(
        serve_env, sp_model, 1, tmp_path / "stock-spm.log", "TP 1 without fixpack, SentencePiece tokenizer"
    )
    start = time.monotonic()
    with logs_on_failure(stock):
        try:
            stock.start()
            stock.wait_ready()
            assert stock.ready_s is not None
            sent = time.monotonic()
            # the recipe's check, as a team would run it: its first request ends the server
            accepted = run_cli(stock.url(""), sp_model, "--only", RECIPE_CHECK, "--json")
            answered_s = time.monotonic() - sent
            assert accepted.returncode == 1, accepted.stdout + accepted.stderr
            (check,) = json.loads(accepted.stdout)["checks"]
            # none answered (the first got the 500 the log shows below; the server was gone for the rest)
            assert not check["ok"] and check["measured"].startswith("0/"), check
            seen = []
            while stock.ended() is None and time.monotonic() - sent < EXIT_TIMEOUT:
                seen.append(health(stock))
                time.sleep(0.25)
            code = stock.wait_exit(stock.ready_s + answered_s + EXIT_TIMEOUT)
        finally:
            stock.stop()
        assert seen and 200 not in seen, f"/health after the 500: {seen}"
        log = stock.text()
        assert SLOW in log, "the server did not load a slow (SentencePiece) tokenizer"
        at = 0
        for line in STOCK_LOG:
            found = log.find(line, at)
            assert found >= 0, f"{line!r} not in the stock server's log after offset {at}"
            at = found + len(line)
        assert_no_fixpack(stock)
    assert stock.exited_s is not None
    print(
        f"serve: stock, SentencePiece tokenizer: ready in {stock.ready_s:.1f} s; recipe accept --only {RECIPE_CHECK} "
        f"failed ({check['detail'][:60]}, {check['measured']}) in {answered_s:.1f} s; "
        f"/health after it: {sorted(set(seen), key=str)}; every process "
        f"ended by itself {stock.exited_s - stock.ready_s - answered_s:.1f} s later (exit {code}); "
        f"test {time.monotonic() - start:.1f} s"
    )


def test_pack_answers_logprobs(serve_env: ServeEnv, sp_model: Path, tmp_path: Path) -> None:
    """With the pack (an overlay through the entry point, the venv untouched): REQUESTS requests
    of the four kinds, each with ids past the tokenizer's pieces in its logprobs, all answered, the
    padded ids decoded to ""; /health 200 after."""
    overlay = tmp_path / "overlay"
    log, name = tmp_path / "fixpack-spm.log", "TP 1 with the overlay, SentencePiece tokenizer"
    fixed = vllm_server(serve_env, serve_args(sp_model), log, name, pack=Pack(overlay))
    start = time.monotonic()
    with logs_on_failure(fixed), fixed:
        checks = list(CHECK_LINE.finditer(fixed.text()))
        assert checks, "no runtime check line: the pack is not in this server"
        for m in checks:
            assert "logprobs-decode-guard" in m["fixes"].split(", "), m[0]
        sent = time.monotonic()
        answered, padded = ask_all(fixed, sp_model)
        requests_s = time.monotonic() - sent
        assert health(fixed) == 200
        check = one(fixed.url(""), sp_model, RECIPE_CHECK)
        assert check.ok, check
        log = fixed.text()
        assert SLOW in log, "the server did not load a slow (SentencePiece) tokenizer"
        assert "output_handler failed" not in log
    assert build_env.ready(serve_env.root) is None, "the serve environment changed"
    print(
        f"serve: with the pack, SentencePiece tokenizer: ready in {fixed.ready_s:.1f} s; "
        f"{sum(answered.values())} of {REQUESTS} requests answered ({answered}) in {requests_s:.1f} s, "
        f"{padded} logprob entries past the tokenizer's {PIECES} pieces; /health 200 after; "
        f"recipe accept --only {RECIPE_CHECK}: held ({check.measured}); "
        f"test {time.monotonic() - start:.1f} s"
    )


# vLLM's own decode of logprob ids, run under the serve environment's interpreter (stock vLLM)
DECODE = """
import json, sys
from vllm.tokenizers.detokenizer_utils import convert_ids_list_to_tokens
from vllm.tokenizers.registry import get_tokenizer
tok = get_tokenizer(sys.argv[1])
entry = {"fast": tok.is_fast, "len": len(tok)}
try:
    entry["tokens"] = convert_ids_list_to_tokens(tok, [5, len(tok), 1023])
except Exception as exc:
    entry["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(entry))
"""


def test_fast_tokenizer_control(serve_env: ServeEnv, tiny_model: Path, sp_model: Path) -> None:
    """The control, without a third server: stock vLLM's convert_ids_list_to_tokens (the frame that
    raises above) given ids past the vocabulary decodes them to "" with the other serve tests' fast
    (byte-level) tokenizer, and raises sentencepiece's IndexError with this one."""
    found = {}
    for name, model in (("fast", tiny_model), ("sentencepiece", sp_model)):
        done = subprocess.run(
            [str(serve_env.python), "-c", DECODE, str(model)],
            capture_output=True,
            text=True,
            timeout=300,
            env=vllm_environ(serve_env.bin, 1),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        found[name] = json.loads(done.stdout.strip().splitlines()[-1])  # vLLM logs to stdout too
    fast, slow = found["fast"], found["sentencepiece"]
    assert fast["fast"] and fast["len"] < 1023 and fast["tokens"][1:] == ["", ""], fast
    assert not slow["fast"] and slow["len"] == PIECES, slow
    assert slow.get("error") == "IndexError: OUT_OF_RANGE: piece id is out of range.", slow
    print(f"serve: ids past the vocabulary, stock vLLM's decode: {found}")
