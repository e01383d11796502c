"""Build datasets/chatml-thinking/: a word-level tokenizer over the bundled ShareGPT set's words and a ChatML chat
template with a Qwen3-style `enable_thinking` switch, so experiments/thinking-sim.yaml renders its prompts on the
client with and without thinking (nothing downloaded; deterministic). Run: python scripts/thinking_tokenizer.py"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "datasets" / "chatml-thinking"
MARKERS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")


def build(out: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    rows = json.loads((REPO / "datasets" / "categories-sharegpt.json").read_text())
    words = sorted({w for r in rows for t in r["conversations"] for w in t["value"].split()}
                   | {"user", "assistant", "system"})
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True) for t in MARKERS])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "chat_template.jinja").write_text(TEMPLATE)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
