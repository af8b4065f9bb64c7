"""detokenizer-prompt-tail: a prompt that ends inside a character must not leak into the output.

Loads vLLM's real vllm/v1/engine/detokenizer.py and vllm/tokenizers/detokenizer_utils.py from the
given tree (their vLLM imports stubbed; length_from_prompt_token_ids_or_embeds is the tree's own)
with the real ``tokenizers`` and ``transformers`` libraries, and a real byte-level BPE tokenizer
built here with ``tokenizers`` (the 256 byte symbols of GPT-2's ByteLevel alphabet, a few merges,
two special tokens) and wrapped as a ``transformers`` fast tokenizer, so that from_new_request's
``isinstance(tokenizer, TokenizersBackend)`` is the real check. One special token is the eos token,
so that it is in ``all_special_ids``, as a model's end token is; the other is only marked special
in the tokenizer's added tokens, as some tokenizer.json files mark tokens their config does not
name: decode(skip_special_tokens=True) skips both, ``all_special_ids`` lists the first alone.
Each request is driven as OutputProcessor does: IncrementalDetokenizer.from_new_request, then
update() with each step's new token ids and get_next_output_text(finished, delta), streamed (one
token a step, delta) and not (all tokens in one step, the final text).

A second tokenizer has a byte-fallback model and Llama 2's decoder chain (Replace "▁" by " ",
ByteFallback, Fuse, Strip one leading space), as sentencepiece models converted to tokenizer.json
have: there a run of byte tokens that holds an invalid byte decodes to one U+FFFD per byte, and the
space byte token <0x20>, like "▁", decodes to no text on its own (the leading space is stripped).

A prompt whose token ids end inside a UTF-8 sequence (here the lead byte 0xF0 of a 4-byte
character, or 2 of the 3 bytes of one), or end with one followed by special tokens that the request
skips (any number of them, listed in ``all_special_ids`` or not: the fix looks past the prompt's
trailing tokens that decode to no text on their own before it decodes the prompt's last tokens),
makes DecodeStream(ids=prompt) set no text prefix, and its first step returns the whole prompt's
text with the first output token. The output text must be what the output tokens add to the
prompt's text: decode(prompt + output) less decode(prompt).

The fix looks past at most 64 such trailing tokens (PROMPT_SILENT_TOKENS, one decode each), so that
a prompt of 100,000 of them costs 65 decodes, not 100,001 (counted here through the tokenizer's
decode). Past the bound it decodes the 8 tokens before the last 64: a split character followed by
65 to 71 tokens that decode to no text is still caught (those 8 tokens hold it), one followed by 72
or more is not, and its prompt's text leaks as before the fix (the limit, asserted as such here and
written in fix.toml).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from fixpack.proofkit import Trees, load_function, load_module, stub_modules

SPECIAL = "<|end|>"
# Skipped by decode(skip_special_tokens=True) too, but not in the tokenizer's all_special_ids.
UNLISTED_SPECIAL = "<|mark|>"
# The tokenizer's merges, each split in two halves (as bytes, latin-1): "blue" is one token, and
# " \xf0" one token holding a space and the lead byte of a 4-byte character. Any other byte is a
# token of its own (id == byte).
TEXT_MERGES = ("bl", "ue", "blue", " \xf0")


def _byte_symbols() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (the ByteLevel alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return symbols


def _tokenizer() -> Any:
    """A byte-level BPE tokenizer: id b is the byte b, then merged tokens, then the special tokens.

    SPECIAL is the eos token (in all_special_ids); UNLISTED_SPECIAL is an added token marked special
    and nothing more (decode skips it, all_special_ids does not list it).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    symbols = _byte_symbols()
    vocab = {symbols[b]: b for b in range(256)}
    merges: list[tuple[str, str]] = []
    for piece in TEXT_MERGES:
        raw = piece.encode("latin-1")
        left, right = raw[: len(raw) // 2], raw[len(raw) // 2 :]
        pair = ("".join(symbols[b] for b in left), "".join(symbols[b] for b in right))
        merges.append(pair)
        vocab[pair[0] + pair[1]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIAL, special=True), AddedToken(UNLISTED_SPECIAL, special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL)


def _byte_fallback_tokenizer() -> Any:
    """A byte-fallback tokenizer with Llama 2's decoder chain: <unk>, <s>, </s> (the special tokens,
    </s> the eos token), the 256 byte tokens <0x00>..<0xFF> (id 3 + byte), "▁", "▁hi", "▁blue"."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in ("▁", "▁hi", "▁blue"):
        vocab[piece] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _modules(trees: Trees) -> ModuleType:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    root = Path(trees.vllm)
    stub_modules("vllm.logger", "vllm.tokenizers", "vllm.utils", "vllm.v1.engine")
    sys.modules["vllm.utils"].length_from_prompt_token_ids_or_embeds = load_function(  # type: ignore[attr-defined]
        root / "vllm/utils/__init__.py", "length_from_prompt_token_ids_or_embeds"
    )
    load_module("vllm.tokenizers.detokenizer_utils", root / "vllm/tokenizers/detokenizer_utils.py")
    detok = load_module("vllm.v1.engine.detokenizer", root / "vllm/v1/engine/detokenizer.py")
    if not detok.USE_FAST_DETOKENIZER:
        import tokenizers

        raise RuntimeError(
            f"tokenizers {tokenizers.__version__} has no DecodeStream(ids=...): vLLM uses the fast "
            "detokenizer only with tokenizers >= 0.22.0, which this proof needs to show the bug"
        )
    return detok


def _request(prompt: list[int] | None, skip_special_tokens: bool, prompt_embeds: Any = None) -> Any:
    """The fields of EngineCoreRequest and SamplingParams the detokenizers read."""
    params = SimpleNamespace(
        skip_special_tokens=skip_special_tokens,
        spaces_between_special_tokens=True,
        stop=None,
        min_tokens=0,
        include_stop_str_in_output=False,
    )
    return SimpleNamespace(
        request_id="req-0", prompt_token_ids=prompt, prompt_embeds=prompt_embeds, sampling_params=params
    )


def _serve(detok: ModuleType, tokenizer: Any, request: Any, output: list[int], stream: bool) -> tuple[str, Any]:
    """The output text as OutputProcessor builds it: (text, the detokenizer's class)."""
    d = detok.IncrementalDetokenizer.from_new_request(tokenizer, request)
    if not stream:
        d.update(list(output), False)
        return d.get_next_output_text(True, False), type(d)
    text = ""
    for i, token in enumerate(output):
        d.update([token], False)
        text += d.get_next_output_text(i == len(output) - 1, True)
    return text, type(d)


def _ids(tokenizer: Any, *parts: str | bytes | list[int]) -> list[int]:
    """Token ids: text is encoded, bytes are byte tokens (id == byte), a list is taken as is."""
    ids: list[int] = []
    for part in parts:
        if isinstance(part, str):
            ids += tokenizer.encode(part, add_special_tokens=False)
        elif isinstance(part, bytes):
            ids += list(part)
        else:
            ids += part
    return ids


def _expected(tokenizer: Any, prompt: list[int], output: list[int], skip: bool) -> str:
    """What the output tokens add to the prompt's text."""
    head = tokenizer.decode(prompt, skip_special_tokens=skip)
    full = tokenizer.decode(prompt + output, skip_special_tokens=skip)
    assert full.startswith(head), f"proof setup: {full!r} does not continue {head!r}"
    return full[len(head) :]


def _check_decodes(detok: ModuleType, tokenizer: Any, request: Any) -> tuple[int, Any]:
    """How many times from_new_request calls the tokenizer's decode (the fix's check alone does: the
    fast detokenizer primes its DecodeStream without it), and the detokenizer's class."""
    calls = 0
    decode = tokenizer.decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return decode(*args, **kwargs)

    tokenizer.decode = counting
    try:
        d = detok.IncrementalDetokenizer.from_new_request(tokenizer, request)
    finally:
        del tokenizer.decode
    return calls, type(d)


def _leak_message(case: str, text: str, prompt_text: str, want: str) -> str:
    visible = prompt_text.rstrip("\ufffd")
    if visible and visible in text:
        return (
            f"{case}: the output text {text!r} carries the prompt's text {prompt_text!r} "
            f"(DecodeStream primed with a prompt that ends inside a character); want {want!r}"
        )
    return f"{case}: the output text is {text!r}, want {want!r}"


def check(trees: Trees) -> None:
    detok = _modules(trees)
    tokenizer = _tokenizer()
    symbols = _byte_symbols()
    lead = tokenizer.convert_tokens_to_ids(symbols[0x20] + symbols[0xF0])  # the token " \xf0"
    assert _ids(tokenizer, "hi \U0001f600") == [104, 105, lead, 0x9F, 0x98, 0x80], "proof setup: tokenizer"
    end = tokenizer.convert_tokens_to_ids(SPECIAL)
    mark = tokenizer.convert_tokens_to_ids(UNLISTED_SPECIAL)
    assert tokenizer.all_special_ids == [end], f"proof setup: all_special_ids {tokenizer.all_special_ids}"
    assert tokenizer.decode([end, mark], skip_special_tokens=True) == "", "proof setup: both special tokens skipped"
    blue = _ids(tokenizer, "blue")
    assert len(blue) == 1, "proof setup: 'blue' is one merged token"

    # Prompts that end inside a character, with their outputs: the text must be the output's alone.
    split = [
        # The fuzzer's finding: the prompt ends with a token holding " " and the lead byte 0xF0 of a
        # 4-byte character; the model answers a choice ("blue").
        ("prompt ends with the lead byte of a 4-byte character", _ids(tokenizer, "hi", [lead]), blue, True),
        # A lone lead byte token, and a JSON answer of several tokens.
        ("prompt ends with a lone lead byte", _ids(tokenizer, "hi ", b"\xf0"), _ids(tokenizer, '{"n": 1}'), True),
        # 2 of the 3 bytes of "€" (E2 82 AC).
        ("prompt ends with 2 of 3 bytes", _ids(tokenizer, "hi ", b"\xe2\x82"), _ids(tokenizer, '{"n": 1}'), True),
        # A stray continuation byte: the text ends with U+FFFD as well, and the stream sets no prefix.
        ("prompt ends with a stray continuation byte", _ids(tokenizer, "hi ", b"\x80"), blue, True),
        # A special token after the split character, skipped in the text: the text still ends inside
        # the character, as DecodeStream (skipping it too) sees it.
        ("split character, then a skipped special token", _ids(tokenizer, "hi", [lead, end]), blue, True),
        # Seven of them, eight (as many as the prompt tokens the check decodes: it must look past
        # them to the split character) and twelve.
        ("split character, then 7 skipped special tokens", _ids(tokenizer, "hi", [lead] + [end] * 7), blue, True),
        ("split character, then 8 skipped special tokens", _ids(tokenizer, "hi", [lead] + [end] * 8), blue, True),
        ("split character, then 12 skipped special tokens", _ids(tokenizer, "hi", [lead] + [end] * 12), blue, True),
        # The check looks past at most 64 trailing tokens that decode to no text, then decodes the 8
        # tokens before them: after 64 it sees the split character as the last of those 8, after 71
        # as the first (then the prompt's last 72 tokens are 71 skipped special tokens and it).
        ("split character, then 64 skipped special tokens", _ids(tokenizer, "hi", [lead] + [end] * 64), blue, True),
        (
            "split character, then 71 skipped special tokens of both kinds",
            _ids(tokenizer, "hi", [lead] + [end, mark] * 35 + [mark]),
            blue,
            True,
        ),
        ("split character, then 71 skipped special tokens", _ids(tokenizer, "hi", [lead] + [end] * 71), blue, True),
        # The split character is the prompt's first token: nothing before it to decode.
        ("a lone split character, then 8 skipped special tokens", [lead] + [end] * 8, blue, True),
        # Skipped special tokens that all_special_ids does not list: decode skips them all the same,
        # so the check must look past them by what they decode to, not by all_special_ids. Behind 8
        # or more of them, the prompt's last 8 tokens alone decode to no text.
        (
            "split character, then a skipped special token not in all_special_ids",
            _ids(tokenizer, "hi", [lead, mark]),
            blue,
            True,
        ),
        (
            "split character, then 7 skipped special tokens not in all_special_ids",
            _ids(tokenizer, "hi", [lead] + [mark] * 7),
            blue,
            True,
        ),
        (
            "split character, then 8 skipped special tokens not in all_special_ids",
            _ids(tokenizer, "hi", [lead] + [mark] * 8),
            blue,
            True,
        ),
        (
            "split character, then 12 skipped special tokens not in all_special_ids",
            _ids(tokenizer, "hi", [lead] + [mark] * 12),
            blue,
            True,
        ),
        # Both kinds, mixed.
        (
            "split character, then 12 skipped special tokens of both kinds",
            _ids(tokenizer, "hi", [lead] + [end, mark, mark] * 4),
            blue,
            True,
        ),
    ]
    for case, prompt, output, skip in split:
        want = _expected(tokenizer, prompt, output, skip)
        prompt_text = tokenizer.decode(prompt, skip_special_tokens=skip)
        for stream in (True, False):
            text, _ = _serve(detok, tokenizer, _request(prompt, skip), output, stream)
            label = f"{case} ({'streamed' if stream else 'final text'})"
            assert text == want, _leak_message(label, text, prompt_text, want)

    # The bound: a prompt of 100,000 trailing skipped special tokens costs the check 64 single-token
    # decodes and the decode of the 8 tokens before them, not one decode per token (1.6 s on the API
    # server's event loop for this many). Behind whole text, the fast detokenizer gives the right text.
    silent = 100_000
    prompt = _ids(tokenizer, "hi!", [end, mark] * (silent // 2))
    calls, cls = _check_decodes(detok, tokenizer, _request(prompt, True))
    assert calls == 64 + 1, f"{silent} trailing skipped special tokens: the check decodes {calls} times, want 65"
    assert cls is detok.FastIncrementalDetokenizer, f"{silent} trailing skipped special tokens: {cls.__name__}"
    for stream in (True, False):
        text, _ = _serve(detok, tokenizer, _request(prompt, True), blue + [end], stream)
        label = f"'hi!', then {silent} skipped special tokens ({'streamed' if stream else 'final text'})"
        assert text == "blue", f"{label}: the output text is {text!r}, want 'blue'"
    # A prompt that decodes to no text at all, shorter than the bound: one decode per token, none of
    # the 8-token tail (the walk reaches the prompt's start).
    calls, cls = _check_decodes(detok, tokenizer, _request([end] * 12, True))
    assert calls == 12, f"12 skipped special tokens only: the check decodes {calls} times, want 12"
    # The bound's limit (fix.toml): after a split character, 72 or more tokens that decode to no text
    # leave the 8 tokens the check decodes (those before the last 64) without text; the request keeps
    # the fast detokenizer and its output text starts with the prompt's text, as before the fix.
    for silent in (72, 100_000):
        prompt = _ids(tokenizer, "hi", [lead] + [end] * silent)
        calls, cls = _check_decodes(detok, tokenizer, _request(prompt, True))
        case = f"split character, then {silent} skipped special tokens"
        assert calls == 64 + 1, f"{case}: the check decodes {calls} times, want 65"
        assert cls is detok.FastIncrementalDetokenizer, f"{case}: {cls.__name__}, the limit is the fast detokenizer"
        leak = tokenizer.decode(prompt + blue, skip_special_tokens=True)
        assert leak == "hi \ufffdblue", f"proof setup: {leak!r}"
        for stream in (True, False):
            text, _ = _serve(detok, tokenizer, _request(prompt, True), blue, stream)
            label = f"{case} ({'streamed' if stream else 'final text'})"
            assert text == leak, f"{label}: the output text is {text!r}; the documented limit gives {leak!r}"

    # The byte-fallback tokenizer: the prompt's text ends with U+FFFD when its last run of byte
    # tokens holds an invalid byte anywhere, and the check sees the run's last 8 tokens only.
    bf = _byte_fallback_tokenizer()
    eos = bf.convert_tokens_to_ids("</s>")
    hi, bf_blue = bf.convert_tokens_to_ids(["▁hi", "▁blue"])

    def byte_tokens(data: bytes) -> list[int]:
        return [3 + b for b in data]

    assert bf.decode(byte_tokens(b"\xf0\x9f\x98\x80")) == "\U0001f600", "proof setup: byte-fallback tokenizer"
    assert bf.decode(byte_tokens(b"\x80\n")) == "\ufffd\ufffd", "proof setup: an invalid run is all U+FFFD"
    assert bf.decode(byte_tokens(b" ")) == "", "proof setup: a lone space byte token decodes to no text"
    fallback = [
        # A stray continuation byte 8 tokens from the end (then 7 newlines, each a byte token, as
        # Llama 2 encodes "\n"): the run is invalid, and its last 8 tokens hold the stray byte.
        ("byte fallback: a stray byte, then 7 newlines", [hi, *byte_tokens(b"\x80" + b"\n" * 7)]),
        # The same with a skipped eos token after it: the check looks past it to the same 8 tokens.
        ("byte fallback: a stray byte, 7 newlines, then eos", [hi, *byte_tokens(b"\x80" + b"\n" * 7), eos]),
        # A split character then 9 space byte tokens: each decodes to no text alone (the decoder
        # strips the text's leading space), two together to a space. The check looks past them all.
        ("byte fallback: a split character, then 9 space bytes", [hi, *byte_tokens(b"\xf0" + b" " * 9)]),
        # 71 of them: past the 64 the check looks over, the 8 tokens it decodes still hold the split
        # character (with 72, the bound's limit, they do not: below).
        ("byte fallback: a split character, then 71 space bytes", [hi, *byte_tokens(b"\xf0" + b" " * 71)]),
        # A stray byte 10 tokens from the end, then an emoji and 5 newlines: the 8 tokens the check
        # decodes start inside the emoji, an invalid run too. (A 9-token tail would start with the
        # emoji's lead byte and decode cleanly; so do the check's 8 tokens with 4 newlines, and that
        # prompt leaks: the fix's limit, see fix.toml.)
        (
            "byte fallback: a stray byte, an emoji, then 5 newlines",
            [hi, *byte_tokens(b"\x80\xf0\x9f\x98\x80" + b"\n" * 5)],
        ),
    ]
    for case, prompt in fallback:
        output = [bf_blue, eos]
        want = _expected(bf, prompt, output, True)
        for stream in (True, False):
            text, _ = _serve(detok, bf, _request(prompt, True), output, stream)
            label = f"{case} ({'streamed' if stream else 'final text'})"
            assert text == want, _leak_message(label, text, bf.decode(prompt, skip_special_tokens=True), want)

    # The bound's limit (fix.toml) with byte fallback: after a split character, 72 space byte tokens
    # (each decodes to no text alone) leave the check 8 space bytes before the last 64, which decode
    # to spaces; the request keeps the fast detokenizer and the prompt's text leaks, as before the fix.
    prompt = [hi, *byte_tokens(b"\xf0" + b" " * 72)]
    output = [bf_blue, eos]
    leak = bf.decode(prompt + output, skip_special_tokens=True)
    assert leak == "hi" + "\ufffd" * 73 + " blue", f"proof setup: {leak!r}"
    for stream in (True, False):
        text, cls = _serve(detok, bf, _request(prompt, True), output, stream)
        label = f"byte fallback: a split character, then 72 space bytes ({'streamed' if stream else 'final text'})"
        assert cls is detok.FastIncrementalDetokenizer, f"{label}: {cls.__name__}, the limit is the fast detokenizer"
        assert text == leak, f"{label}: the output text is {text!r}; the documented limit gives {leak!r}"

    # The split character is completed by the first output tokens (9F 98 80 after " \xf0"): its bytes
    # straddle the prompt and the output, so decode(prompt + output) does not continue
    # decode(prompt). The output must not repeat the prompt and must end with the output's own text.
    prompt = _ids(tokenizer, "hi", [lead])
    output = _ids(tokenizer, b"\x9f\x98\x80", "blue")
    sensible = {"blue", "\U0001f600blue", tokenizer.decode(output)}
    for stream in (True, False):
        text, _ = _serve(detok, tokenizer, _request(prompt, True), output, stream)
        label = f"the output completes the prompt's split character ({'streamed' if stream else 'final text'})"
        assert text in sensible, _leak_message(label, text, tokenizer.decode(prompt), "blue")

    # Prompts that do not end inside a character keep the fast detokenizer, and their text.
    whole = [
        ("prompt ends on a whole character", _ids(tokenizer, "hi \U0001f600"), True),
        ("prompt ends with a special token", _ids(tokenizer, "hi", [end]), True),
        # Not skipped, the special token ends the text: the split character before it is no tail.
        ("split character, then a special token not skipped", _ids(tokenizer, "hi", [lead, end]), False),
        ("split character, then 8 special tokens not skipped", _ids(tokenizer, "hi", [lead] + [end] * 8), False),
        # A split character inside the prompt, then a skipped special token and a whole character.
        ("split character inside the prompt", _ids(tokenizer, "hi", [lead, end], "!"), True),
        ("empty prompt", [], True),
        ("prompt of skipped special tokens only", [end] * 3, True),
        ("prompt of 12 skipped special tokens only", [end] * 12, True),
        ("prompt of special tokens only, not skipped", [end] * 3, False),
    ]
    for case, prompt, skip in whole:
        want = _expected(tokenizer, prompt, blue + [end], skip)
        for stream in (True, False):
            text, cls = _serve(detok, tokenizer, _request(prompt, skip), blue + [end], stream)
            label = f"{case} ({'streamed' if stream else 'final text'})"
            assert cls is detok.FastIncrementalDetokenizer, f"{label}: {cls.__name__}, not the fast detokenizer"
            assert text == want, _leak_message(label, text, tokenizer.decode(prompt, skip_special_tokens=skip), want)

    # A prompt given as embeddings has no token ids: it keeps the fast detokenizer too.
    text, cls = _serve(detok, tokenizer, _request(None, True, prompt_embeds=[[0.0]] * 3), blue, False)
    assert cls is detok.FastIncrementalDetokenizer, f"prompt embeddings: {cls.__name__}, not the fast detokenizer"
    assert text == "blue", f"prompt embeddings: the output text is {text!r}, want 'blue'"
