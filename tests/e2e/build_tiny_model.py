"""Build a tiny random-weight Qwen2 model and a locally trained byte-level BPE tokenizer (nothing downloaded).

Run with the vLLM venv's interpreter (it has torch, transformers, tokenizers):
    <venv>/bin/python tests/e2e/build_tiny_model.py OUT_DIR [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1000
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_SUBJECTS = ["the cat", "a dog", "the server", "my model", "the cluster", "a token", "the GPU", "our test"]
_VERBS = ["runs", "sleeps", "decodes", "answers", "waits", "streams", "counts", "measures"]
_OBJECTS = ["quickly", "on the node", "every request", "the prompt", "in a batch", "twice", "at night", "slowly"]


def corpus(rng: random.Random, n_sentences: int) -> list[str]:
    """Generated sentences: enough variety for a ~1000-token byte-level BPE."""
    out = []
    for i in range(n_sentences):
        words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
        out.append(f"{' '.join(words).capitalize()} {i} times, and {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)}.")
    return out


def build_tokenizer(out_dir: Path, rng: random.Random) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng, 600), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return len(fast)


def build_model(out_dir: Path, vocab_size: int, eos_id: int, pad_id: int, seed: int) -> int:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="bfloat16",
    )
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    t0 = time.monotonic()
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(ns.seed)
    vocab = build_tokenizer(ns.out_dir, rng)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ns.out_dir))
    params = build_model(ns.out_dir, vocab, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>"), ns.seed)
    print(f"tiny model: vocab {vocab}, {params} params, built in {time.monotonic() - t0:.1f} s -> {ns.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
