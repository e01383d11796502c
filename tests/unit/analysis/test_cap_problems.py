"""Issue 15 item 2: `results compare` names variants whose servers resolved a different running-request cap
(plan.fairness.resolved_cap_findings, which had no caller before)."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.analysis.comparison import resolved_cap_problems
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: caps
model: {path: /m, engine: sglang}
server: {args: {max-running-requests: 64, kv-cache-dtype: bf16, attention-backend: triton}}
variants:
  - {name: base, baseline: true}
  - {name: mtp, speculative: {algorithm: NEXTN, num_steps: 2}}
workloads:
  - {name: w, input_tokens: 16, output_tokens: 4, num_requests: 32}
load: {concurrency: [32]}
"""


def test_compare_reports_a_state_slot_capped_variant(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "caps")
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})
    caps = {"base": 64, "mtp": 15}  # NEXTN needs several Mamba state slots per request (sglang#36889)
    for p in make_plan(spec):
        resolved = {"max_running_requests": 64, "effective_max_running_requests": caps[p.variant.name]}
        store.write_run(p, RunRow(status="ok", duration_s=1.0, resolved_args_json=json.dumps(resolved)))
    (line,) = resolved_cap_problems(Results.open(str(tmp_path), "caps"))
    assert line.startswith("error: mtp: resolved-max-running-requests:") and "15 here but 64" in line


def _caps_store(tmp_path: Path, spec_doc: object, resolved_json: str = '{"max_running_requests": 64}') -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "caps")
    store.write_experiment_meta({"spec": spec_doc})
    for p in make_plan(spec):
        store.write_run(p, RunRow(status="ok", duration_s=1.0, resolved_args_json=resolved_json))


def test_a_stored_spec_that_does_not_validate_is_a_store_error_naming_it(tmp_path: Path) -> None:
    """F22: a field a newer sglbench wrote (or a spec missing one) was pydantic's ValidationError, exit 70."""
    import pytest

    from cluster.analysis.comparison import unintended_differences
    from cluster.dataset.root import StoreError

    doc = {**parse_spec_text(SPEC).model_dump(mode="json"), "new_field_from_v2": 1}
    _caps_store(tmp_path, doc)
    for read in (resolved_cap_problems, unintended_differences):
        with pytest.raises(StoreError, match=r"experiment\.json: spec\.new_field_from_v2: Extra inputs") as e:
            read(Results.open(str(tmp_path), "caps"))
        assert e.value.field == "spec.new_field_from_v2"


def test_a_stored_spec_level_that_is_not_an_object_is_a_store_error(tmp_path: Path) -> None:
    """capacity's search_of walked spec.load.search with .get: a list there was an AttributeError."""
    import pytest

    from cluster.analysis.capacity import search_of
    from cluster.dataset.root import StoreError

    doc = {**parse_spec_text(SPEC).model_dump(mode="json"), "load": [1]}
    _caps_store(tmp_path, doc)
    with pytest.raises(StoreError, match=r"spec\.load holds list, not an object"):
        search_of(Results.open(str(tmp_path), "caps"))


def test_resolved_args_that_are_not_a_json_object_are_a_store_error(tmp_path: Path) -> None:
    """served_devices called .get on a stored list (AttributeError); a non-JSON text was a bare JSONDecodeError."""
    import pytest

    from cluster.analysis.comparison import served_devices
    from cluster.dataset.root import StoreError

    for text, got in (("[1, 2]", "a list"), ("{not json", "not JSON")):
        _caps_store(tmp_path / got, parse_spec_text(SPEC).model_dump(mode="json"), text)
        for read in (served_devices, resolved_cap_problems):
            with pytest.raises(StoreError, match=f"resolved_args_json holds {got}"):
                read(Results.open(str(tmp_path / got), "caps"))


def test_results_compare_prints_the_cap_line_and_degrades_on_a_foreign_spec(tmp_path: Path) -> None:
    """compare's notes read the stored spec once per reader: a valid one gives the cap line, a spec another version
    wrote gives one note and exit 0 (F22: the cap reader sat outside the note's try and exited 70)."""
    from typer.testing import CliRunner

    from cluster.cli import app

    spec = parse_spec_text(SPEC)
    for name, doc in (("good", spec.model_dump(mode="json")),
                      ("future", {**spec.model_dump(mode="json"), "new_field_from_v2": 1})):
        store = DatasetStore(str(tmp_path / name), "caps")
        store.write_experiment_meta({"spec": doc})
        caps = {"base": 64, "mtp": 15}
        for p in make_plan(spec):
            resolved = {"max_running_requests": 64, "effective_max_running_requests": caps[p.variant.name]}
            store.write_run(p, RunRow(status="ok", duration_s=1.0, resolved_args_json=json.dumps(resolved)))
        res = CliRunner().invoke(app, ["results", "compare", "caps", "--root", str(tmp_path / name)])
        assert res.exit_code == 0 and "bug in sglbench" not in res.output, res.output
        if name == "good":
            assert "mtp: resolved-max-running-requests:" in res.output, res.output
        else:
            assert "note resolved-args comparison unavailable" in res.output and "new_field_from_v2" in res.output
