"""The HTML report references every PNG it writes; each PNG opens and shows a real plot; the CLI renders it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.analysis.metrics import METRIC_DEFINITIONS
from cluster.analysis.report import GPU_BANDWIDTH_GBS, build_report, decode_bytes_per_token, gpu_of_run, known_gpu
from cluster.dataset.store import DatasetStore
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow
from tests.unit.analysis.test_comparison import build_dataset

BYTES_PER_TOKEN = 10.83e9


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("report"))
    build_dataset(root, "demo-sim", steps=[1, 2], conc=(1, 4), repeats=2, n_requests=24, out_tokens=32,
                  invalid=("nextn-2", 4, 1))
    DatasetStore(root, "demo-sim").write_experiment_meta({
        "spec": {"model": {"path": "sim://qwen"}},
        "preflight": {"sim://qwen": {"params": {"decode_bytes_per_token": BYTES_PER_TOKEN}}}})
    return root


def test_report_html_and_pngs(demo_root: str, tmp_path: Path) -> None:
    path = build_report(Results.open(demo_root, "demo-sim"), str(tmp_path / "out"), n_boot=200)
    page = path.read_text()
    referenced = set(re.findall(r"<img src='([^']+\.png)'", page))
    written = {p.name for p in path.parent.glob("*.png")}
    assert referenced == written
    kinds = {name.split("_chat")[0] for name in written}
    assert kinds == {"throughput", "ttft_ms_cdf", "tpot_ms_cdf", "speedup", "accept_hist", "bandwidth", "pareto",
                     "timeline"}
    for name in written:
        png = path.parent / name
        assert png.stat().st_size > 15_000, name
        img = mpimg.imread(str(png))
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 400, name
        rgb = img[..., :3].reshape(-1, 3)
        assert float(rgb.std(axis=0).max()) > 0.05, f"{name} is (nearly) one colour"
        assert len(np.unique((rgb * 255).astype(np.uint8), axis=0)) > 20, name
    assert not list(path.parent.glob(".*.tmp"))
    # definitions, engine labels, CI method, invalid runs with their reasons
    assert METRIC_DEFINITIONS["tpot_ms_mean"] in html.unescape(page)
    assert "SIMULATED" in page and "sim (simulated)" in page
    assert "Baseline: <b>baseline</b>" in page  # read from the compare table's rows
    assert "hierarchical bootstrap" in page
    assert "client lag p99 85 ms exceeds 50 ms" in page
    assert "RTX PRO 6000 Blackwell (assumed: simulator reference node)" in page
    assert "faster" in page


def test_bandwidth_inputs() -> None:
    assert known_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "RTX PRO 6000 Blackwell"
    assert known_gpu("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert known_gpu("NVIDIA H100 PCIe") is None
    assert known_gpu("NVIDIA H200") == "H200" and GPU_BANDWIDTH_GBS["H200"] == 4800.0
    assert gpu_of_run("sglang", '{"gpus": [{"name": "NVIDIA B200"}]}') == "B200"
    assert gpu_of_run("sglang", '{"host": "n1"}') is None
    assert gpu_of_run("sim", None) == "RTX PRO 6000 Blackwell"
    meta = {"spec": {"model": {"path": "/m"}}, "preflight": {"/d": {"params": {"decode_bytes_per_token": 1.0}},
                                                          "/m": {"params": {"decode_bytes_per_token": 5.0}}}}
    assert decode_bytes_per_token(meta) == 5.0
    assert decode_bytes_per_token({"preflight": None}) is None


def test_bandwidth_percent_matches_tpot(demo_root: str, tmp_path: Path) -> None:
    from cluster.analysis.comparison import compare_with_ci
    from cluster.analysis.report import bandwidth_table

    ci = compare_with_ci(Results.open(demo_root, "demo-sim"), n_boot=100)
    runs = DatasetStore(demo_root, "demo-sim").read_table("runs").to_pandas()
    bw = bandwidth_table(ci, runs, BYTES_PER_TOKEN).set_index("variant")
    base_tpot = ci[(ci["variant"] == "baseline") & (ci["load_value"] == 1.0)]["tpot_ms_mean"].iloc[0]
    bound = 8 * 1792e9 / BYTES_PER_TOKEN
    assert bw.loc["baseline", "bound_tok_s"] == pytest.approx(bound)
    assert bw.loc["baseline", "pct_of_bound"] == pytest.approx(100 * (1000 / base_tpot) / bound)
    assert bw.loc["baseline", "concurrency"] == 1.0


def test_cli_report_and_compare_ci(demo_root: str, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli"
    res = runner.invoke(app, ["results", "report", "demo-sim", "--root", demo_root, "--out", str(out),
                              "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    assert (out / "index.html").exists() and list(out.glob("throughput_*.png"))
    res = runner.invoke(app, ["results", "compare", "demo-sim", "--root", demo_root, "--ci", "--n-boot", "100",
                              "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert "speedup_tok_s_verdict" in res.output.splitlines()[0] and "faster" in res.output
    res = runner.invoke(app, ["results", "report", "nope", "--root", demo_root])
    assert res.exit_code == 2 and "not found" in res.output


def test_report_with_an_all_failed_cell(tmp_path: Path) -> None:
    from cluster.analysis.comparison import compare_with_ci
    from cluster.plan.runs import make_plan
    from cluster.config.loader import parse_spec_text
    from tests.unit.analysis.test_comparison import SPEC

    root = str(tmp_path)
    build_dataset(root, "f", steps=[2], conc=(1, 4), repeats=2, n_requests=12, out_tokens=16)
    spec = parse_spec_text(SPEC.format(name="f", other="nextn", steps=[2], out=16, n=12, conc=[1, 4], repeats=2))
    store = DatasetStore(root, "f")
    for p in make_plan(spec):
        if p.variant.name == "nextn" and p.load.value == 4:
            store.write_run(p, RunRow(status="failed", failure_reason="server OOM at startup"))
    ci = compare_with_ci(Results.open(root, "f"), n_boot=100).set_index(["variant", "load_value"])
    row = ci.loc[("nextn", 4.0)]
    assert row["n_runs"] == 0 and row["n_failed"] == 2 and np.isnan(row["output_tok_s"])
    assert row["speedup_tok_s_verdict"] == "" and "repeat 0 failed: server OOM at startup" in row["warnings"]
    page = build_report(Results.open(root, "f"), str(tmp_path / "out"), n_boot=100).read_text()
    assert page.count("server OOM at startup") >= 2  # warnings list and the failed-runs table
    assert "No memory-bandwidth bound" in page


def test_report_of_an_all_failed_experiment_draws_no_empty_plot(tmp_path: Path) -> None:
    """Every run failed: the page says so and names the reasons; no plot is drawn on empty data and matplotlib
    says nothing (it used to draw empty axes on 0-0.05 with a warning)."""
    import warnings

    from cluster.plan.runs import make_plan
    from cluster.config.loader import parse_spec_text
    from tests.unit.analysis.test_comparison import SPEC

    root = str(tmp_path)
    spec = parse_spec_text(SPEC.format(name="dead", other="nextn", steps=[2], out=16, n=12, conc=[1, 4], repeats=2))
    store = DatasetStore(root, "dead")
    for p in make_plan(spec):
        store.write_run(p, RunRow(status="failed", failure_reason="server died at startup"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = build_report(Results.open(root, "dead"), str(tmp_path / "out"), n_boot=100, bytes_per_token=BYTES_PER_TOKEN)
    page = path.read_text()
    assert not list(path.parent.glob("*.png")) and "<img" not in page
    assert "No plots: no run finished ok" in page and page.count("server died at startup") >= 1


def test_speedup_legend_uses_the_tables_words() -> None:
    from cluster.analysis.report_plots import speedup_legend

    one_repeat = speedup_legend({"baseline", "insufficient repeats"})
    assert "insufficient repeats" in one_repeat and "no significant difference" not in one_repeat
    assert "hollow = no significant difference" in speedup_legend({"no significant difference", "faster"})


def test_bandwidth_bound_names_the_concurrency_it_used(tmp_path: Path) -> None:
    root = str(tmp_path)
    build_dataset(root, "c4", steps=[1], conc=(4, 8), repeats=2, n_requests=12, out_tokens=16)
    page = build_report(Results.open(root, "c4"), str(tmp_path / "out"), n_boot=100, bytes_per_token=BYTES_PER_TOKEN).read_text()
    assert "decode tok/s at concurrency 4 (the lowest measured; not batch 1)" in page
    assert "at batch 1" not in page


def test_pareto_front() -> None:
    from cluster.analysis.report_plots import pareto_front

    # (per-user tok/s, tok/s per GPU) of a sweep: c1 (70, 9), c4 (60, 30), c8 (40, 50), c16 (20, 45) is dominated
    # by c8, and (55, 25) by c4
    x, y = [70.0, 60.0, 40.0, 20.0, 55.0], [9.0, 30.0, 50.0, 45.0, 25.0]
    assert pareto_front(x, y) == [2, 1, 0]
    # against a latency (lower is better): TTFT 50 ms with 9, 80 with 30, 200 with 50, 150 with 45 (kept: less
    # latency than c8), 90 with 25 (dominated by 80 with 30)
    assert pareto_front([50.0, 80.0, 200.0, 150.0, 90.0], y, x_higher=False) == [0, 1, 3, 2]
    assert pareto_front([1.0, float("nan")], [1.0, 5.0]) == [0]


def test_load_ticks_leave_out_the_ones_that_would_print_over_each_other() -> None:
    from cluster.analysis.report_plots import spaced_ticks

    # a capacity search's probes on a log2 axis spanning 5 octaves: ticks at least 0.04 · 5 = 0.2 octave apart,
    # so 17 and 18 (0.09 and 0.17 octave above 16) and 20 (0.07 above 19) go; both ends stay
    assert spaced_ticks([1, 2, 4, 8, 16, 17, 18, 19, 20, 24, 32], log=True) == [1, 2, 4, 8, 16, 19, 24, 32]
    assert spaced_ticks([1, 2, 4], log=True) == [1, 2, 4]
    assert spaced_ticks([10, 10.1, 20], log=False) == [10, 20]  # the highest load always labelled
    assert spaced_ticks([5], log=False) == [5]


@pytest.mark.parametrize("meta", [
    {"preflight": {"m": {"params": {"decode_bytes_per_token": 2.0}}}, "spec": "not an object"},
    {"preflight": {"m": {"params": {"decode_bytes_per_token": 2.0}}}, "spec": {"model": ["m"]}},
    {"preflight": {"m": {"params": {"decode_bytes_per_token": 2.0}}}, "spec": {"model": {"path": ["m"]}}},
    {"preflight": {"m": {"params": "x"}}, "spec": {"model": {"path": "m"}}},
])
def test_bytes_per_token_reads_a_mistyped_experiment_json_as_absent_or_found(meta: dict) -> None:
    """experiment.json is a file on disk: a level of another type once raised AttributeError (exit 70)."""
    from cluster.analysis.report import decode_bytes_per_token

    got = decode_bytes_per_token(meta)
    assert got in (None, 2.0)
