"""grammar-end-stops: a structured output request ends once its grammar has ended, ignore_eos or not.

With ignore_eos, SamplingParams.update_from_generation_config leaves eos_token_id None but still
adds the EOS to all_stop_token_ids. The grammar (xgrammar) allows EOS once its value is complete,
accepts it and is terminated; check_stop does not stop on the EOS (eos_token_id is None), so the
request goes on. A terminated grammar's bitmask row is the full mask
(StructuredOutputManager._fill_bitmasks), so the next token is unconstrained, and
XgrammarGrammar.accept_tokens rejects every token once terminated: update_from_output logs
"Unexpected: grammar rejected tokens ... Terminating request." and the request ends
FINISHED_ERROR (finish_reason "error", HTTP 500).

The proof runs the tree's real code over the steps of such requests: the real
SamplingParams.update_from_generation_config and its eos_token_id / all_stop_token_ids properties
(what the engine's InputProcessor calls), StructuredOutputManager's _fill_bitmasks,
should_fill_bitmask, should_advance, _get_reasoner and trim_reasoning_for_advance, check_stop,
Scheduler._update_request_with_output and the grammar-advance statement of
Scheduler.update_from_output (compiled from the file at its own lines), and RequestStatus with
vLLM's map to FinishReason. The grammar is an xgrammar-like stand-in for the choice ["yes", "no"]:
one value token, then EOS (its only stop token, as XgrammarBackend's TokenizerInfo has it), then
terminated, rejecting every token after that; the model is a fixed greedy preference over the
tokens the bitmask leaves.
"""

from __future__ import annotations

import ast
import enum
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from fixes._support.scheduler import Logger, advance_block
from fixpack.proofkit import Trees, compile_nodes, load_function, parse_file

V = 12  # vocabulary size: one int32 word of the grammar bitmask
EOS = 11  # the tokenizer's EOS
STOP = 9  # a stop_token_ids entry
YES, NO, A = 3, 4, 5
# The model's preference (greedy): a word token first, then "yes", then EOS.
LOGITS = {A: 3.0, YES: 2.0, NO: 1.0, EOS: 0.5}
MAX_TOKENS = 16


def _module_assign(path: Path, name: str, ns: dict[str, Any]) -> Any:
    """Run the module-level assignment of ``name`` in ``path`` (at its own lines) in ``ns``."""
    found = [
        node
        for node in parse_file(path).body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    if len(found) != 1:
        raise RuntimeError(f"{path}: {len(found)} assignments of {name}")
    exec(compile_nodes(path, [found[0]]), ns)
    return ns[name]


def _params_class(root: Path) -> type:
    """SamplingParams' stop-token state, filled by the tree's own update_from_generation_config."""
    path = root / "vllm/sampling_params.py"

    class Params:
        update_from_generation_config = load_function(path, "SamplingParams.update_from_generation_config")
        eos_token_id = property(load_function(path, "SamplingParams.eos_token_id"))
        all_stop_token_ids = property(load_function(path, "SamplingParams.all_stop_token_ids"))

        def __init__(
            self, ignore_eos: bool, min_tokens: int = 0, stop_token_ids: tuple[int, ...] = (), structured: bool = True
        ) -> None:
            self.ignore_eos = ignore_eos
            self.min_tokens = min_tokens
            self.stop_token_ids = list(stop_token_ids)
            self.repetition_detection = None
            self.structured_outputs = SimpleNamespace(choice=["yes", "no"]) if structured else None
            self._eos_token_id: int | None = None
            # SamplingParams.__post_init__: "eos_token_id is added to this by the engine".
            self._all_stop_token_ids: set[int] = set(self.stop_token_ids)
            # InputProcessor.process_inputs, with the model's generation config and EOS.
            self.update_from_generation_config({"eos_token_id": EOS}, EOS)

    return Params


class Grammar:
    """StructuredOutputGrammar stand-in with XgrammarGrammar's contract for the choice
    ["yes", "no"]: one value token, then EOS, after which it is terminated and rejects every token
    (accept_tokens returns False once terminated, as XgrammarGrammar's does)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.terminated = False

    def allowed(self) -> set[int]:
        return {YES, NO} if not self.tokens else {EOS}

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self.terminated:
            return False
        for token in tokens:
            if token not in self.allowed():
                return False
            self.tokens.append(token)
        self.terminated = bool(self.tokens) and self.tokens[-1] == EOS
        return True

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        if self.terminated:  # xgrammar: "GrammarMatcher has terminated ... trying to find the next token mask"
            raise RuntimeError("fill_bitmask on a terminated grammar")
        bitmask[idx, 0] = sum(1 << t for t in self.allowed())

    def is_terminated(self) -> bool:
        return self.terminated


class Request:
    """The parts of vllm.v1.request.Request that check_stop, update_from_output and the
    structured output manager use."""

    def __init__(self, params: Any, status: Any, grammar: Grammar | None = None) -> None:
        self.request_id = "cmpl-0"
        self.sampling_params = params
        self.pooling_params = None
        self.max_tokens = MAX_TOKENS
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = [1, 2]  # "hello there"
        self.status = status
        self.stop_reason: int | str | None = None
        self.resumable = True
        self.use_structured_output = params.structured_outputs is not None
        self.structured_output_request = (
            SimpleNamespace(
                grammar=grammar or Grammar(), reasoner=None, reasoning_ended=None, reasoning_end_token_index=None
            )
            if self.use_structured_output
            else None
        )

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        ids = [token_ids] if isinstance(token_ids, int) else token_ids
        self._output_token_ids.extend(ids)
        self._all_token_ids.extend(ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self._output_token_ids

    @property
    def all_token_ids(self) -> list[int]:
        return self._all_token_ids

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


class Manager:
    """StructuredOutputManager with no reasoning parser, its methods the tree's."""

    _get_reasoner: Any
    should_fill_bitmask: Any
    should_advance: Any
    trim_reasoning_for_advance: Any
    _fill_bitmasks: Any

    def __init__(self, root: Path) -> None:
        path = root / "vllm/v1/structured_output/__init__.py"
        for name in (
            "_get_reasoner",
            "should_fill_bitmask",
            "should_advance",
            "trim_reasoning_for_advance",
            "_fill_bitmasks",
        ):
            fn = load_function(path, f"StructuredOutputManager.{name}", {"TYPE_CHECKING": False})
            setattr(self, name, types.MethodType(fn, self))
        self.reasoner_cls = None
        self.enable_in_reasoning = False
        self._full_mask = torch.tensor(-1, dtype=torch.int32)
        self._grammar_bitmask = torch.zeros((1, 1), dtype=torch.int32)  # one row, 32 tokens a word

    def conflicting_params(self, request: Request, past_token_ids: list[int]) -> None:
        # grammar-no-token's check (when the pack has it): None for a terminated grammar and for a
        # request without allowed_token_ids or bad_words, which every request here is.
        return None

    def allowed(self, request: Request) -> set[int]:
        """The tokens the request's bitmask row leaves, filled as grammar_bitmask fills it."""
        assert request.structured_output_request is not None
        grammar = request.structured_output_request.grammar
        self._fill_bitmasks([(grammar, 0, self.should_fill_bitmask(request))])
        word = int(self._grammar_bitmask[0, 0]) & 0xFFFFFFFF
        return {t for t in range(V) if word >> t & 1}


class Engine:
    def __init__(self, root: Path) -> None:
        self.path = root / "vllm/v1/core/sched/scheduler.py"
        request_py = root / "vllm/v1/request.py"
        engine_py = root / "vllm/v1/engine/__init__.py"
        utils_py = root / "vllm/v1/core/sched/utils.py"
        self.Params = _params_class(root)
        self.status = load_function(request_py, "RequestStatus", {"enum": enum})
        names: dict[str, Any] = {}
        _module_assign(engine_py, "FINISH_REASON_STRINGS", names)
        names["FinishReason"] = load_function(engine_py, "FinishReason", {"enum": enum, **names})
        names["RequestStatus"] = self.status
        self.finish_reasons = _module_assign(request_py, "_FINISHED_REASON_MAP", names)
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
        self.structured_output_manager = Manager(root)

    def request(self, grammar: Grammar | None = None, **params: Any) -> Request:
        return Request(self.Params(**params), self.status.RUNNING, grammar)

    def finish_reason(self, request: Request) -> str | None:
        reason = self.finish_reasons.get(request.status)
        return None if reason is None else str(reason)

    def step(self, request: Request, sampled: list[int]) -> tuple[list[int], bool, bool, list[str]]:
        """One step of update_from_output for this request: append the sampled tokens and check
        for stop, then advance the grammar. Returns the step's new tokens, whether
        _update_request_with_output stopped the request, whether the step did, and the log."""
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
        return ns["new_token_ids"], stopped, ns["stopped"], logger.errors

    def sample(self, request: Request) -> int:
        """The model runner's greedy token under the request's grammar bitmask."""
        allowed = self.structured_output_manager.allowed(request) if request.use_structured_output else set(range(V))
        return max(allowed, key=lambda t: LOGITS.get(t, 0.0))

    def run(self, request: Request) -> list[tuple[int, bool, list[str]]]:
        """Sample and update until the scheduler stops the request."""
        steps = []
        while True:
            token = self.sample(request)
            new_token_ids, _, stopped, errors = self.step(request, [token])
            assert stopped is True or stopped is False, f"stopped is {stopped!r}"
            steps.append((token, stopped, errors))
            if stopped:
                return steps
            if request.num_output_tokens > MAX_TOKENS:
                raise RuntimeError(f"the request did not stop: {request.output_token_ids}")


def _check_params(e: Engine) -> None:
    """The precondition, from the tree's SamplingParams: ignore_eos keeps EOS a stop token of the
    request (all_stop_token_ids, what min_tokens and the grammar-end check of update_from_output see)
    but not its eos_token_id."""
    params = e.Params(ignore_eos=True)
    if params.eos_token_id is not None or EOS not in params.all_stop_token_ids or EOS in params.stop_token_ids:
        raise RuntimeError(
            f"SamplingParams under ignore_eos: eos_token_id {params.eos_token_id!r}, all_stop_token_ids "
            f"{params.all_stop_token_ids}, stop_token_ids {params.stop_token_ids}: not the state this proof is about"
        )
    params = e.Params(ignore_eos=False)
    if params.eos_token_id != EOS:
        raise RuntimeError(f"SamplingParams without ignore_eos: eos_token_id {params.eos_token_id!r}")


def _check_ignore_eos(e: Engine, min_tokens: int = 0) -> None:
    """The issue's request: the choice ["yes", "no"], ignore_eos, greedy, max_tokens 16."""
    request = e.request(ignore_eos=True, min_tokens=min_tokens)
    steps = e.run(request)
    tokens = [token for token, _, _ in steps]
    if request.status == e.status.FINISHED_ERROR:
        errors = [line for _, _, errs in steps for line in errs]
        raise AssertionError(
            f"ignore_eos (min_tokens={min_tokens}): the grammar accepted EOS ({EOS}) at output token "
            f"{tokens.index(EOS) + 1} and is terminated, but check_stop does not stop on it (eos_token_id is "
            "None under ignore_eos) and the request goes on; the terminated grammar's bitmask is the full "
            f"mask, the model samples {tokens[-1]}, the grammar rejects it and the request ends "
            f"{request.status.name}, finish_reason {e.finish_reason(request)!r} (HTTP 500): "
            f"{'; '.join(errors) or 'no error logged'}; tokens {tokens}"
        )
    assert request.status == e.status.FINISHED_STOPPED, f"ended {request.status!r} after {tokens}, not FINISHED_STOPPED"
    assert tokens == [YES, EOS], f"sampled {tokens}, expected yes then EOS"
    assert request.output_token_ids == [YES, EOS], request.output_token_ids
    assert steps[-1][1] and not any(stopped for _, stopped, _ in steps[:-1]), steps
    assert not any(errs for _, _, errs in steps), steps
    assert request.stop_reason is None, f"stop_reason {request.stop_reason!r}: EOS is no stop_token_ids entry"
    assert e.finish_reason(request) == "stop", e.finish_reason(request)

    # The EOS and "no" in one step (speculative decoding): the same end.
    request = e.request(ignore_eos=True, min_tokens=min_tokens)
    new_token_ids, by_update, stopped, errors = e.step(request, [NO, EOS])
    assert stopped is True and not by_update and not errors, (by_update, stopped, errors)
    assert request.status == e.status.FINISHED_STOPPED and request.stop_reason is None, request.status
    assert new_token_ids == [NO, EOS] == request.output_token_ids, (new_token_ids, request.output_token_ids)


def _check_unchanged(e: Engine) -> None:
    # Without ignore_eos, check_stop stops the request on the EOS, as before.
    request = e.request(ignore_eos=False)
    steps = e.run(request)
    assert [t for t, _, _ in steps] == [YES, EOS], steps
    assert request.status == e.status.FINISHED_STOPPED and request.stop_reason is None, request.status
    request = e.request(ignore_eos=False)
    e.step(request, [YES])
    _, by_update, stopped, _ = e.step(request, [EOS])
    assert by_update is True and stopped is True, "without ignore_eos, check_stop stops on EOS"

    # A stop_token_ids entry the grammar ends on (it takes STOP as its end): check_stop stops the
    # request, with the token as stop_reason, ignore_eos or not.
    class StopGrammar(Grammar):
        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            return super().accept_tokens(request_id, [EOS if t == STOP else t for t in tokens])

    for min_tokens in (0, 6):
        request = e.request(StopGrammar(), ignore_eos=True, min_tokens=min_tokens, stop_token_ids=(STOP,))
        e.step(request, [YES])
        _, _, stopped, errors = e.step(request, [STOP])
        assert stopped is True and not errors, (stopped, errors)
        assert request.status == e.status.FINISHED_STOPPED, f"stop token {STOP}: {request.status!r}"
        assert request.stop_reason == STOP, f"min_tokens={min_tokens}: stop_reason {request.stop_reason!r}"

    # A grammar that is not terminated (one that takes EOS as content) does not stop the request.
    class ContentGrammar(Grammar):
        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            self.tokens.extend(tokens)
            return True

    request = e.request(ContentGrammar(), ignore_eos=True)
    _, _, stopped, errors = e.step(request, [EOS])
    assert stopped is False and request.status == e.status.RUNNING and not errors, request.status

    # Nor does ignore_eos change for a request without structured output: the EOS is generated on.
    request = e.request(ignore_eos=True, structured=False)
    _, _, stopped, _ = e.step(request, [EOS])
    assert stopped is False and request.status == e.status.RUNNING, f"plain ignore_eos request: {request.status!r}"

    # A grammar that rejects a token it did not allow still ends the request with an error.
    request = e.request(ignore_eos=True)
    _, _, stopped, errors = e.step(request, [A])
    assert stopped is True and request.status == e.status.FINISHED_ERROR and errors, (request.status, errors)


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    e = Engine(Path(trees.vllm))
    _check_params(e)
    _check_ignore_eos(e)
    _check_unchanged(e)
    # With min_tokens above the answer's length too (min-tokens-grammar keeps the EOS in the row
    # the grammar leaves it alone in, and finishes the request below min_tokens).
    _check_ignore_eos(e, min_tokens=6)
