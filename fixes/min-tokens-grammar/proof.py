"""min-tokens-grammar: a grammar that can only end must be able to end below min_tokens.

The grammar bitmask is applied to the logits before the sampler runs its logits processors
(GPUModelRunner.sample_tokens, CPUModelRunner, and vllm-gaudi's HPU runner alike). Once a grammar
(e.g. the choice "yes"/"no") has produced its value, its bitmask leaves only the stop token(s);
MinTokensLogitsProcessor then sets the stop tokens to -inf while min_tokens is not reached, so the
row has no finite logit, greedy sampling (argmax) picks token 0, the scheduler's
grammar.accept_tokens rejects it ("grammar rejected tokens [0] ... Terminating request.") and the
request ends FINISHED_ERROR (HTTP 500).

Part 1 runs the tree's real MinTokensLogitsProcessor (vllm/v1/sample/logits_processor/builtin.py,
with the real interface.py and async_tensor_h2d) through update_state and apply /
apply_with_spec_decode on rows shaped like the grammar's bitmask left them, and samples them with
the real Sampler.greedy_sample. Part 2 runs the real Scheduler._update_request_with_output, the
real check_stop and the real structured-output block of Scheduler.update_from_output (the
statement compiled from the file at its own lines) over the steps of such a request, with an
xgrammar-like grammar: it accepts the stop token only at its end, is terminated after it and
rejects every token after that.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch

from fixes._support.scheduler import Logger, advance_block
from fixpack.proofkit import Trees, compile_nodes, load_function, load_module, stub_modules

NEG_INF = float("-inf")
V = 12  # vocabulary size
EOS = 11  # the tokenizer's EOS: the only stop token the grammar (xgrammar) knows
STOP = 9  # a stop_token_ids entry the grammar does not allow
YES, NO, A, B = 3, 4, 5, 6
MIN_TOKENS = 6


def _builtin(root: Path) -> ModuleType:
    stub_modules("vllm", "vllm.config", "vllm.utils", "vllm.utils.torch_utils", "vllm.v1.sample.logits_processor")
    sys.modules["vllm.utils.torch_utils"].async_tensor_h2d = load_function(  # type: ignore[attr-defined]
        root / "vllm/utils/torch_utils.py", "async_tensor_h2d", {"np": np, "torch": torch, "PIN_MEMORY": False}
    )
    load_module("vllm.v1.sample.logits_processor.interface", root / "vllm/v1/sample/logits_processor/interface.py")
    return load_module("vllm.v1.sample.logits_processor.builtin", root / "vllm/v1/sample/logits_processor/builtin.py")


def _params(structured: bool, min_tokens: int = MIN_TOKENS) -> SimpleNamespace:
    return SimpleNamespace(
        min_tokens=min_tokens,
        eos_token_id=EOS,
        stop_token_ids=[STOP],
        all_stop_token_ids={EOS, STOP},
        repetition_detection=None,
        structured_outputs=SimpleNamespace(choice=["yes", "no"]) if structured else None,
    )


def _row(allowed: dict[int, float]) -> list[float]:
    """A logits row after the grammar bitmask (or none): -inf outside ``allowed``."""
    return [allowed.get(t, NEG_INF) for t in range(V)]


def _finite(row: torch.Tensor) -> list[int]:
    return [t for t in range(V) if torch.isfinite(row[t])]


def _check_apply(b: ModuleType, iface: ModuleType, greedy: Any) -> None:
    proc = b.MinTokensLogitsProcessor(None, torch.device("cpu"), False)
    out = [[YES], [YES], [A], [A]]  # 1 token generated each: min_tokens not reached
    # Batch rows: 0 a plain request, 1 a grammar that can only end, 2 a grammar that may go on,
    # 3 a grammar that can only end; then rows 1 and 0 swap (the flag must travel with the entry).
    added = [
        (0, _params(structured=True), None, out[0]),
        (1, _params(structured=False), None, out[1]),
        (2, _params(structured=True), None, out[2]),
        (3, _params(structured=True), None, out[3]),
    ]
    proc.update_state(iface.BatchUpdate(batch_size=4, removed=[], added=added, moved=[]))
    proc.update_state(
        iface.BatchUpdate(batch_size=4, removed=[], added=[], moved=[(0, 1, iface.MoveDirectionality.SWAP)])
    )
    logits = torch.tensor(
        [
            _row({t: float(t) for t in range(V)}),  # plain: every token, EOS the most likely
            _row({EOS: 2.0}),  # "yes" produced: the grammar allows only EOS
            _row({A: 0.5, B: 0.25, EOS: 3.0}),  # the grammar may end or go on
            _row({EOS: -1.0}),  # "yes" produced, EOS unlikely in itself
        ]
    )
    logits = proc.apply(logits)
    sampled = greedy(logits).tolist()
    for row in (1, 3):
        if not _finite(logits[row]):
            raise AssertionError(
                f"row {row}: the grammar bitmask left only EOS ({EOS}) and MinTokensLogitsProcessor set it "
                f"to -inf too: every logit of the row is -inf, greedy sampling picks token {sampled[row]}, "
                "which the grammar rejects (scheduler: 'grammar rejected tokens "
                f"[{sampled[row]}] ... Terminating request.', FINISHED_ERROR, HTTP 500)"
            )
        assert _finite(logits[row]) == [EOS], f"row {row}: finite tokens {_finite(logits[row])}, expected [EOS]"
        assert sampled[row] == EOS, f"row {row}: sampled {sampled[row]}, not the grammar's end {EOS}"
    assert logits[1, EOS] == 2.0 and logits[3, EOS] == -1.0, "the kept EOS logits changed"
    # Normal min_tokens behaviour: where other tokens remain, every stop token stays masked.
    assert _finite(logits[0]) == [t for t in range(V) if t not in (EOS, STOP)], _finite(logits[0])
    assert sampled[0] == 10, f"plain row sampled {sampled[0]}"
    assert _finite(logits[2]) == [A, B] and sampled[2] == A, (_finite(logits[2]), sampled[2])

    # Once min_tokens is reached the request leaves the processor: EOS is no longer masked.
    out[2].extend([A] * (MIN_TOKENS - 1))
    proc.update_state(None)
    logits = torch.tensor([_row({A: 0.5, EOS: 3.0})] * 4)
    assert greedy(proc.apply(logits)).tolist()[2] == EOS, "min_tokens reached: EOS still masked"

    # A single structured output request whose only stop token is EOS: one entry to keep.
    proc = b.MinTokensLogitsProcessor(None, torch.device("cpu"), False)
    params = _params(structured=True)
    params.all_stop_token_ids = {EOS}
    proc.update_state(iface.BatchUpdate(batch_size=1, removed=[], added=[(0, params, None, [NO])], moved=[]))
    sampled = greedy(proc.apply(torch.tensor([_row({EOS: 1.0})]))).tolist()
    assert sampled == [EOS], f"a lone structured output request at its grammar's end sampled {sampled}"

    # A plain request's row that had only its stop token left (e.g. allowed_token_ids=[EOS]) is not a
    # grammar's end: out of scope, it stays as before.
    proc = b.MinTokensLogitsProcessor(None, torch.device("cpu"), False)
    add = [(0, _params(structured=False), None, [A])]
    proc.update_state(iface.BatchUpdate(batch_size=1, removed=[], added=add, moved=[]))
    assert not _finite(proc.apply(torch.tensor([_row({EOS: 1.0})]))[0]), "a plain request's stop token was kept"


def _check_spec_decode(b: ModuleType, iface: ModuleType, greedy: Any) -> None:
    proc = b.MinTokensLogitsProcessor(None, torch.device("cpu"), False)
    added = [
        (0, _params(structured=True), None, [A, A]),  # 2 drafts: rows 0-1
        (1, _params(structured=False), None, [A]),  # 1 draft: row 2
        (2, _params(structured=True), None, [A] * (MIN_TOKENS - 2)),  # 3 drafts: rows 3-5, 2 masked
    ]
    proc.update_state(iface.BatchUpdate(batch_size=3, removed=[], added=added, moved=[]))
    logits = torch.tensor(
        [
            _row({A: 1.0, YES: 0.5, EOS: 2.0}),  # draft position 1: the grammar may go on
            _row({EOS: 2.0}),  # draft position 2: the grammar can only end
            _row({t: 1.0 for t in range(V)}),  # plain request
            _row({A: 1.0, EOS: 0.5}),
            _row({EOS: 0.5}),  # the grammar can only end
            _row({EOS: 0.5}),  # min_tokens reached at this position: not masked
        ]
    )
    logits = proc.apply_with_spec_decode(logits, [2, 1, 3])
    sampled = greedy(logits).tolist()
    for row in (1, 4):
        if not _finite(logits[row]):
            raise AssertionError(
                f"spec decode row {row}: the grammar bitmask left only EOS and apply_with_spec_decode set "
                f"it to -inf: an all -inf row, token {sampled[row]} is sampled and the grammar rejects it"
            )
        assert _finite(logits[row]) == [EOS] and sampled[row] == EOS, (row, _finite(logits[row]), sampled[row])
    assert _finite(logits[0]) == [YES, A], _finite(logits[0])
    assert _finite(logits[2]) == [t for t in range(V) if t not in (EOS, STOP)], _finite(logits[2])
    assert _finite(logits[3]) == [A], _finite(logits[3])
    assert _finite(logits[5]) == [EOS], _finite(logits[5])


class Grammar:
    """StructuredOutputGrammar stand-in: XgrammarGrammar's accept_tokens/is_terminated for the
    choice ["yes", "no"]: one value token, then EOS (its only stop token), then terminated."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.terminated = False

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self.terminated:
            return False
        for token in tokens:
            allowed = {YES, NO} if not self.tokens else {EOS}
            if token not in allowed:
                return False
            self.tokens.append(token)
        self.terminated = bool(self.tokens) and self.tokens[-1] == EOS
        return True

    def is_terminated(self) -> bool:
        return self.terminated


class Request:
    """The parts of vllm.v1.request.Request that check_stop and update_from_output use."""

    def __init__(self, params: SimpleNamespace, status: Any) -> None:
        self.request_id = "req-0"
        self.sampling_params = params
        self.pooling_params = None
        self.max_tokens = 16
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = [1, 2, 7]  # "answer yes or no:"
        self.status = status
        self.stop_reason: int | str | None = None
        self.resumable = True
        self.use_structured_output = True
        self.structured_output_request = SimpleNamespace(grammar=Grammar())

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        ids = [token_ids] if isinstance(token_ids, int) else token_ids
        self._output_token_ids.extend(ids)
        self._all_token_ids.extend(ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self._output_token_ids

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


class Scheduler:
    def __init__(self, root: Path) -> None:
        self.path = root / "vllm/v1/core/sched/scheduler.py"
        utils_py = root / "vllm/v1/core/sched/utils.py"
        self.status = load_function(root / "vllm/v1/request.py", "RequestStatus", {"enum": enum})
        self.check_stop = load_function(
            utils_py,
            "check_stop",
            {
                "RequestStatus": self.status,
                "check_sequence_repetition": load_function(utils_py, "check_sequence_repetition"),
            },
        )
        self.update = load_function(self.path, "Scheduler._update_request_with_output", {"check_stop": self.check_stop})
        self.block = compile_nodes(self.path, [advance_block(self.path)])
        self.max_model_len = 4096
        self.structured_output_manager = SimpleNamespace(
            should_advance=lambda request: request.use_structured_output,
            trim_reasoning_for_advance=lambda request, tokens: tokens,
            # With grammar-no-token in the pack, a rejection first asks whether the request's own
            # masks left the grammar no token: none here (no allowed_token_ids, no bad_words).
            conflicting_params=lambda request, past_token_ids: None,
        )

    def step(self, request: Request, sampled: list[int]) -> tuple[list[int], bool, list[str]]:
        """One step of update_from_output for this request: append and check for stop, then advance
        the grammar."""
        new_token_ids, stopped = self.update(self, request, list(sampled))
        logger = Logger()
        ns: dict[str, Any] = {
            "__builtins__": __builtins__,
            "self": self,
            "request": request,
            "req_id": request.request_id,
            "new_token_ids": new_token_ids,
            "stopped": stopped,
            "logger": logger,
            "RequestStatus": self.status,
            "StructuredOutputGrammar": Grammar,
            "check_stop": self.check_stop,
        }
        exec(self.block, ns)
        return ns["new_token_ids"], ns["stopped"], logger.errors


def _check_stop_at_grammar_end(s: Scheduler, steps: list[list[int]], stop_token: int) -> None:
    request = Request(_params(structured=True), s.status.RUNNING)
    *before, last = steps
    for sampled in before:
        _, stopped, errors = s.step(request, sampled)
        assert not stopped and not errors, f"stopped at {sampled}: {request.status!r} {errors}"
    new_token_ids, stopped, errors = s.step(request, last)
    if not stopped:
        generated = request.num_output_tokens
        # What the next step does with any token (EOS is masked again below min_tokens).
        _, _, errors = s.step(request, [A])
        raise AssertionError(
            f"the grammar accepted its end ({stop_token}) at output token {generated}, below "
            f"min_tokens={MIN_TOKENS}: check_stop ignores it and the request goes on; the terminated "
            f"grammar rejects the next token and the request ends {request.status.name} "
            f"({'; '.join(errors) or 'no error logged'})"
        )
    assert request.status == s.status.FINISHED_STOPPED, f"finished {request.status!r}, not FINISHED_STOPPED"
    assert request.output_token_ids == [t for step in steps for t in step], request.output_token_ids
    assert new_token_ids == last and not errors, (new_token_ids, errors)
    want_reason = None if stop_token == EOS else stop_token
    assert request.stop_reason == want_reason, f"stop_reason {request.stop_reason!r}, expected {want_reason!r}"


def _check_scheduler(s: Scheduler) -> None:
    # "yes" then EOS, one token a step (the server's case), and both in one step (spec decode).
    _check_stop_at_grammar_end(s, [[YES], [EOS]], EOS)
    _check_stop_at_grammar_end(s, [[NO, EOS]], EOS)

    # A stop_token_ids entry the grammar ends on: finished as check_stop finishes it, its id the
    # stop_reason.
    class StopGrammar(Grammar):
        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            ok = super().accept_tokens(request_id, [EOS if t == STOP else t for t in tokens])
            return ok

    request = Request(_params(structured=True), s.status.RUNNING)
    request.structured_output_request.grammar = StopGrammar()
    s.step(request, [YES])
    _, stopped, _ = s.step(request, [STOP])
    assert stopped and request.status == s.status.FINISHED_STOPPED, f"stop token {STOP}: {request.status!r}"
    assert request.stop_reason == STOP, f"stop_reason {request.stop_reason!r}"

    # Normal min_tokens behaviour: a stop token below min_tokens whose grammar is not terminated
    # (one the grammar takes as content) does not stop the request.
    class ContentGrammar(Grammar):
        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            self.tokens.extend(tokens)
            return True

    request = Request(_params(structured=True), s.status.RUNNING)
    request.structured_output_request.grammar = ContentGrammar()
    _, stopped, _ = s.step(request, [STOP])
    assert not stopped and request.status == s.status.RUNNING, f"content stop token: {request.status!r}"

    # Nor does one of a request without structured output.
    request = Request(_params(structured=False), s.status.RUNNING)
    request.use_structured_output = False
    _, stopped, _ = s.step(request, [EOS])
    assert not stopped and request.status == s.status.RUNNING, f"plain request below min_tokens: {request.status!r}"

    # At min_tokens the stop token stops the request as before.
    request = Request(_params(structured=False, min_tokens=2), s.status.RUNNING)
    request.use_structured_output = False
    s.step(request, [A])
    _, stopped, _ = s.step(request, [EOS])
    assert stopped and request.status == s.status.FINISHED_STOPPED, f"at min_tokens: {request.status!r}"

    # A grammar that rejects a token still ends the request with an error, as before.
    request = Request(_params(structured=True), s.status.RUNNING)
    _, stopped, errors = s.step(request, [A])
    assert stopped and request.status == s.status.FINISHED_ERROR and errors, (request.status, errors)


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    b = _builtin(root)
    iface = sys.modules["vllm.v1.sample.logits_processor.interface"]
    greedy = load_function(root / "vllm/v1/sample/sampler.py", "Sampler.greedy_sample", {"torch": torch})
    _check_apply(b, iface, greedy)
    _check_spec_decode(b, iface, greedy)
    _check_scheduler(Scheduler(root))
