"""correctness.eval's file is read before anything starts: validate refuses a bad row naming file, line and field
(exit 2), and a missing file naming it; the shipped task passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.loader import parse_spec_text
from cluster.errors import PreflightError
from cluster.plan.inputs import check_prompts
from cluster.plan.runs import expand_variants

REPO = Path(__file__).resolve().parents[3]

SPEC = """\
version: 1
name: acc
model: {{path: sim://m, engine: sim}}
variants:
  - name: baseline
    baseline: true
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}]
load: {{concurrency: [1]}}
correctness: {{eval: {{path: {path}, num_prompts: 3}}}}
"""


def _check(path: str, base: Path) -> list[str]:
    spec = parse_spec_text(SPEC.format(path=path))
    return check_prompts(spec, expand_variants(spec), {}, base)


def test_the_shipped_task_passes_and_a_bad_row_is_refused_at_its_line(tmp_path: Path) -> None:
    assert _check("datasets/arithmetic-200.jsonl", REPO) == []
    bad = tmp_path / "task.jsonl"
    bad.write_text('{"prompt": "What is 1 + 1?", "answer": 2}\n{"prompt": "What is 2 + 2?", "answer": [4]}\n'
                   '{"prompt": "What is 3 + 3?", "answer": 6}\n')
    with pytest.raises(PreflightError) as info:
        _check(str(bad), tmp_path)
    assert info.value.file == f"{bad}:2" and info.value.field == "correctness.eval.answer_field"
    assert "expected a non-empty string or an integer, got [4]" in str(info.value)
    bad.write_text('{"prompt": "What is 1 + 1?", "answer": 2}\n')
    with pytest.raises(PreflightError, match="num_prompts is 3 but the file holds 1 row\\b"):
        _check(bad.name, tmp_path)


def test_validate_names_the_file_and_exits_2(tmp_path: Path) -> None:
    exp = tmp_path / "acc.yaml"
    exp.write_text(SPEC.format(path="missing.jsonl"))  # relative: read here, never deferred to the node
    res = CliRunner().invoke(app, ["validate", str(exp)])
    assert res.exit_code == 2, res.output
    assert "missing.jsonl" in res.output
