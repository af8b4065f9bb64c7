#!/usr/bin/env python3
"""Make a tiny Qwen3 model with a SentencePiece (slow) tokenizer of 400 pieces and a vocabulary
padded to 1024: ``make_sp_model.py DIR``.

The shape of a real checkpoint whose ``lm_head`` has more rows than its tokenizer has pieces (rows
padded to a multiple for the kernels): most of the 1024 ids the random model samples or ranks have
no piece. vLLM's sampled-token detokenizer skips such ids; its logprobs path hands each one to
``tokenizer.decode``, and a SentencePiece tokenizer raises ``IndexError`` for it (a fast one
returns nothing). That is the logprobs-decode-guard fix's symptom on a real server.

Nothing is downloaded: a BPE model of 400 pieces trained here with the ``sentencepiece`` library on
``make_model.corpus()`` (``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3, the ChatML markers as
user-defined pieces), saved as ``spiece.model`` with a ``tokenizer_config.json`` naming
``BertGenerationTokenizer`` (transformers' plain ``SentencePieceBackend`` tokenizer; transformers 5
loads a SentencePiece tokenizer as such only when its class is one; ``LlamaTokenizer`` or
``T5Tokenizer`` would be converted to a fast one) and no ``tokenizer.json``; the Qwen3 config and
random weights of ``make_model.py`` (fixed seed), with vocab 1024. Serve it with
``HF_HUB_OFFLINE=1``. Runs under the serve environment's interpreter (torch, transformers,
sentencepiece, safetensors).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from make_model import CHAT_TEMPLATE, corpus, save_weights

PIECES = 400
VOCAB = 1024  # the config's vocab_size: ids PIECES..VOCAB-1 have no piece
MARKERS = ["<|im_start|>", "<|im_end|>"]


def make(out: Path) -> None:
    import sentencepiece as spm
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        model_type="bpe",
        vocab_size=PIECES,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        user_defined_symbols=MARKERS,
        num_threads=1,
        minloglevel=2,
    )
    (out / "spiece.model").write_bytes(model.getvalue())
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "BertGenerationTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "sep_token": "</s>",  # its default "<::::>" would be added as a 401st token
                "model_max_length": 512,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    ids = {piece: sp.piece_to_id(piece) for piece in ("<s>", "</s>", "<pad>")}

    save_weights(out, bos=ids["<s>"], eos=ids["</s>"], pad=ids["<pad>"], vocab=VOCAB)
    # as the server loads it: beside a Qwen3 config, whose own tokenizer class is a fast one
    tokenizer = AutoTokenizer.from_pretrained(out)
    if tokenizer.is_fast or len(tokenizer) != PIECES:
        raise SystemExit(f"make_sp_model: loads as {type(tokenizer).__name__} of {len(tokenizer)} tokens")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_sp_model.py DIR")
    make(Path(sys.argv[1]))
    print(f"make_sp_model: {sys.argv[1]}")
