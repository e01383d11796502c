"""`sglbench schema`: the experiment JSON Schema describes every field, matches the committed copy each shipped YAML
names, and validates every shipped YAML (and refuses what the spec refuses structurally)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from cluster.cli import app
from cluster.commands.schema import SCHEMA_FILE, experiment_json_schema

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = sorted((REPO / "experiments").glob("*.y*ml"))
SCHEMA_COMMENT = "# yaml-language-server: $schema=../schema/experiment.schema.json"


def _printed() -> dict[str, Any]:
    res = CliRunner().invoke(app, ["schema"])
    assert res.exit_code == 0, res.output
    schema: dict[str, Any] = json.loads(res.output)
    return schema


def test_printed_schema_is_a_valid_schema_with_every_field_described() -> None:
    schema = _printed()
    jsonschema.Draft202012Validator.check_schema(schema)
    undescribed = [f"{name}.{prop}" for name, d in [("<root>", schema), *schema["$defs"].items()]
                   for prop, v in d.get("properties", {}).items() if not v.get("description")]
    assert not undescribed
    assert {"model", "variants", "workloads", "load", "slo"} <= set(schema["properties"])


def test_committed_copy_is_the_printed_schema() -> None:
    committed = json.loads((REPO / SCHEMA_FILE).read_text())
    assert committed == _printed(), f"regenerate it: sglbench schema > {SCHEMA_FILE}"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_shipped_yaml_names_and_passes_the_schema(path: Path) -> None:
    text = path.read_text()
    assert text.splitlines()[0] == SCHEMA_COMMENT
    assert (path.parent / SCHEMA_COMMENT.split("=", 1)[1]).resolve() == (REPO / SCHEMA_FILE).resolve()
    errors = list(jsonschema.Draft202012Validator(_printed()).iter_errors(yaml.safe_load(text)))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["load"].update(concurency=[1]), "load"),  # misspelled field
    (lambda d: d["workloads"][0].update(input_tokens=0), "input_tokens"),
    (lambda d: d["variants"][0].update(tuning={"kind": "no_such_kind"}), "tuning"),
    (lambda d: d.update(order="random"), "order"),
])
def test_schema_refuses_structural_mistakes(mutate: Any, where: str) -> None:
    doc = yaml.safe_load((REPO / "experiments" / "demo-sim.yaml").read_text())
    schema = experiment_json_schema()
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    mutate(doc)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert errors and any(where in "/".join(map(str, e.absolute_path)) or where in e.message for e in errors)
