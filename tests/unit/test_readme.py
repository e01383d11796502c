"""The README is a front door that stays true: short, its annotated experiment loads, its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.loader import parse_spec_text

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_is_short() -> None:
    assert len(README.splitlines()) <= 120


def test_the_annotated_experiment_is_a_valid_spec() -> None:
    block = README.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert len(block.splitlines()) <= 24
    spec = parse_spec_text(block, "README.md")
    assert [v.name for v in spec.variants] == ["baseline", "nextn"]


def test_every_command_in_the_table_is_a_real_command() -> None:
    group = typer.main.get_command(app)
    listed = re.findall(r"^\| `sglbench ([a-z-]+)(?: ([a-z-]+))?", README, flags=re.M)
    assert listed
    for name, sub in listed:
        argv = [name] + ([sub] if sub and name == "results" else []) + ["--help"]
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, f"sglbench {' '.join(argv)}: {res.output}"
    assert {n for n, _ in listed} >= set(group.commands) - {"version"}  # type: ignore[attr-defined]


def test_nothing_in_the_docs_refers_outside_the_repository() -> None:
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        assert "../shared" not in doc.read_text(encoding="utf-8"), doc
