"""A live SGLang 0.5.23 CPU server still answers in the shapes of the committed contract fixtures (keys, types, events)."""

from __future__ import annotations

import json
from pathlib import Path

from record_transcripts import FIXTURE_DIR, record, shape_diffs


def test_live_server_keeps_the_recorded_shapes(sglang_cpu_python: Path, mimo_models: Path, tmp_path: Path) -> None:
    written = record(tmp_path / "live", sglang_cpu_python, mimo_models, "mix", [3])
    assert [p.name for p in written] == ["baseline.json", "nextn3.json"]
    problems = []
    for p in written:
        diffs = shape_diffs(json.loads((FIXTURE_DIR / p.name).read_text()), json.loads(p.read_text()))
        problems += [f"{p.name}: {d}" for d in diffs]
    assert not problems, "SGLang's wire shapes changed; re-record with tests/sglang_cpu/record_transcripts.py " \
                         "and update the contract assertions:\n" + "\n".join(problems)
