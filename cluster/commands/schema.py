"""`sglbench schema`: print the experiment file's JSON Schema, for editors (yaml-language-server) and CI checks."""

from __future__ import annotations

import json
from typing import Any

import typer

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "schema/experiment.schema.json"
"""The committed copy of experiment_json_schema() that each experiments/*.yaml names in its first line
(`# yaml-language-server: $schema=../schema/experiment.schema.json`); a test keeps it equal to the printed one."""


# free-form JSON stored as given: pydantic's JSON Schema of ExperimentSpec, written to schema/experiment.schema.json
def experiment_json_schema() -> dict[str, Any]:
    """The experiment file's JSON Schema (draft 2020-12) from ExperimentSpec, each field described by the docstring
    under it. Validators that are code (unique names, tp within the node, NEXTN consistency) are not in it:
    `sglbench validate` still has the last word."""
    from cluster.config.experiment import ExperimentSpec

    schema = ExperimentSpec.model_json_schema(by_alias=True)
    return {"$schema": SCHEMA_DIALECT, "title": "sglbench experiment",
            "description": "An sglbench experiment file (spec version 1); `sglbench validate FILE` checks it fully.",
            **{k: v for k, v in schema.items() if k not in ("title", "description")}}


def schema_cmd() -> None:
    """Print the experiment JSON Schema (every field described). Point an editor at it with a first line
    `# yaml-language-server: $schema=<path or URL of the saved output>`; experiments/ ships one saved copy,
    schema/experiment.schema.json."""
    typer.echo(json.dumps(experiment_json_schema(), indent=2, sort_keys=True))


def register(app: typer.Typer) -> None:
    app.command("schema")(schema_cmd)
