"""load.stop_when_saturated through the driver on local Ray, on a simulated server whose knee is known by
construction: a decode step takes 5 ms + 150 ms per running request (no prefill cost), so one request makes
1000 / 155 = 6.45 tok/s and two make 2000 / 305 = 6.56 tok/s (+2 % for +100 % load), while TTFT (one step) goes
155 -> 305 ms (+97 %) and the requests in flight double: c2 is over-saturated against c1, and c4 is skipped, recorded
with the reason. Every measured run records its steady-state stretch.

Machine load tolerated: the figures are wall-clock, and a loaded machine's lateness can fall on one point's window
and not the other's: c1 must stay within about 35 ms a step of its model time for the throughput rule (+25 %), 48 ms for the TTFT rule
(+50 %). With 65 and 125 ms steps those bounds were 13 and 18 ms, and this session's fresh-clone CI measured c2 as
not saturated and ran c4 (as 25 and 45 ms steps did once before).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: knee
model: {{path: sim://knee, engine: sim}}
server: {{args: {{max-running-requests: 16, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 1.0, decode_base_ms: 5, decode_per_req_ms: 150, prefill_per_token_ms: 0}}
variants: [{{name: base, baseline: true}}]
workloads: [{{name: w, input_tokens: 16, output_tokens: 6, num_requests: 6}}]
load: {{concurrency: [1, 2, 4], stop_when_saturated: true}}
warmup_requests: 0
output: {out}
"""


def test_points_past_a_saturated_one_are_skipped_and_recorded(ray_local: None, tmp_path: Path) -> None:
    from cluster.cli import app
    from cluster.dataset.store import DatasetStore
    from cluster.distributed.driver import Driver

    out = tmp_path / "out"
    spec = parse_spec_text(SPEC.format(out=out))
    logs: list[str] = []
    result = Driver(spec, tmp_path, None, logs.append, lambda p, s: None).run()
    runs = DatasetStore(str(out), "knee").read_table("runs").to_pandas().set_index("load_value")
    assert runs.loc[1.0, "status"] == runs.loc[2.0, "status"] == "ok", runs[["status", "invalid_reasons"]]
    assert runs.loc[4.0, "status"] == "invalid" and runs.loc[4.0, "n_requests"] == 0
    why = str(runs.loc[4.0, "invalid_reasons"])
    assert why.startswith("not measured (load.stop_when_saturated): above c2, saturated past c1: load +100%, "
                          "output tok/s +"), why
    assert any("skip w c4 repeat 0: not measured" in line for line in logs), logs
    # the measured runs record their steady stretch (closed loop: every request in flight at once until the drain)
    for c in (1.0, 2.0):
        row = runs.loc[c]
        assert row["steady_rule"] == f"in flight >= {int(c)} of offered concurrency {int(c)}"
        assert 0 < row["steady_share"] <= 1 and row["steady_output_tps"] > 0 and row["steady_start_ns"] >= 0
    shown = CliRunner().invoke(app, ["results", "compare", "knee", "--root", str(out)], env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    assert "saturated c2 base: saturated past c1" in " ".join(shown.output.split()), shown.output
    assert " 0/0/1 " in shown.output  # c4: no ok run, one not measured
    again = Driver(spec, tmp_path, None, logs.append, lambda p, s: None).run()
    assert set(again.statuses.values()) == {"skipped"} and not again.servers, again.statuses  # nothing re-measured
    assert result.counts() == {"ok": 2, "invalid": 1}
