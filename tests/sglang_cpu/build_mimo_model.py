"""Build tiny MiMo models (the e2e tier's tiny Qwen2 body plus one built-in MTP layer) in echo, mix and rand variants.

Run with the SGLang venv's interpreter (it has torch, transformers, tokenizers, safetensors):
    <venv>/bin/python tests/sglang_cpu/build_mimo_model.py OUT_DIR [--variants echo mix rand] [--seed N]
Each variant lands in OUT_DIR/<variant>/ with config.json, model.safetensors and the tokenizer files.

- echo: o_proj and down_proj zeroed in the target and the MTP layer, so the next token is a function of the current
  token only; the MTP input_proj is [0 | I] (keeps the embedded-token half), so every draft is accepted.
- mix: echo's MTP layer; the target keeps its random attention/MLP outputs scaled x0.15, small beside the embedded
  token on the residual stream, so the echo guess is right about 2 times in 3: partial acceptance.
- rand: a random MTP layer: almost no draft is accepted (accept length ~1.0).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import build_tiny_model  # noqa: E402  (tokenizer + Qwen2 construction shared with the e2e tier)

VARIANTS = ("echo", "mix", "rand")
# P(target's next token == the echo guess), offline over 5 prompts x 32 tokens: x0.1 0.79, x0.2 0.56, x0.5 0.21, x1 0.04.
MIX_SCALE = 0.15
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def _layer_keys(tensors: dict, layer: int) -> dict:
    prefix = f"model.layers.{layer}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def printable_ids(tok, vocab_size: int) -> list[int]:
    """Ids that decode on their own to printable ASCII (no special token, no partial UTF-8 byte, no control
    character): the only ones the models may emit, so greedy outputs are text the correctness gate can judge."""
    special = set(tok.all_special_ids)
    out = []
    for i in range(vocab_size):
        s = tok.decode([i]) if i < len(tok) else ""
        if i not in special and s and all(32 <= ord(c) < 127 for c in s):
            out.append(i)
    return out


def build_variant(base: dict, cfg: dict, variant: str, seed: int, emit_ids: list[int] | None = None):
    """The variant's full tensor dict (target + lm_head + model.mtp_layers.0.*) and its config.json.

    emit_ids: when given, every other lm_head row is zeroed (logit 0, below the best of hundreds of random logits),
    so neither the target nor the MTP draft ever emits those tokens."""
    import torch

    gen = torch.Generator().manual_seed(seed * 100 + VARIANTS.index(variant))
    hidden = cfg["hidden_size"]
    std = cfg.get("initializer_range", 0.02)

    def rand_like(t: torch.Tensor) -> torch.Tensor:
        return (torch.randn(t.shape, generator=gen) * std).to(t.dtype)

    out = {k: v.clone() for k, v in base.items()}
    embed = out["model.embed_tokens.weight"]
    out["lm_head.weight"] = rand_like(embed) * 50  # untied head: logits far enough apart for a stable greedy argmax
    if emit_ids is not None:
        keep = torch.zeros(embed.shape[0], dtype=torch.bool)
        keep[torch.tensor(emit_ids, dtype=torch.long)] = True
        out["lm_head.weight"][~keep] = 0
    n_layers = cfg["num_hidden_layers"]
    for i in range(n_layers):
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            key = f"model.layers.{i}.{name}"
            if variant == "echo":
                out[key] = torch.zeros_like(out[key])
            elif variant == "mix":
                out[key] = out[key] * MIX_SCALE
    # The MTP layer: a decoder layer's tensors (from a fresh random draw) plus MiMo's norms and input projection.
    template = _layer_keys(base, 0)
    mtp = {name: (rand_like(t) if t.dim() > 1 or name.endswith("bias") else torch.ones_like(t)) for name, t in template.items()}
    dtype = embed.dtype
    mtp["token_layernorm.weight"] = torch.ones(hidden, dtype=dtype)
    mtp["hidden_layernorm.weight"] = torch.ones(hidden, dtype=dtype)
    mtp["final_layernorm.weight"] = torch.ones(hidden, dtype=dtype)
    if variant in ("echo", "mix"):
        mtp["self_attn.o_proj.weight"] = torch.zeros_like(mtp["self_attn.o_proj.weight"])
        mtp["mlp.down_proj.weight"] = torch.zeros_like(mtp["mlp.down_proj.weight"])
        # input_proj sees cat(hidden_layernorm(h), token_layernorm(embed(tok))): keep only the token half.
        mtp["input_proj.weight"] = torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1).to(dtype)
    else:
        mtp["input_proj.weight"] = (torch.randn((hidden, 2 * hidden), generator=gen) * std).to(dtype)
    for name, t in mtp.items():
        out[f"model.mtp_layers.0.{name}"] = t.contiguous()
    new_cfg = dict(cfg)
    new_cfg["architectures"] = ["MiMoForCausalLM"]
    new_cfg["num_nextn_predict_layers"] = 1
    new_cfg["tie_word_embeddings"] = False
    return out, new_cfg


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    import random

    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    t0 = time.monotonic()
    base_dir = ns.out_dir / "_qwen2_base"
    base_dir.mkdir(parents=True, exist_ok=True)
    vocab = build_tiny_model.build_tokenizer(base_dir, random.Random(ns.seed))
    tok = AutoTokenizer.from_pretrained(str(base_dir))
    build_tiny_model.build_model(
        base_dir, vocab, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>"), ns.seed
    )
    base = load_file(str(base_dir / "model.safetensors"))
    cfg = json.loads((base_dir / "config.json").read_text())
    emit = printable_ids(tok, cfg["vocab_size"])
    for variant in ns.variants:
        vdir = ns.out_dir / variant
        vdir.mkdir(parents=True, exist_ok=True)
        tensors, vcfg = build_variant(base, cfg, variant, ns.seed, emit)
        save_file(tensors, str(vdir / "model.safetensors"), metadata={"format": "pt"})
        (vdir / "config.json").write_text(json.dumps(vcfg, indent=2) + "\n")
        for name in TOKENIZER_FILES + ("generation_config.json",):
            if (base_dir / name).exists():
                shutil.copy2(base_dir / name, vdir / name)
        n_params = sum(t.numel() for t in tensors.values())
        print(f"mimo {variant}: {n_params} params -> {vdir}")
    shutil.rmtree(base_dir)
    print(f"tiny MiMo models built in {time.monotonic() - t0:.1f} s -> {ns.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
