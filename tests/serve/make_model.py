#!/usr/bin/env python3
"""Make a tiny Qwen3 model that ``vllm serve`` loads on a CPU: ``make_model.py DIR``.

Nothing is downloaded: a ``transformers`` Qwen3 config (hidden 128, 4 attention heads of 32, 2 KV
heads, 2 layers, vocab 1024), random weights from a fixed seed saved with safetensors, a byte-level
BPE tokenizer trained here with the ``tokenizers`` library on a generated text (1,000 tokens, the
ChatML special tokens among them) and a ChatML chat template. Serve it with ``HF_HUB_OFFLINE=1``.
CPU attention in vLLM takes head sizes 32, 64, 80 and up (16: every request fails), hence 4 heads of
32. Runs under the serve environment's interpreter (torch, transformers, tokenizers, safetensors).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = (
    "the a of to and in is it that for on with as was by at from this be or an are which one all were "
    "model server token request fix patch site vllm gaudi worker engine rank cache prefix block state "
    "apply revert overlay profile digest check start stop answer greedy sample prompt output chat "
    "hello world small tiny random weight layer head hidden vocab text word number red green blue "
    "zero two three four five six seven eight nine ten cat dog bird fish tree river stone cloud"
).split()


def corpus(seed: int = 0, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ","]) + f" {rng.randint(0, 999)}")
    return out


def make(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL}
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "unk_token": None,
                "additional_special_tokens": ["<|im_start|>"],
                "model_max_length": 512,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )

    save_weights(out, bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"])


def save_weights(out: Path, bos: int, eos: int, pad: int, vocab: int = 1024) -> None:
    """The tiny Qwen3's config and random weights (fixed seed, float32) in ``out``, with the
    tokenizer's special ids."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.2,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    config.dtype = "float32"
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out)  # config.json, generation_config.json, model.safetensors
    if not (out / "model.safetensors").is_file():
        raise SystemExit(f"no model.safetensors in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_model.py DIR")
    make(Path(sys.argv[1]))
    print(f"make_model: {sys.argv[1]}")
