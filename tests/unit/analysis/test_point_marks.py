"""Compare's per-point marks from hand-built runs rows: steady stretches too short to count, over-saturated points."""

from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from cluster.analysis.point_marks import with_marks


def _run(load: float, repeat: int, tps: float, ttft: float, in_flight: float, share: Optional[float] = 0.9,
         steady_requests: Optional[int] = 50, status: str = "ok", variant: str = "base") -> dict[str, object]:
    return {"workload": "chat", "load_kind": "concurrency", "load_value": load, "variant": variant, "repeat": repeat,
            "status": status, "m_output_tok_s": tps, "m_ttft_ms_p50": ttft, "m_concurrency_mean": in_flight,
            "steady_share": share if share is not None else math.nan,
            "steady_requests": steady_requests if steady_requests is not None else math.nan}


RUNS = pd.DataFrame([
    _run(4, 0, 268.0, 24.0, 4.0), _run(4, 1, 272.0, 26.0, 4.0),  # mean 270 tok/s, TTFT 25 ms, 4 in flight
    # mean tok/s (276 + 284) / 2 = 280 (+3.7 % for +100 % load), TTFT 120 (+380 %), in flight 8 (+100 %): saturated
    _run(8, 0, 276.0, 110.0, 8.0, share=0.3), _run(8, 1, 284.0, 130.0, 8.0, steady_requests=4),
    _run(8, 2, 9.0, 9000.0, 1.0, status="invalid"),  # not ok: ignored by both marks
    _run(4, 0, 270.0, 25.0, 4.0, share=None, steady_requests=None, variant="old"),  # recorded before the columns
])


def _table() -> pd.DataFrame:
    keys = RUNS[["workload", "load_kind", "load_value", "variant"]].drop_duplicates().reset_index(drop=True)
    return keys.assign(warnings=[["earlier warning"] for _ in range(len(keys))])


def test_short_stretches_and_the_saturated_point_are_marked_per_point() -> None:
    out = with_marks(_table(), RUNS).set_index(["load_value", "variant"])
    assert out.loc[(4.0, "base"), "steady_short"] == "" and out.loc[(4.0, "base"), "saturated"] == ""
    assert out.loc[(8.0, "base"), "steady_short"] == (
        "repeat 0: steady stretch 30% of the window (< 50%): ramp and drain dominate the whole-window figures; "
        "repeat 1: only 4 requests decoded inside the steady stretch (< 10)")
    assert out.loc[(8.0, "base"), "saturated"] == (
        "saturated past c4: load +100%, output tok/s +4% (< 25% of the load's growth), TTFT p50 +380% (>= +50%), "
        "in flight +100% (>= +10%)")
    warnings = out.loc[(8.0, "base"), "warnings"]
    assert warnings[0] == "earlier warning" and len(warnings) == 4
    assert warnings[1].startswith("steady-state throughput not vouched for: repeat 0: steady stretch 30%")
    assert warnings[3].startswith("saturated past c4")
    # a run recorded before the steady-state columns: nothing to judge, nothing flagged
    assert out.loc[(4.0, "old"), "steady_short"] == "" and out.loc[(4.0, "old"), "warnings"] == ["earlier warning"]


def test_an_empty_table_gets_the_columns() -> None:
    out = with_marks(_table().iloc[0:0], RUNS)
    assert {"steady_short", "saturated"} <= set(out.columns) and out.empty
