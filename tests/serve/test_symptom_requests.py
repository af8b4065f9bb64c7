"""The request-killers of vLLM 0.26.0 through the API of a real ``vllm serve`` (CPU, TP 1), stock
against the pack, each server started with the tiny recipe's own serve arguments.

- ``stop_token_ids`` past the vocabulary with ``min_tokens`` (vLLM #54195): the stock server answers
  500, its worker raising ``IndexError`` in ``MinTokensLogitsProcessor.apply``, and every process
  ends; with the pack (request-token-ids) it is a 400 naming the parameter, the id and the
  vocabulary's size, on completions, chat and the token-in/token-out ``/inference/v1/generate``, and
  the server answers 20 more requests.
- ``min_tokens`` with a choice the grammar can end before it (vLLM #53665): 500 on stock, the engine
  logging ``grammar rejected tokens``; a valid choice with the pack (min-tokens-grammar).
- Issue 55's requests (killers.py): a constraint that ``allowed_token_ids`` leaves no token
  (completions, chat, a stream) and a choice with ``ignore_eos`` answer 500 on stock, the engine
  logging ``grammar rejected tokens``; with the pack a 400 ``BadRequestError`` naming the parameter
  (grammar-no-token; an error event with code 400 in the stream) and the choice, ended by its
  grammar (grammar-end-stops). A token-id prompt that ends inside a character gets the prompt's own
  text in front of its answer on stock, the choice alone with the pack (detokenizer-prompt-tail);
  echo with ``return_token_ids`` loses the prompt on stock, keeps it with the pack
  (echo-token-ids); a streamed echo with logprobs and ``n`` 4 ends with a KeyError's error event in
  some runs on stock (a race: the rate is reported), in none with the pack (echo-prompt-logprobs);
  ``allowed_token_ids`` that are all stop ids, with ``min_tokens``, get ids outside the list on
  stock, a 400 naming ``allowed_token_ids`` with the pack (allowed-ids-masked).
- A seeded request at a temperature (vLLM #51226): the same text each time alone; on stock another
  text while an unseeded request is generating beside it (the CPU sampler's fast path draws from the
  global RNG), the same text with the pack (cpu-seeded-batch; the v0.26.0 profile leaves it out:
  Gaudi's sampler is not this one).
- A JSON body that is not an object (Schemathesis's find, issue 46) on four JSON endpoints: 500 on
  stock, each an ``AttributeError`` in a request model's before-validator, the server still up; 400
  with the pack (request-body-object).
- Saved failures of the fuzzer's long run (bench/replays/), replayed: the stock server fails them
  again.
- The serve tier's short seeded fuzz (short_fuzz.py): on a stock server the seed's first stop-id
  killer ends it, its worker logging the ``IndexError``; on the patched server every batch is
  answered, the server up, and no request fails or gets a wrong answer.
- The allowed-token mask left behind by ``InputBatch.condense`` (vLLM #43894): the tiny recipe's
  ``allowed-token-ids-leak`` check, run LEAK_RUNS times on each; a race on this server, so the
  stock rate is reported; with the profile for vLLM's own builds (input-batch-condense-mask) it
  holds every time.

The pack here is the profile ``vllm-0.26.0``, applied through the entry point to a copy of the
serve environment without vllm-gaudi (as vLLM's own builds are installed): in place for the
symptoms, and as an overlay for its runtime check in every process. The v0.26.0 profile's servers
(``test_serve.py``) check the first two symptoms and issue 55's too. The row swap (input-batch-swap-mask) is not
reached on a CPU: its attention backend never reorders the batch; its proof shows it.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import build_env
from build_env import ServeEnv
from killers import (
    BAD_ID,
    ECHO_RUNS,
    GRAMMAR,
    assert_issue_55_fixed,
    assert_issue_55_stock,
    assert_refused,
    assert_seeded_batch_fixed,
    assert_seeded_batch_stock,
    choice_answer,
    health,
    issue_55_answers,
    not_object_answers,
    post,
    seeded_batch_answers,
    stop_id_requests,
)
from server import Server, logs_on_failure
from short_fuzz import BATCHES, KILLED_AT, SEED, replay, saved_kinds, short_fuzz
from tiny_recipe import TINY, one, recipe_args, run_cli
from vllm_serve import (
    CHECK_LINE,
    Pack,
    assert_checked_everywhere,
    assert_no_fixpack,
    copy_env,
    entry_point,
    fix_set,
    vllm_environ,
    vllm_server,
)

from fixpack.cookbook.recipes import load_recipe

PROFILE = "vllm-0.26.0"
LEAK = "allowed-token-ids-leak"
LEAK_RUNS = 10
MORE = 20  # ordinary requests the patched server answers after the refusals
EXIT_TIMEOUT = 120.0
REPLAYS = build_env.REPO / "bench" / "replays"
# saved failures of the fuzzer's long run (bench/README.md) that the stock server fails again
REPLAYED = ("stock-00027.json", "stock-schema-5xx-001.json")
NO_GET = re.compile(r"'(list|str|int|bool)' object has no attribute 'get'")  # the 500's message
NOT_GET = re.compile(r"AttributeError: " + NO_GET.pattern)  # the server's log line
STOCK_LOG = [  # the stock server's own lines, in this order
    "IndexError: index 5000000 is out of bounds for dimension 1 with size 1024",
    '"POST /v1/completions HTTP/1.1" 500',
]


def leak_runs(server: Server, model: Path) -> list[bool]:
    """The tiny recipe's leak check LEAK_RUNS times: whether each held."""
    return [one(server.url(""), model, LEAK).ok for _ in range(LEAK_RUNS)]


def test_stock_server(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """Without fixpack: min_tokens with a choice answers 500 each time; the leak check fails in some
    runs (the rate is printed); then one request with an out-of-vocabulary stop id ends the server."""
    stock = vllm_server(serve_env, recipe_args(tiny_model), tmp_path / "stock.log", "TP 1 without fixpack")
    start = time.monotonic()
    with logs_on_failure(stock):
        try:
            stock.start()
            stock.wait_ready()
            choices = [choice_answer(stock, tiny_model) for _ in range(3)]
            issue55 = issue_55_answers(stock, tiny_model)
            seeded = seeded_batch_answers(stock, tiny_model)
            leaks = leak_runs(stock, tiny_model)
            bodies = not_object_answers(stock)
            replayed = {name: [v.kind for v in replay(REPLAYS / name, stock.url(""))] for name in REPLAYED}
            assert health(stock) == 200
            sent = time.monotonic()
            killed = post(stock, "/v1/completions", stop_id_requests(tiny_model)["/v1/completions"])
            seen = []
            while stock.ended() is None and time.monotonic() - sent < EXIT_TIMEOUT:
                seen.append(health(stock))
                time.sleep(0.25)
            assert stock.ready_s is not None
            code = stock.wait_exit(stock.ready_s + (time.monotonic() - sent) + EXIT_TIMEOUT)
        finally:
            stock.stop()
        assert [status for status, _ in choices] == [500, 500, 500], choices
        assert_issue_55_stock(issue55)
        assert_seeded_batch_stock(seeded)
        assert all(status == 500 for statuses in bodies.values() for status in statuses), bodies
        assert replayed == {name: saved_kinds(REPLAYS / name) for name in REPLAYED}, replayed
        log = stock.text()
        # a replayed failure logs again what its file saved: a grammar's rejection, a validator's AttributeError
        saved = "".join((REPLAYS / name).read_text() for name in REPLAYED)
        # the choices' 3, issue 55's conflicts (completions, chat, a stream) and ignore_eos
        grammars = 3 + 3 + 1 + len(GRAMMAR.findall(saved))
        assert len(GRAMMAR.findall(log)) == grammars, "not the grammar's rejections"
        assert len(NOT_GET.findall(log)) == sum(map(len, bodies.values())) + len(NO_GET.findall(saved)), (
            "not the validators' 500s"
        )
        assert killed[0] == 500, killed
        assert 200 not in seen, f"/health after the 500: {seen}"
        at = 0
        for line in STOCK_LOG:
            found = log.find(line, at)
            assert found >= 0, f"{line!r} not in the stock server's log after offset {at}"
            at = found + len(line)
        assert "MinTokensLogitsProcessor" in log or "builtin.py" in log, "the traceback does not name the processor"
        assert_no_fixpack(stock)
    print(
        f"serve: stock: ready in {stock.ready_s:.1f} s; min_tokens + choice: {[s for s, _ in choices]}; "
        f"issue 55: {issue55.conflict[0]} for a conflict, ignore_eos {issue55.ignore_eos[0]}, prompt tail "
        f"{issue55.prompt_tail!r}, echo with token ids {issue55.echo_ids[0]!r}, echo + logprobs streams "
        f"failed {issue55.echo_logprobs_failed}/{ECHO_RUNS}; "
        f"{LEAK}: failed {leaks.count(False)}/{LEAK_RUNS}; bodies not objects: {bodies}; "
        f"stop id {BAD_ID} with min_tokens: HTTP {killed[0]}, "
        f"every process ended by itself (exit {code}); test {time.monotonic() - start:.1f} s"
    )


def test_stock_short_fuzz(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """Without fixpack, the short seeded fuzz finds the stop-id killer: the server ends at the seed's
    first batch that holds one, the worker's IndexError naming an id past the vocabulary."""
    log, name = tmp_path / "stock-fuzz.log", "TP 1 without fixpack, fuzzed"
    stock = vllm_server(serve_env, recipe_args(tiny_model), log, name)
    start = time.monotonic()
    with logs_on_failure(stock):
        try:
            stock.start()
            stock.wait_ready()
            fuzzed = short_fuzz(stock, tiny_model)
            code = stock.wait_exit(EXIT_TIMEOUT)
        finally:
            stock.stop()
        assert fuzzed.died_at is not None, f"the stock server answered all {len(fuzzed.sent)} batches"
        assert fuzzed.killers()[:1] == [fuzzed.died_at] == [KILLED_AT], (fuzzed.died_at, fuzzed.killers())
        ended = fuzzed.sent[fuzzed.died_at]
        assert any(v.failed for v in ended.verdicts), ended
        assert re.search(r"IndexError: index 102[45] is out of bounds for dimension 1 with size 1024", stock.text())
    print(
        f"serve: stock, short fuzz (seed {SEED}): ended at batch {fuzzed.died_at} by the stop-id killer, "
        f"{sum(map(len, (s.batch for s in fuzzed.sent)))} requests sent, every process ended (exit {code}); "
        f"test {time.monotonic() - start:.1f} s"
    )


def test_vllm_profile_in_place(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """The profile for vLLM's own builds in place, on a copy of the environment without vllm-gaudi:
    each symptom gone, every model-independent check of the tiny recipe held."""
    copy = copy_env(serve_env, tmp_path / "env", gaudi=False)
    pack = Pack(profile=PROFILE, opt_ins=())
    fixed = vllm_server(copy, recipe_args(tiny_model), tmp_path / "fixed.log", f"TP 1, {PROFILE} in place", pack=pack)
    junit = tmp_path / "accept.xml"
    start = time.monotonic()
    with logs_on_failure(fixed), fixed:
        tree = fixed.descendants()
        refused = {path: post(fixed, path, body) for path, body in stop_id_requests(tiny_model).items()}
        more = [
            post(fixed, "/v1/completions", {"model": str(tiny_model), "prompt": f"request {i}", "max_tokens": 4})[0]
            for i in range(MORE)
        ]
        healthy = health(fixed)
        choices = [choice_answer(fixed, tiny_model) for _ in range(3)]
        issue55 = issue_55_answers(fixed, tiny_model)
        seeded = seeded_batch_answers(fixed, tiny_model)
        leaks = leak_runs(fixed, tiny_model)
        bodies = not_object_answers(fixed)
        unfuzzed = fixed.text()  # the fuzz's listed failures log the grammar's rejections
        fuzzed = short_fuzz(fixed, tiny_model)
        accepted = run_cli(fixed.url(""), tiny_model, "--junit", str(junit))
    digest = fix_set(copy.python, copy.site)
    assert_checked_everywhere(fixed, tree, digest, "in-place", workers=1, profile=PROFILE)
    for status, body in refused.values():
        assert_refused(status, body)
    assert more == [200] * MORE and healthy == 200
    assert [status for status, _ in choices] == [200] * 3, choices
    assert all(text in ("yes", "no") for _, text in choices), choices
    assert_issue_55_fixed(issue55)
    assert_seeded_batch_fixed(seeded)
    assert not GRAMMAR.search(unfuzzed)
    assert leaks == [True] * LEAK_RUNS, f"{LEAK} failed {leaks.count(False)}/{LEAK_RUNS} with the pack"
    assert all(status == 400 for statuses in bodies.values() for status in statuses), bodies
    assert fuzzed.died_at is None and len(fuzzed.sent) == BATCHES, "the patched server went down"
    assert not fuzzed.failures(), fuzzed.described()
    ids = set(load_recipe(TINY, build_env.REPO).verify.by_id())
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert all(f"{i} " in accepted.stdout for i in ids)
    assert build_env.ready(serve_env.root) is None, "the original environment changed"
    print(
        f"serve: {PROFILE} in place: ready in {fixed.ready_s:.1f} s; stop id {BAD_ID}: "
        f"{ {p: s for p, (s, _) in refused.items()} }; {MORE} more answered; min_tokens + choice: "
        f"{[t for _, t in choices]}; {LEAK}: failed 0/{LEAK_RUNS}; bodies not objects: 400; short fuzz "
        f"(seed {SEED}): {len(fuzzed.sent)} batches, {sum(map(len, (s.batch for s in fuzzed.sent)))} requests, "
        f"{len(fuzzed.failures())} failures; issue 55's requests right; "
        f"recipe accept: {len(ids)} checks held; "
        f"test {time.monotonic() - start:.1f} s"
    )


def test_vllm_profile_overlay(serve_env: ServeEnv, tiny_model: Path, tmp_path: Path) -> None:
    """The same profile as an overlay over the copy without vllm-gaudi (the copy never written):
    the runtime check in every process, and the out-of-vocabulary stop id refused. Over the serve
    environment itself, which has vllm-gaudi, the profile is refused first."""
    # the serve environment itself has vllm-gaudi: refused in one line, nothing written
    beside = tmp_path / "refused-overlay"
    argv = entry_point(serve_env.python, serve_env.site, "--overlay", str(beside), opt_ins=(), profile=PROFILE)
    refused = subprocess.run(argv, capture_output=True, text=True, env=vllm_environ(serve_env.bin, 1), timeout=120)
    errors = [line for line in refused.stderr.splitlines() if "error" in line]
    assert refused.returncode == 1 and len(errors) == 1, refused.stderr
    assert "vllm-gaudi 0.26.0 is installed" in errors[0] and "apply profile v0.26.0" in errors[0], errors
    assert not beside.exists()
    copy = copy_env(serve_env, tmp_path / "env", gaudi=False)
    overlay = tmp_path / "overlay"
    pack = Pack(overlay, profile=PROFILE, opt_ins=())
    log, name = tmp_path / "overlay.log", f"TP 1, {PROFILE} in an overlay"
    fixed = vllm_server(copy, recipe_args(tiny_model), log, name, pack=pack)
    with logs_on_failure(fixed), fixed:
        tree = fixed.descendants()
        status, body = post(fixed, "/v1/completions", stop_id_requests(tiny_model)["/v1/completions"])
    digest = fix_set(copy.python, copy.site, "--overlay", str(overlay))
    assert_checked_everywhere(fixed, tree, digest, f"overlay {overlay}", workers=1, profile=PROFILE)
    assert_refused(status, body)
    assert build_env.ready(serve_env.root) is None, "the original environment changed"
    checks = {m["mode"] for m in CHECK_LINE.finditer(fixed.text())}
    print(f"serve: {PROFILE} overlay: ready in {fixed.ready_s:.1f} s; modes {checks}; stop id refused ({status})")
