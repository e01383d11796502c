"""A run whose answers broke an answer invariant is `invalid`, and its reason names the invariant (how many requests,
the first one's detail), also when no request was left ok: the answers were measured and cannot be trusted."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from cluster.analysis.run_row import build_run_row
from cluster.config.loader import parse_spec_text
from cluster.engines.answer_invariants import Broken
from cluster.kernel.records import REQUEST_BATCH_SCHEMA
from tests.unit.analysis.test_run_row import SEGMENT, SERVER, SPEC, _plan, _window

IMPOSSIBLE = str(Broken("verify_steps_at_most_tokens", "spec_verify_ct 9 > completion_tokens 4 - 1"))


def _with_errors(n: int, errors: dict[int, str]) -> object:
    w = _window(n, 0)
    rows = w.requests.to_pylist()
    for i, e in errors.items():
        rows[i]["error"] = e
    return replace(w, requests=pa.Table.from_pylist(rows, schema=REQUEST_BATCH_SCHEMA))


def test_one_impossible_answer_makes_the_run_invalid_naming_the_invariant() -> None:
    # 1 of 200 requests: under the 1% error rate that alone would not mark the run
    row = build_run_row(_plan("mtp"), _with_errors(200, {17: IMPOSSIBLE}), SERVER, SEGMENT,  # type: ignore[arg-type]
                        parse_spec_text(SPEC), [], None)
    assert row.status == "invalid"
    assert row.invalid_reasons is not None and "answers broke invariant verify_steps_at_most_tokens" in \
        row.invalid_reasons and "in 1 of 200 requests; first: request 17: spec_verify_ct 9 >" in row.invalid_reasons


def test_a_run_whose_every_answer_is_impossible_is_invalid_not_failed() -> None:
    row = build_run_row(_plan("mtp"), _with_errors(2, {0: IMPOSSIBLE, 1: IMPOSSIBLE}), SERVER,  # type: ignore[arg-type]
                        SEGMENT, parse_spec_text(SPEC), [], None)
    assert row.status == "invalid" and row.failure_reason is None
    assert "verify_steps_at_most_tokens" in (row.invalid_reasons or "") and "in 2 of 2 requests" in (
        row.invalid_reasons or "")


def test_other_errors_do_not_name_an_invariant() -> None:
    row = build_run_row(_plan("mtp"), _with_errors(200, {3: "timeout after 5 s"}), SERVER, SEGMENT,  # type: ignore[arg-type]
                        parse_spec_text(SPEC), [], None)
    assert row.status == "ok" and "invariant" not in (row.invalid_reasons or "")
