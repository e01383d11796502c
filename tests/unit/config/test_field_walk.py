"""No field is silently ignored: every field of the experiment schema, set to a non-default valid value on a base
experiment of each load kind (with a plain, a speculative and a tuned variant), changes the plan, is refused naming
itself, or is a documented no-op with a printed note (scripts/field_walk.py walks it; docs/field-walk.md is its
table). On d2321c6, before these rules, the same walk found 15 fields silently ignored in 85 (field, load kind)
cells (issue 37): engines.sglang and engines.vllm (and their python, launcher, version) with no variant on that
engine, engines.sim.version, load.arrival (gamma) and load.max_concurrency without an open-loop point,
load.arrival_cv with arrival: trace, order: interleaved with one repeat, variants[].baseline on the default
baseline, variants[].tuning kind none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from cluster.config.experiment import ExperimentSpec
from cluster.config.relevance import NO_OPS

REPO = Path(__file__).resolve().parents[3]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("field_walk", REPO / "scripts" / "field_walk.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["field_walk"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def walk() -> Any:
    return _script()


@pytest.fixture(scope="module")
def rows(walk: Any) -> list[Any]:
    return walk.walk()


def test_no_field_is_silently_ignored(rows: list[Any]) -> None:
    bad = [f"{r.field} [{r.base}]: {r.outcome} {r.detail}" for r in rows if r.outcome in ("IGNORED", "WRONG-FIELD")]
    assert not bad, "fields that change nothing and are neither refused nor a documented no-op:\n" + "\n".join(bad)


def test_the_table_is_the_generated_one(walk: Any, rows: list[Any]) -> None:
    assert (REPO / "docs" / "field-walk.md").read_text(encoding="utf-8") == walk.render(rows), \
        "docs/field-walk.md is stale: run python scripts/field_walk.py"


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)

    def inner(ann: Any) -> None:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            _models(ann, seen)
        for a in get_args(ann):
            inner(a)
    for info in model.model_fields.values():
        inner(info.annotation)


def test_every_field_of_every_model_is_walked(rows: list[Any]) -> None:
    """A field added to any model of the schema is walked (so an ignored one fails the test above)."""
    seen: set[type[BaseModel]] = set()
    _models(ExperimentSpec, seen)
    walked = {part.split("<")[0].split("[")[0] for r in rows for part in r.field.split(".")}
    walked |= {r.field.rsplit("<", 1)[0].rsplit(".", 1)[-1] for r in rows}
    missing = sorted(f"{m.__name__}.{name}" for m in seen for name, info in m.model_fields.items()
                     if (info.alias or name) not in walked and not _single_literal(info.annotation))
    assert not missing, missing
    assert len(seen) >= 25 and len(rows) > 2000


def _single_literal(ann: Any) -> bool:
    return getattr(ann, "__origin__", None) is not None and str(ann).startswith("typing.Literal") \
        and len(get_args(ann)) == 1


def test_a_field_nothing_reads_is_reported(walk: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk fails where it should: a setting the driver stopped reading shows as IGNORED."""
    real = walk.settings
    monkeypatch.setattr(walk, "settings", lambda spec: {k: v for k, v in real(spec).items() if k != "health_timeout_s"})
    step = next(s for s in walk.steps(ExperimentSpec, walk.BASES["closed"]) if s.field == "health_timeout_s")
    walk._REFS.clear()
    assert walk.outcome("closed", step).outcome == "IGNORED"
    walk._REFS.clear()


def test_every_documented_no_op_is_met_by_the_walk(rows: list[Any]) -> None:
    noted = {r.detail for r in rows if r.outcome == "no-op"}
    assert {n.note for n in NO_OPS} <= noted


def test_validate_prints_the_note_of_a_documented_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    f = tmp_path / "e.yaml"
    f.write_text("version: 1\nname: n\nmodel: {path: sim://m, engine: sim}\nvariants:\n  - {name: a, baseline: true, "
                 "tuning: {kind: none}}\n  - {name: b, speculative: {num_steps: 1}}\nworkloads:\n  - {name: w, "
                 "input_tokens: 8, output_tokens: 4, num_requests: 4}\nload: {concurrency: [1]}\n")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["validate", str(f)])
    assert res.exit_code == 0, res.output
    assert "note: variants.0.tuning: kind none is the same as leaving tuning out" in res.output
    assert "note: variants.0.baseline: marks the variant that is the baseline anyway" in res.output
