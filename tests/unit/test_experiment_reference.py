"""docs/experiment.md is what scripts/experiment_reference.py writes from the committed schema: the experiment
reference cannot drift from the spec (the schema itself is checked against the models in test_schema.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("experiment_reference", REPO / "scripts" / "experiment_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_reference_is_the_generated_one() -> None:
    mod = _script()
    text = mod.render(json.loads((REPO / "schema" / "experiment.schema.json").read_text(encoding="utf-8")))
    assert (REPO / "docs" / "experiment.md").read_text(encoding="utf-8") == text, \
        "docs/experiment.md is stale: run python scripts/experiment_reference.py"


def test_every_field_of_the_schema_has_a_row_with_its_description() -> None:
    schema = json.loads((REPO / "schema" / "experiment.schema.json").read_text(encoding="utf-8"))
    doc = (REPO / "docs" / "experiment.md").read_text(encoding="utf-8")
    for name, definition in [("", schema), *schema["$defs"].items()]:
        for field, body in definition.get("properties", {}).items():
            assert f".{field}`" in doc or f"`{field}`" in doc, f"{name}.{field} has no row"
            desc = " ".join(str(body.get("description", "")).split())
            assert desc.replace("|", "\\|") in doc, f"{name}.{field}'s description is not in the reference"


def test_a_changed_description_makes_it_stale() -> None:
    mod = _script()
    schema = json.loads((REPO / "schema" / "experiment.schema.json").read_text(encoding="utf-8"))
    before = mod.render(schema)
    schema["properties"]["seed"]["description"] = "changed"
    assert mod.render(schema) != before
