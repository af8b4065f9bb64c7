"""logprobs-decode-guard: an out-of-vocab logprob id must not raise in the API server.

Loads vLLM's real vllm/logprobs.py, vllm/tokenizers/detokenizer_utils.py and
vllm/v1/engine/logprobs.py from the given tree (their vLLM imports stubbed) and feeds
LogprobsProcessor.update_from_output, which OutputProcessor.process_outputs calls without any
exception handling inside AsyncLLM's output handler, sample and prompt logprobs holding bad ids.
The tokenizer stand-in behaves like a byte-level fast tokenizer: ids outside the u32 range raise
OverflowError, ids past the vocabulary decode to nothing, and a lone UTF-8 lead byte decodes to
U+FFFD. A SentencePiece (slow) stand-in raises IndexError for any id past the vocabulary, as
sentencepiece does, so the first id past it (id == len(tokenizer)) is checked as well.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch

from fixpack.proofkit import Trees, load_module, stub_modules

BAD = (-1, 2**32, 2**40)

# A byte-level vocabulary: 5 and 6 are the two bytes of "é".
VOCAB = {0: b"<s>", 1: b"hello", 2: b" world", 3: b"!", 4: b" a", 5: b"\xc3", 6: b"\xa9"}
VOCAB_SIZE = len(VOCAB)  # 7 and up are past the vocabulary (e.g. padded logits rows)


class ByteLevelTokenizer:
    """decode() as a fast (Rust) tokenizer does it, without a model download."""

    vocab = VOCAB

    def __len__(self) -> int:
        return VOCAB_SIZE

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        for i in ids:
            if not 0 <= i < 2**32:
                raise OverflowError("out of range integral type conversion attempted")
        return b"".join(self.vocab.get(i, b"") for i in ids).decode("utf-8", errors="replace")


class SentencePieceTokenizer(ByteLevelTokenizer):
    """A SentencePiece-backed (slow) tokenizer, e.g. --tokenizer-mode slow: sentencepiece's decode
    raises IndexError ("piece id is out of range") for any id outside the vocabulary, the first
    one past it (id == len(tokenizer), e.g. a row of a padded lm_head) included."""

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        for i in ids:
            if not 0 <= i < VOCAB_SIZE:
                raise IndexError("OUT_OF_RANGE: piece id is out of range.")
        return super().decode(ids)


class LeadByteZeroTokenizer(ByteLevelTokenizer):
    """Id 0 is a real token too: here the lead byte of "é" (ids 0 and 5 swapped)."""

    vocab = {**VOCAB, 0: b"\xc3", 5: b"<s>"}


class MetaspaceTokenizer(ByteLevelTokenizer):
    """A SentencePiece-style tokenizer: convert_ids_list_to_tokens also asks for raw pieces."""

    backend_tokenizer = SimpleNamespace(
        to_str=lambda: '{"pre_tokenizer": {"type": "Metaspace", "replacement": "\\u2581"}}'
    )

    def convert_ids_to_tokens(self, ids: list[int], **kwargs: Any) -> list[str | None]:
        # As PreTrainedTokenizerFast: None for an id past the vocabulary (id_to_token).
        for i in ids:
            if not 0 <= i < 2**32:
                raise OverflowError("out of range integral type conversion attempted")
        return [VOCAB[i].decode("utf-8", errors="replace") if i in VOCAB else None for i in ids]


def _modules(trees: Trees) -> tuple[ModuleType, ModuleType, ModuleType]:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    stub_modules("vllm.logger", "vllm.tokenizers", "vllm.v1.engine", "vllm.v1.outputs")
    lp = load_module("vllm.logprobs", root / "vllm/logprobs.py")
    du = load_module("vllm.tokenizers.detokenizer_utils", root / "vllm/tokenizers/detokenizer_utils.py")
    engine_lp = load_module("vllm.v1.engine.logprobs", root / "vllm/v1/engine/logprobs.py")
    return lp, du, engine_lp


def _run(what: str, fn: Any) -> Any:
    try:
        return fn()
    except (OverflowError, IndexError, TypeError) as exc:
        # OverflowError: a fast tokenizer given an id outside u32; IndexError: sentencepiece given an
        # id past its vocabulary; TypeError: a None raw piece (an id past the vocabulary of a Metaspace
        # fast tokenizer) handed to _restore_leading_spaces.
        raise AssertionError(
            f"{what}: {exc!r} escapes to AsyncLLM's output handler, which then stops "
            "processing outputs for every request"
        ) from exc


def _decoded(container: Any) -> list[list[tuple[int, str | None]]]:
    return [[(tid, lp.decoded_token) for tid, lp in (pos or {}).items()] for pos in container]


def check(trees: Trees) -> None:
    lp, du, engine_lp = _modules(trees)

    # Direct: both tokenizer kinds, one bad id among good ones.
    for tok in (ByteLevelTokenizer(), MetaspaceTokenizer()):
        kind = type(tok).__name__
        got = _run(
            f"convert_ids_list_to_tokens({kind}, [0, 1, -1, 2**32, 2, 7])",
            lambda tok=tok: du.convert_ids_list_to_tokens(tok, [0, 1, -1, 2**32, 2, 7]),
        )
        # Id 0 is in the vocabulary: it decodes as itself, not as an out-of-vocab id.
        assert got == ["<s>", "hello", "", "", " world", ""], f"{kind}: decoded {got}"

    # The first id past the vocabulary (VOCAB_SIZE == len(tokenizer)) alone among good ids: no id is
    # negative or beyond u32, so only the upper bound of the vocabulary check can catch it.
    for tok in (ByteLevelTokenizer(), MetaspaceTokenizer(), SentencePieceTokenizer()):
        kind = type(tok).__name__
        got = _run(
            f"convert_ids_list_to_tokens({kind}, [1, {VOCAB_SIZE}])",
            lambda tok=tok: du.convert_ids_list_to_tokens(tok, [1, VOCAB_SIZE]),
        )
        assert got == ["hello", ""], f"{kind}: [1, {VOCAB_SIZE}] decoded {got}"

    for flat in (False, True):
        _check_processor(engine_lp.LogprobsProcessor, lp, flat)
        _check_zero_context(engine_lp.LogprobsProcessor, lp, flat)
        _check_vocab_boundary_context(engine_lp.LogprobsProcessor, lp, flat)


def _sampled(processor_cls: Any, lp: ModuleType, flat: bool, tokenizer: Any, rows: list[list[int]], what: str) -> Any:
    """A processor that has taken one step of sample logprobs (2 per position) with these ids."""
    new_logprobs = (
        [np.array(r, dtype=np.int64) for r in rows],
        [np.array([-0.5, -1.0, -2.0]) for _ in rows],
        [np.array([1, 2, 3]) for _ in rows],
        None,
    )
    proc = processor_cls(
        tokenizer=tokenizer,
        logprobs=lp.create_sample_logprobs(flat),
        prompt_logprobs=None,
        cumulative_logprob=0.0,
        num_logprobs=2,
        num_prompt_logprobs=None,
    )
    output = SimpleNamespace(new_logprobs=new_logprobs, new_prompt_logprobs_tensors=None)
    kind = "FlatLogprobs" if flat else "list"
    _run(f"sample logprobs ({kind}) with {what}", lambda: proc.update_from_output(output))
    return proc


def _check_zero_context(processor_cls: Any, lp: ModuleType, flat: bool) -> None:
    """A sampled id 0 stays in the UTF-8 correction's context: "é" split as ids 0 and 6, with a
    bad id among the top-k, still decodes to "é" at the second position."""
    kind = "FlatLogprobs" if flat else "list"
    proc = _sampled(processor_cls, lp, flat, LeadByteZeroTokenizer(), [[0, 1, -1], [6, 3, 2**32]], "sampled id 0")
    assert _decoded(proc.logprobs) == [
        [(0, ""), (1, "hello"), (-1, "")],
        [(6, "é"), (3, "!"), (2**32, "")],
    ], f"sample logprobs ({kind}) after sampled id 0 decoded as {_decoded(proc.logprobs)}"


def _check_vocab_boundary_context(processor_cls: Any, lp: ModuleType, flat: bool) -> None:
    """A sampled id equal to the vocabulary size sits in the UTF-8 correction's context: with a
    SentencePiece tokenizer it must be left out of the decode, and "é" (ids 5, then 6 after it)
    still decodes at the third position."""
    kind = "FlatLogprobs" if flat else "list"
    rows = [[5, 1, VOCAB_SIZE], [VOCAB_SIZE, 2, 3], [6, 3, 4]]
    proc = _sampled(processor_cls, lp, flat, SentencePieceTokenizer(), rows, f"sampled id {VOCAB_SIZE}")
    assert _decoded(proc.logprobs) == [
        [(5, ""), (1, "hello"), (VOCAB_SIZE, "")],
        [(VOCAB_SIZE, ""), (2, " world"), (3, "!")],
        [(6, "é"), (3, "!"), (4, " a")],
    ], f"sample logprobs ({kind}) after sampled id {VOCAB_SIZE} decoded as {_decoded(proc.logprobs)}"


def _check_processor(processor_cls: Any, lp: ModuleType, flat: bool) -> None:
    kind = "FlatLogprobs" if flat else "list"
    # Sample logprobs (2 per position): a bad top-k id, then a bad sampled id, then "é" split
    # over two byte tokens after it, which the UTF-8 correction decodes with the bad id in its
    # context.
    rows = [[1, -1, 2**32], [-1, 2, 3], [5, 4, 2**40], [6, 3, -1]]
    proc = _sampled(processor_cls, lp, flat, ByteLevelTokenizer(), rows, "ids -1, 2**32, 2**40")
    assert _decoded(proc.logprobs) == [
        [(1, "hello"), (-1, ""), (2**32, "")],
        [(-1, ""), (2, " world"), (3, "!")],
        [(5, ""), (4, " a"), (2**40, "")],
        [(6, "é"), (3, "!"), (-1, "")],
    ], f"sample logprobs ({kind}) decoded as {_decoded(proc.logprobs)}"

    # Prompt logprobs (an unfilled or corrupted prompt-logprobs tensor).
    prompt = (
        torch.tensor([[1, 3], [-1, 2], [5, 2**40], [6, 4]]),
        torch.full((4, 2), -1.0),
        torch.ones(4, dtype=torch.int64),
        None,
    )
    proc = processor_cls(
        tokenizer=ByteLevelTokenizer(),
        logprobs=None,
        prompt_logprobs=lp.create_prompt_logprobs(flat),
        cumulative_logprob=None,
        num_logprobs=None,
        num_prompt_logprobs=1,
    )
    output = SimpleNamespace(new_logprobs=None, new_prompt_logprobs_tensors=prompt)
    _run(f"prompt logprobs ({kind}) with ids -1, 2**40", lambda: proc.update_from_output(output))
    assert _decoded(proc.prompt_logprobs) == [
        [],
        [(1, "hello"), (3, "!")],
        [(-1, ""), (2, " world")],
        [(5, ""), (2**40, "")],
        [(6, "é"), (4, " a")],
    ], f"prompt logprobs ({kind}) decoded as {_decoded(proc.prompt_logprobs)}"
