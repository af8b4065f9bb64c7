"""bench/fuzz_oracle.py on stand-in answers: each check flags an answer that breaks it, and keeps the
exceptions vLLM documents (an early end, a kept stop string, an echoed prompt, min_tokens before a
stop string, a grammar that ended before min_tokens, completions' sampled token among the
alternatives)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fuzz_oracle import read_answer, violations  # noqa: E402

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"


class Words:
    """A tokenizer of whole words, as a byte-level BPE's: a word after a space is another token
    (" cat", id 12, is not "cat", id 3); id 8 is the end of text, which decodes to its name, as a
    transformers tokenizer's ``decode`` does unless told to skip special tokens; id 14 is a byte
    that begins a character and no more, which decodes to U+FFFD."""

    WORDS = ["yes", "no", "the", "cat", "river", "stone", "{", "}", "<eos>", " yes", " no", " the", " cat", " river",
             "\ufffd"]  # fmt: skip
    SPECIAL = 8

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.WORDS.index(word) for word in re.findall(r" ?[^ ]+", text)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(self.WORDS[i] for i in ids if not (skip_special_tokens and i == self.SPECIAL))


TOK = Words()


def _count(choice: dict[str, Any]) -> int:
    logprobs = choice.get("logprobs") or {}
    return len(choice.get("token_ids") or logprobs.get("tokens") or logprobs.get("content") or [])


def plain(*choices: dict[str, Any], usage: dict | None = None) -> str:
    """A plain answer; its usage, unless given, sums the tokens each choice says it has."""
    return json.dumps({"choices": list(choices), "usage": usage or {"completion_tokens": sum(map(_count, choices))}})


def cmpl(text: str, index: int = 0, finish: str = "stop", stop_reason: Any = None, **more: Any) -> dict:
    return {"index": index, "text": text, "finish_reason": finish, "stop_reason": stop_reason, **more}


def chat(content: str, index: int = 0, finish: str = "stop", stop_reason: Any = None, **more: Any) -> dict:
    message = {"role": "assistant", "content": content}
    return {"index": index, "message": message, "finish_reason": finish, "stop_reason": stop_reason, **more}


def judged(endpoint: str, body: dict, text: str, streamed: bool = False) -> list[str]:
    return violations(endpoint, body, read_answer(endpoint, text, streamed), TOK)


def sse(*chunks: dict) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


# --- structured output ---------------------------------------------------------------------------

CHOICE = {"structured_outputs": {"choice": ["yes", "no"]}}


def test_a_choice_must_be_one_of_the_choices() -> None:
    assert judged(CMPL, CHOICE, plain(cmpl("yes"))) == []
    (found,) = judged(CMPL, CHOICE, plain(cmpl("yesve")))
    assert "'yesve' is not one of ['yes', 'no']" in found


def test_a_choice_cut_by_its_length_need_only_begin_one() -> None:
    assert judged(CMPL, CHOICE, plain(cmpl("ye", finish="length"))) == []
    assert judged(CMPL, CHOICE, plain(cmpl("yesve", finish="length")))  # vLLM 0.32's ignore_eos answer


def test_a_choice_cut_by_the_requests_own_stop_need_only_begin_one() -> None:
    body = {**CHOICE, "stop": ["s"], "stop_token_ids": [7]}
    assert judged(CMPL, body, plain(cmpl("ye", stop_reason="s"))) == []
    assert judged(CMPL, body, plain(cmpl("n", stop_reason=7))) == []
    assert judged(CMPL, body, plain(cmpl("ye", stop_reason=None)))  # the end of text: the grammar must be done


def test_a_kept_stop_string_is_not_part_of_the_constrained_text() -> None:
    body = {**CHOICE, "stop": ["es"], "include_stop_str_in_output": True}
    assert judged(CMPL, body, plain(cmpl("yes", stop_reason="es"))) == []  # "y" + the stop string


def test_a_kept_end_token_is_not_part_of_the_constrained_text() -> None:
    """include_stop_str_in_output with skip_special_tokens false spells the end token out (seen)."""
    body = {**CHOICE, "include_stop_str_in_output": True, "skip_special_tokens": False}
    assert judged(CMPL, body, plain(cmpl("no<eos>", token_ids=[1, 8]))) == []
    assert judged(CMPL, {**body, "stop_token_ids": [6]}, plain(cmpl("yes{", stop_reason=6, token_ids=[0, 6]))) == []
    assert judged(CMPL, {**CHOICE, "skip_special_tokens": False}, plain(cmpl("no<eos>", token_ids=[1, 8])))


def test_an_echoed_prompt_is_not_part_of_the_constrained_text() -> None:
    body = {**CHOICE, "echo": True, "prompt": "the cat "}
    assert judged(CMPL, body, plain(cmpl("the cat no"))) == []
    assert judged(CMPL, body, plain(cmpl("the cat maybe")))


def test_a_regex_must_match_the_whole_text() -> None:
    body = {"structured_outputs": {"regex": "[0-9]{1,3}"}}
    assert judged(CMPL, body, plain(cmpl("42"))) == []
    assert "does not match" in judged(CMPL, body, plain(cmpl("42a")))[0]
    assert judged(CMPL, body, plain(cmpl("12", finish="length"))) == []
    assert "does not begin a match" in judged(CMPL, body, plain(cmpl("x", finish="length")))[0]


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_json_schema_answers_must_validate() -> None:
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    assert judged(CHAT, body, plain(chat('{"answer": "x"}'))) == []
    assert "not valid against the schema" in judged(CHAT, body, plain(chat('{"other": 1}')))[0]
    # the shape seen on the patched server: U+FFFD before the object, finish_reason "stop"
    assert "not JSON" in judged(CHAT, body, plain(chat('\ufffd{"answer": "x"}')))[0]


def test_a_json_answer_cut_short_is_flagged_only_where_it_cannot_become_valid() -> None:
    body = {"structured_outputs": {"json": SCHEMA}, "max_tokens": 4}
    assert judged(CMPL, body, plain(cmpl('{"answer": "x', finish="length"))) == []
    assert judged(CMPL, body, plain(cmpl("", finish="length"))) == []
    assert "not the start of a JSON object" in judged(CMPL, body, plain(cmpl('"answ', finish="length")))[0]
    assert "not valid against the schema" in judged(CMPL, body, plain(cmpl('{"b": 1}', finish="length")))[0]


def test_json_object_must_be_an_object() -> None:
    body = {"response_format": {"type": "json_object"}}
    assert judged(CHAT, body, plain(chat('{"a": [1]}'))) == []
    assert "not an object" in judged(CHAT, body, plain(chat("[1, 2]")))[0]
    # cut by the request's own stop string: a legitimate end (seen on the patched server)
    assert judged(CHAT, {**body, "stop": ["cat"]}, plain(chat('{"a": "the ', stop_reason="cat"))) == []


# --- choices and lengths -------------------------------------------------------------------------


def test_n_choices_each_once() -> None:
    assert judged(CMPL, {"n": 2}, plain(cmpl("a", 0), cmpl("b", 1))) == []
    assert judged(CMPL, {"n": 2}, plain(cmpl("a", 0))) == ["choices [0] for n=2"]
    assert judged(CMPL, {"n": 2}, plain(cmpl("a", 0), cmpl("b", 0))) == ["choice index 0 twice"]


def test_no_more_tokens_than_max_tokens_and_completions_default_16() -> None:
    assert judged(CMPL, {"max_tokens": 3}, plain(cmpl("", token_ids=[1, 2, 3]))) == []
    assert judged(CMPL, {"max_tokens": 3}, plain(cmpl("", token_ids=[1, 2, 3, 4]))) == [
        "choice 0: 4 tokens, max_tokens 3"
    ]
    assert judged(CMPL, {}, plain(cmpl("", token_ids=[1] * 17))) == ["choice 0: 17 tokens, max_tokens 16"]
    assert judged(CHAT, {}, plain(chat("", token_ids=[1] * 40))) == []  # chat: no default of its own


def test_min_tokens_unless_a_grammar_ended_first() -> None:
    assert judged(CMPL, {"min_tokens": 4}, plain(cmpl("", token_ids=[1, 2]))) == [
        "choice 0: 2 tokens, min_tokens 4 (stop)"
    ]
    assert judged(CMPL, {"min_tokens": 4, **CHOICE}, plain(cmpl("no", token_ids=[1, 8]))) == []


def test_lengths_are_counted_from_the_logprobs_when_no_ids_are_returned() -> None:
    logprobs = {"tokens": ["a", "b", "c"], "token_logprobs": [-1.0, -1.0, -1.0], "top_logprobs": [None] * 3}
    assert judged(CMPL, {"max_tokens": 2}, plain(cmpl("abc", logprobs=logprobs))) == [
        "choice 0: 3 tokens, max_tokens 2"
    ]


# --- stop strings --------------------------------------------------------------------------------


def test_a_stop_string_in_the_text_is_flagged() -> None:
    assert judged(CMPL, {"stop": ["cat"]}, plain(cmpl("the cat sat"))) == [
        "choice 0: stop string 'cat' in the text at 4: 'the cat sat'"
    ]
    assert judged(CMPL, {"stop": ["cat"], "include_stop_str_in_output": True}, plain(cmpl("the cat"))) == []


def test_a_stop_string_inside_the_first_min_tokens_tokens_is_not_looked_for() -> None:
    # "the cat" is 2 tokens (the, " cat"); with min_tokens 2 vLLM looks for stop strings from the 3rd on
    body = {"stop": ["cat"], "min_tokens": 2}
    assert judged(CMPL, body, plain(cmpl("the cat river", token_ids=[2, 12, 13]))) == []
    body = {"stop": ["cat"], "min_tokens": 1}
    assert judged(CMPL, body, plain(cmpl("the cat river", token_ids=[2, 12, 13])))


# --- echo ----------------------------------------------------------------------------------------


def test_echo_begins_with_the_prompt_text_or_its_decoded_ids() -> None:
    assert judged(CMPL, {"echo": True, "prompt": "the cat"}, plain(cmpl("the cat no"))) == []
    assert judged(CMPL, {"echo": True, "prompt": "the cat"}, plain(cmpl("no"))) == [
        "choice 0: echo without the prompt 'the cat'"
    ]
    assert judged(CMPL, {"echo": True, "prompt": [2, 12]}, plain(cmpl("the cat yes"))) == []
    assert judged(CMPL, {"echo": True, "prompt": [2, 12]}, plain(cmpl("yes")))


def test_a_prompt_that_ends_inside_a_character_does_not_begin_the_text() -> None:
    # vLLM #48853: the detokenizer primed with such a prompt puts its text in front of the answer
    tail = {"prompt": [8, 2, 14], **CHOICE}
    assert judged(CMPL, tail, plain(cmpl("the\ufffdyes"))) == [
        "choice 0: the text begins with the prompt's own text 'the\ufffd'"  # the choice is judged on "yes"
    ]
    assert judged(CMPL, tail, plain(cmpl("yes"))) == []
    shown = {**tail, "skip_special_tokens": False}  # the end-of-text token is part of the prompt's text
    assert judged(CMPL, shown, plain(cmpl("<eos>the\ufffdyes"))) == [
        "choice 0: the text begins with the prompt's own text '<eos>the\ufffd'"
    ]
    # a prompt that ends on a whole character may be repeated by the model: a choice breaks its constraint
    assert judged(CMPL, {"prompt": [2], **CHOICE}, plain(cmpl("theyes"))) == [
        "choice 0 (stop, stop_reason None): 'theyes' is not one of ['yes', 'no']"
    ]
    assert judged(CMPL, {**tail, "echo": True}, plain(cmpl("<eos>the\ufffdyes"))) == []  # echoed: as asked
    # after the echo, the same text again; a truncated prompt leaks only what the engine got
    assert judged(CMPL, {**tail, "echo": True}, plain(cmpl("<eos>the\ufffdthe\ufffdyes"))) == [
        "choice 0: after the echoed prompt, the text begins with the prompt's own text 'the\ufffd'"
    ]
    cut = {**tail, "truncate_prompt_tokens": 1}
    assert judged(CMPL, cut, plain(cmpl("\ufffdyes"))) == [
        "choice 0: the text begins with the prompt's own text '\ufffd'"
    ]


# --- logprobs ------------------------------------------------------------------------------------


def cmpl_logprobs(tokens: list[str], values: list[Any], top: list[Any]) -> dict:
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": top, "text_offset": [0] * len(tokens)}


def test_completions_logprobs_hold_the_sampled_token_finite_and_at_most_k_plus_one() -> None:
    good = cmpl_logprobs(["a"], [-0.5], [{"a": -0.5}])
    assert judged(CMPL, {"logprobs": 0}, plain(cmpl("a", logprobs=good))) == []
    missing = cmpl_logprobs(["a"], [-0.5], [{"b": -0.2}])
    assert "the sampled 'a' not among" in judged(CMPL, {"logprobs": 1}, plain(cmpl("a", logprobs=missing)))[0]
    many = cmpl_logprobs(["a"], [-0.5], [{"a": -0.5, "b": -1.0, "c": -2.0}])
    assert judged(CMPL, {"logprobs": 1}, plain(cmpl("a", logprobs=many))) == [
        "choice 0: token 0: 3 alternatives, 1 asked"
    ]
    for bad in (float("nan"), 0.5, None):
        broken = cmpl_logprobs(["a"], [bad], [{"a": -0.5}])
        assert "logprob" in judged(CMPL, {"logprobs": 0}, plain(cmpl("a", logprobs=broken)))[0]
    floor = cmpl_logprobs(["a"], [-9999.0], [{"a": -9999.0}])  # vLLM's -inf
    assert judged(CMPL, {"logprobs": 0}, plain(cmpl("a", logprobs=floor))) == []


def test_an_echoed_prompts_first_position_has_no_logprob() -> None:
    echoed = cmpl_logprobs(["the", "a"], [None, -0.1], [None, {"a": -0.1}])
    body = {"logprobs": 0, "echo": True, "prompt": "the"}
    assert judged(CMPL, body, plain(cmpl("thea", logprobs=echoed))) == []


def test_chat_logprobs_hold_at_most_top_logprobs_and_the_sampled_token_from_one_on() -> None:
    def content(top: list) -> dict:
        return {"content": [{"token": "a", "logprob": -0.1, "top_logprobs": top}]}

    assert judged(CHAT, {"logprobs": True, "top_logprobs": 0}, plain(chat("a", logprobs=content([])))) == []
    two = content([{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -3.0}])
    assert judged(CHAT, {"logprobs": True, "top_logprobs": 2}, plain(chat("a", logprobs=two))) == []
    assert (
        "2 alternatives, 1 asked"
        in judged(CHAT, {"logprobs": True, "top_logprobs": 1}, plain(chat("a", logprobs=two)))[0]
    )
    other = content([{"token": "b", "logprob": -3.0}])
    assert "the sampled 'a'" in judged(CHAT, {"logprobs": True, "top_logprobs": 1}, plain(chat("a", logprobs=other)))[0]


def test_prompt_logprobs_one_per_prompt_token_the_first_none() -> None:
    ok = [None, {"3": {"logprob": -1.0, "rank": 1, "decoded_token": "cat"}}]
    assert judged(CMPL, {"prompt_logprobs": 1}, plain(cmpl("x", prompt_logprobs=ok))) == []
    assert judged(CMPL, {"prompt_logprobs": 1}, plain(cmpl("x", prompt_logprobs=None)))
    assert judged(CMPL, {"prompt_logprobs": 1}, plain(cmpl("x", prompt_logprobs=[{"2": {"logprob": -1.0}}])))
    nan = [None, {"3": {"logprob": float("nan")}}]
    assert judged(CMPL, {"prompt_logprobs": 1}, plain(cmpl("x", prompt_logprobs=nan)))


# --- token ids -----------------------------------------------------------------------------------


def test_allowed_token_ids_count_every_generated_id_the_end_included() -> None:
    assert judged(CMPL, {"allowed_token_ids": [0, 1]}, plain(cmpl("yesno", token_ids=[0, 1]))) == []
    assert judged(CMPL, {"allowed_token_ids": [0, 1]}, plain(cmpl("yes", token_ids=[0, 8]))) == [
        "choice 0: ids [8] outside allowed_token_ids [0, 1]"
    ]


def test_bad_words_as_vllm_tokenizes_them_with_and_without_a_leading_space() -> None:
    assert judged(CMPL, {"bad_words": ["cat"]}, plain(cmpl("the river", token_ids=[2, 13]))) == []
    alone = judged(CMPL, {"bad_words": ["cat"]}, plain(cmpl("thecat", token_ids=[2, 3])))
    assert alone == ["choice 0: bad word 'cat' ('cat' = ids [3]) among [2, 3]"]
    spaced = judged(CMPL, {"bad_words": ["cat river"]}, plain(cmpl("the cat river", token_ids=[2, 12, 13])))
    assert spaced == ["choice 0: bad word 'cat river' (' cat river' = ids [12, 13]) among [2, 12, 13]"]
    assert judged(CMPL, {"bad_words": ["cat river"]}, plain(cmpl("the cat", token_ids=[2, 12]))) == []


# --- streams -------------------------------------------------------------------------------------


def test_a_stream_is_judged_as_the_answer_it_puts_together() -> None:
    def chunk(index: int, text: str, finish: str | None = None, ids: list[int] | None = None) -> dict:
        return {
            "choices": [{"index": index, "text": text, "finish_reason": finish, "stop_reason": None, "token_ids": ids}]
        }

    text = sse(chunk(0, "y", ids=[0]), chunk(1, "n", ids=[1]), chunk(0, "es", "stop", [8]), chunk(1, "o", "stop", [8]))
    answer = read_answer(CMPL, text, True)
    assert [(c.index, c.text, c.token_ids) for c in answer.choices] == [(0, "yes", [0, 8]), (1, "no", [1, 8])]
    assert violations(CMPL, {"n": 2, **CHOICE}, answer, TOK) == []
    broken = sse(chunk(0, "y"), chunk(0, "esve", "length"))
    assert judged(CMPL, {**CHOICE, "max_tokens": 2}, broken, streamed=True)


def test_a_chat_stream_joins_its_deltas() -> None:
    def delta(content: str, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}

    body = {"response_format": {"type": "json_object"}}
    assert judged(CHAT, body, sse(delta('{"a"'), delta(": 1}", "stop")), streamed=True) == []
    assert judged(CHAT, body, sse(delta("[1"), delta("]", "stop")), streamed=True)


@pytest.mark.parametrize("endpoint", [CMPL, CHAT])
def test_a_plain_right_answer_has_no_findings(endpoint: str) -> None:
    make = cmpl if endpoint == CMPL else chat
    assert judged(endpoint, {"max_tokens": 4}, plain(make("the cat", token_ids=[2, 9, 3]))) == []


def test_usage_sums_the_choices_and_a_stream_has_it_only_when_asked() -> None:
    two = (cmpl("yes", 0, token_ids=[0, 8]), cmpl("no", 1, token_ids=[1, 8]))
    assert judged(CMPL, {"n": 2}, plain(*two)) == []
    assert judged(CMPL, {"n": 2}, plain(*two, usage={"completion_tokens": 2})) == [
        "usage.completion_tokens 2, the choices' tokens [2, 2]"
    ]
    assert judged(CMPL, {}, json.dumps({"choices": [cmpl("yes")]})) == ["usage missing (stream False, None)"]
    chunk = {"choices": [{"index": 0, "text": "yes", "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"completion_tokens": 1}}
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    assert judged(CMPL, asked, sse(chunk, usage), streamed=True) == []
    assert judged(CMPL, asked, sse(chunk), streamed=True) == ["usage missing (stream True, {'include_usage': True})"]
    assert judged(CMPL, {"stream": True}, sse(chunk, usage), streamed=True) == ["usage sent (stream True, None)"]


def test_echo_of_a_truncated_prompt_shows_the_prompt_as_sent() -> None:
    """vLLM echoes the whole prompt, though the model saw only its last truncate_prompt_tokens (seen)."""
    body = {"echo": True, "prompt": "the cat river", "truncate_prompt_tokens": 1}
    assert judged(CMPL, body, plain(cmpl("the cat river yes"))) == []
    assert judged(CMPL, body, plain(cmpl(" river yes"))) == ["choice 0: echo without the prompt 'the cat river'"]
    ids = {"echo": True, "prompt": [2, 12, 13], "truncate_prompt_tokens": 1}
    assert judged(CMPL, ids, plain(cmpl("the cat river yes"))) == []
