"""The shipped accuracy task is what scripts/arithmetic_eval.py writes (seeded, deterministic), and its answers are
the arithmetic of its questions."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("arithmetic_eval", REPO / "scripts" / "arithmetic_eval.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_file_is_the_generated_one() -> None:
    assert (REPO / "datasets" / "arithmetic-200.jsonl").read_text(encoding="utf-8") == _script().render(200, 0), \
        "datasets/arithmetic-200.jsonl is stale: run python scripts/arithmetic_eval.py"


def test_answers_are_the_questions_arithmetic_and_the_seed_matters() -> None:
    mod = _script()
    rows = [json.loads(line) for line in mod.render(50, 3).splitlines()]
    for r in rows:
        a, op, b = re.match(r"What is (\d+) ([-+*]) (\d+)\?", r["prompt"]).groups()  # type: ignore[union-attr]
        assert r["answer"] == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    assert {r["prompt"].split()[3] for r in rows} == {"+", "-", "*"}
    assert mod.render(50, 3) == mod.render(50, 3) != mod.render(50, 4)
