"""Writes the shipped accuracy task datasets/arithmetic-<N>.jsonl: N seeded two-operand integer questions, one JSON
object per line with `prompt` and its exact `answer` (correctness.eval's default fields). Deterministic: the same
seed and count give the same bytes (tests/unit/test_arithmetic_eval.py holds the shipped file to it).

    python scripts/arithmetic_eval.py [--count 200] [--seed 0] [--out datasets/arithmetic-200.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OPERATIONS = (("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b))
"""What a question asks: a sum, a difference (may be negative) or a product of two 1-99 integers."""


def questions(count: int, seed: int) -> list[dict[str, object]]:
    """`count` rows {prompt, answer} drawn from random.Random(seed): operands 1..99, one of OPERATIONS."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for _ in range(count):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        sign, apply = OPERATIONS[rng.randrange(len(OPERATIONS))]
        rows.append({"prompt": f"What is {a} {sign} {b}? Answer with the number only.", "answer": apply(a, b)})
    return rows


def render(count: int, seed: int) -> str:
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in questions(count, seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(__file__).resolve().parents[1] / "datasets" / f"arithmetic-{args.count}.jsonl"
    out.write_text(render(args.count, args.seed), encoding="utf-8")
    print(f"wrote {out} ({args.count} questions, seed {args.seed})")


if __name__ == "__main__":
    main()
