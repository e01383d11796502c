"""The runs row is one typed record: its fields are the runs table's columns (derived in one place), and every field
reaches the stored file."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pytest

from cluster.analysis.request_metrics import E2E, ITL_CHUNK, ITL_TOKEN, TPOT, TTFT
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.kernel.records import KEY_FIELDS
from cluster.kernel.run_row import (_LATENCIES, RUN_FIELDS, RUN_METRIC_NAMES, RUNS_SCHEMA, RunRow, arrow_fields,
                                    column)
from cluster.plan.runs import make_plan

SPEC = """
name: rr
model: {path: /m}
engines: {sim: {}}
variants: [{name: base, engine: sim, baseline: true}]
workloads: [{name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}]
load: {concurrency: [1]}
"""


def test_every_field_but_metrics_is_a_runs_column_in_order() -> None:
    names = [f.name for f in fields(RunRow) if f.name != "metrics"]
    assert [f.name for f in RUN_FIELDS] == names
    assert RUNS_SCHEMA.names == ([f.name for f in KEY_FIELDS] + names + [f"m_{n}" for n in RUN_METRIC_NAMES])


def test_a_field_without_an_arrow_type_is_refused() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Row:
        typed: Optional[int] = column(pa.int32())
        untyped: Optional[int] = None

    with pytest.raises(TypeError, match="Row.untyped has no Arrow type"):
        arrow_fields(Row)
    assert [(f.name, f.type) for f in arrow_fields(Row, skip=frozenset({"untyped"}))] == [("typed", pa.int32())]


def _value(f: pa.Field, i: int) -> object:
    """A distinct non-null value of the column's type (i keeps every column's value different)."""
    if pa.types.is_string(f.type):
        return "invalid" if f.name == "status" else f"v{i}"
    if pa.types.is_boolean(f.type):
        return True
    if pa.types.is_floating(f.type):
        return i + 0.5
    return i + 1


def test_every_field_reaches_the_stored_runs_file(tmp_path: Path) -> None:
    """A column the store forgot, or a field whose type disagrees with its column, fails here."""
    plan = make_plan(parse_spec_text(SPEC))[0]
    values = {f.name: _value(f, i) for i, f in enumerate(RUN_FIELDS)}
    values["metrics_json"] = '{"output_tok_s": 3.0}'
    row = RunRow(**values, metrics={"output_tok_s": 3.0, "extra_figure": 1.5})  # type: ignore[arg-type]
    store = DatasetStore(str(tmp_path), "rr")
    store.write_run(plan, row)
    stored = store.read_table("runs").to_pylist()[0]
    assert {k: stored[k] for k in values} == values
    assert stored["m_output_tok_s"] == 3.0 and stored["m_extra_figure"] == 1.5 and stored["m_ttft_ms_p50"] is None


def test_the_latency_metric_names_are_the_request_quantities() -> None:
    assert _LATENCIES == tuple(q.name for q in (TTFT, E2E, TPOT, ITL_CHUNK, ITL_TOKEN))
