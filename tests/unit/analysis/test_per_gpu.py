"""GPUs per deployment in compare: the runs row records them, the per-GPU figures are the totals over them (the
arithmetic of each case in its comments), an endpoint's is unknown (never a division by 0), a dataset written before
the gpus column reads its tp, and a comparison of different GPU counts says so."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from cluster.analysis.comparison import compare_view, compare_with_ci
from cluster.analysis.metric_catalog import declared, metric, per_gpu
from cluster.analysis.per_gpu import GPUS_NOTE, gpus_note, known_gpus, run_gpus, with_per_gpu
from cluster.analysis.query import compare_table
from cluster.analysis.results import Results
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.kernel.run_row import RunRow
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import expand_variants, make_plan

SPEC = """version: 1
name: gpus
model: {path: "sim://tiny", engine: sim, tp: 8}
variants:
  - {name: tp8, baseline: true}
  - {name: tp4, tp: 4}
  - name: ext
    deployment: {kind: endpoint, url: "http://127.0.0.1:9/"}
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 4}]
load: {concurrency: [1]}
repeats: 2
"""

# per variant, per repeat: (output tok/s, requests/s) as the runs row stores them
FIGURES = {"tp8": [(800.0, 4.0), (880.0, 4.4)], "tp4": [(500.0, 3.0), (520.0, 3.2)],
           "ext": [(300.0, 2.0), (300.0, 2.0)]}


def _write(root: Path, spec_text: str = SPEC) -> Results:
    spec = parse_spec_text(spec_text, "gpus.yaml")
    store = DatasetStore(str(root), "gpus")
    reqs, chunks = request_batches([])
    for p in make_plan(spec):
        tok_s, rps = FIGURES[p.variant.name][p.repeat]
        ep = p.variant.endpoint
        row = RunRow(status="ok", duration_s=20.0, launched_by_sglbench=p.variant.launched,
                     endpoint_url=ep.url if ep is not None else None,
                     metrics={"output_tok_s": tok_s, "request_throughput_rps": rps, "steady_output_tps": None})
        store.write_run(p, row, reqs, chunks)
    return Results.open(str(root), "gpus")


def test_a_variant_holds_its_tp_and_an_endpoint_none() -> None:
    tp8, tp4, ext = expand_variants(parse_spec_text(SPEC, "gpus.yaml"))
    assert (tp8.gpus, tp4.gpus, ext.gpus) == (8, 4, 0)


def test_per_gpu_is_the_total_over_the_gpus_and_unknown_without_them() -> None:
    assert per_gpu(840.0, 8) == 105.0  # 840 / 8
    assert per_gpu(510.0, 4) == 127.5  # 510 / 4
    assert per_gpu(300.0, 0) is None  # an endpoint: 0 GPUs are not known, never 300 / 0 = inf
    assert per_gpu(300.0, None) is None and per_gpu(None, 8) is None and per_gpu(math.nan, 8) is None
    m = metric("output_tok_s_per_gpu")
    assert (m.unit, m.per_gpu_of, m.better, m.producer) == ("tok/s/GPU", "output_tok_s", "higher", "per_gpu")
    assert {x.name for x in declared("per_gpu")} == {"output_tok_s_per_gpu", "request_throughput_rps_per_gpu",
                                                      "steady_output_tps_per_gpu"}


def test_known_gpus_reads_the_column_and_falls_back_to_tp_for_rows_written_before_it() -> None:
    runs = pd.DataFrame({"gpus": [8, 8, 0, None, None], "tp": [8, 4, 2, 4, 2],
                         "launched_by_sglbench": [True, True, False, None, False]})
    # replicas 2 x tp 4 hold 8; an endpoint stores 0: not known; before the column: tp 4; an old endpoint: not known
    assert run_gpus(runs) == [8, 8, None, 4, None]
    assert run_gpus(pd.DataFrame({"tp": [8]})) == [8]  # a dataset written before endpoints and gpus
    assert known_gpus(None, None, None) is None


def test_with_per_gpu_divides_the_totals_and_their_intervals() -> None:
    t = pd.DataFrame({"gpus": pd.array([8, 4, None], dtype="Int64"), "output_tok_s": [840.0, 510.0, 300.0],
                      "output_tok_s_lo": [800.0, 500.0, 290.0], "output_tok_s_hi": [880.0, 520.0, 310.0]})
    out = with_per_gpu(t, ("", "_lo", "_hi"))
    assert list(out.columns) == ["gpus", "output_tok_s", "output_tok_s_lo", "output_tok_s_hi", "output_tok_s_per_gpu",
                                 "output_tok_s_per_gpu_lo", "output_tok_s_per_gpu_hi"]
    assert out["output_tok_s_per_gpu"].tolist()[:2] == [105.0, 127.5]  # 840 / 8, 510 / 4
    assert out["output_tok_s_per_gpu_lo"].tolist()[:2] == [100.0, 125.0]  # 800 / 8, 500 / 4
    assert out["output_tok_s_per_gpu_hi"].tolist()[:2] == [110.0, 130.0]  # 880 / 8, 520 / 4
    assert math.isnan(out["output_tok_s_per_gpu"].iloc[2])


def test_the_note_names_each_variants_gpus_when_they_differ() -> None:
    assert gpus_note({"tp8": 8, "2xtp4": 8, "ep": 4}) == \
        "deployments hold different GPU counts: tp8 8, 2xtp4 8, ep 4: compare per-GPU figures"
    assert gpus_note({"tp8": 8, "2xtp4": 8}) == ""
    assert gpus_note({"tp8": 8, "ext": None}).startswith(
        "deployments' GPU counts not all known: tp8 8, ext unknown (endpoint):")
    assert gpus_note({"ext": None, "ext2": None}) == "" and gpus_note({"tp8": 8}) == ""


def test_compare_states_gpus_per_gpu_figures_the_endpoint_and_the_note(tmp_path: Path) -> None:
    table = compare_table(_write(tmp_path))
    df = table.set_index("variant")
    assert [None if pd.isna(g) else int(g) for g in df["gpus"]] == [8, 4, None]
    assert df["launched_by_sglbench"].tolist() == [True, True, False]
    # tp8: (800 + 880) / 2 = 840 tok/s over 8 GPUs = 105; (4.0 + 4.4) / 2 = 4.2 req/s over 8 = 0.525
    assert df.loc["tp8", "output_tok_s_per_gpu"] == pytest.approx(105.0)
    assert df.loc["tp8", "request_throughput_rps_per_gpu"] == pytest.approx(0.525)
    # tp4: (500 + 520) / 2 = 510 over 4 = 127.5; (3.0 + 3.2) / 2 = 3.1 over 4 = 0.775
    assert df.loc["tp4", "output_tok_s_per_gpu"] == pytest.approx(127.5)
    assert df.loc["tp4", "request_throughput_rps_per_gpu"] == pytest.approx(0.775)
    # ext: an endpoint not launched by sglbench: 300 tok/s, per GPU unknown (not 300 / 0)
    assert df.loc["ext", "output_tok_s"] == 300.0 and math.isnan(df.loc["ext", "output_tok_s_per_gpu"])
    assert set(df[GPUS_NOTE]) == {"deployments hold different GPU counts: tp8 8, tp4 4, ext unknown (endpoint): "
                                  "compare per-GPU figures"}
    cols = list(table.columns)
    assert cols.index("output_tok_s_per_gpu") == cols.index("output_tok_s") + 1  # beside the total


def test_compare_ci_divides_the_interval_by_the_gpus(tmp_path: Path) -> None:
    ci = compare_with_ci(_write(tmp_path), n_boot=200, request_level=False).set_index("variant")
    for v, g in (("tp8", 8), ("tp4", 4)):
        for sfx in ("", "_lo", "_hi"):
            assert ci.loc[v, f"output_tok_s_per_gpu{sfx}"] == pytest.approx(ci.loc[v, f"output_tok_s{sfx}"] / g)
    assert math.isnan(ci.loc["ext", "output_tok_s_per_gpu_hi"]) and bool(ci.loc["ext", GPUS_NOTE])
    view = compare_view(ci.reset_index())
    assert view["GPUs"].tolist() == ["8", "4", "-"]
    assert view["output tok/s per GPU"].tolist()[2] == "-"


def test_runs_written_before_the_gpus_column_read_beside_new_ones(tmp_path: Path) -> None:
    import shutil

    import pyarrow.parquet as pq

    from tests.golden.golden_outputs import DATA, EXPERIMENT, HERE

    shutil.copytree(DATA, tmp_path / "data")  # golden-sim: 8 runs written before the column, every variant at tp 8
    text = (HERE / "golden-sim.yaml").read_text().replace("  - name: nextn\n", "  - name: tp4\n    tp: 4\n", 1)
    spec = parse_spec_text(text, "g.yaml")
    store = DatasetStore(str(tmp_path / "data"), EXPERIMENT)
    reqs, chunks = request_batches([])
    for p in make_plan(spec):
        if p.variant.name == "tp4":
            store.write_run(p, RunRow(status="ok", duration_s=10.0, metrics={"output_tok_s": 200.0}), reqs, chunks)
    files = sorted((tmp_path / "data" / EXPERIMENT / "runs").rglob("*.parquet"))
    assert sum("gpus" not in pq.read_schema(f).names for f in files) == 8
    t = compare_table(Results.open(str(tmp_path / "data"), EXPERIMENT)).set_index(["variant", "load_value"])
    assert t.loc[("baseline", 1.0), "gpus"] == 8  # written before the column: its tp
    assert t.loc[("tp4", 1.0), "gpus"] == 4 and t.loc[("tp4", 1.0), "output_tok_s_per_gpu"] == 50.0  # 200 / 4
    assert t.loc[("baseline", 1.0), GPUS_NOTE] == ("deployments hold different GPU counts: baseline 8, nextn 8, "
                                                   "tp4 4: compare per-GPU figures")
