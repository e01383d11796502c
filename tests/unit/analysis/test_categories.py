"""Compare by category on hand-built records: each category's acceptance, TPOT and speedup come out apart, with
intervals; a dataset without categories shows one '-' category; the CLI renders `--by category`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cluster.analysis.categories import compare_by_category
from cluster.analysis.metrics import summarize_run
from cluster.cli import app
from cluster.kernel.records import RequestRecord
from cluster.dataset.store import DatasetStore
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: cats
model: {path: sim://qwen, engine: sim, tp: 8}
variants:
  - {name: baseline, baseline: true}
  - {name: nextn, speculative: {algorithm: NEXTN, num_steps: 3}}
workloads:
  - {name: mixed, input_tokens: 16, output_tokens: 33, num_requests: 20}
load: {concurrency: [1]}
repeats: 3
"""

TOKENS_PER_STEP = {"code": 4, "chat": 2}
"""Hand-built acceptance: a code request's verify steps carry 4 tokens each, a chat request's 2 (baseline: 1)."""


def _records(spec_steps: int, rng: np.random.Generator, categories: bool = True) -> list[RequestRecord]:
    recs, t0 = [], 0
    for i in range(20):
        cat = "code" if i % 2 else "chat"
        per = TOKENS_PER_STEP[cat] if spec_steps else 1
        step_ns = int(10e6 * rng.lognormal(0, 0.02))
        t = t0 + 50_000_000
        arrivals, tokens = [t], [1]
        left = 32
        while left:
            got = min(per, left)
            t += step_ns
            arrivals.append(t)
            tokens.append(got)
            left -= got
        recs.append(RequestRecord(
            request_index=i, intended_send_ns=t0, actual_send_ns=t0, prompt_tokens_sent=16, max_tokens=33,
            chunk_arrival_ns=arrivals, chunk_tokens=tokens, prompt_tokens=16, completion_tokens=33,
            spec_verify_ct=len(arrivals) - 1 if spec_steps else None, finish_reason="length",
            category=cat if categories else None))
        t0 = t
    return recs


def _build(root: str, categories: bool = True, repeats: int = 3) -> None:
    spec = parse_spec_text(SPEC.replace("repeats: 3", f"repeats: {repeats}"))
    store = DatasetStore(root, "cats")
    rng = np.random.default_rng(0)
    for p in make_plan(spec):
        k = p.variant.speculative.num_steps if p.variant.speculative else 0
        recs = _records(k, rng, categories)
        reqs, chunks = request_batches(recs)
        dur = max(r.chunk_arrival_ns[-1] for r in recs) / 1e9
        store.write_run(p, RunRow(status="ok", duration_s=dur, metrics=summarize_run(reqs, chunks, dur, None)),
                        reqs, chunks)


def test_each_category_is_reported_apart_with_intervals(tmp_path: Path) -> None:
    _build(str(tmp_path))
    df = compare_by_category(Results.open(str(tmp_path), "cats"), n_boot=300)
    r = df.set_index(["variant", "category"])
    assert set(r.index) == {("baseline", "code"), ("baseline", "chat"), ("nextn", "code"), ("nextn", "chat")}
    # acceptance per category: Σ(tokens − 1)/Σ verify steps of that category's requests only
    assert r.loc[("nextn", "code"), "accept_length"] == pytest.approx(4.0)
    assert r.loc[("nextn", "chat"), "accept_length"] == pytest.approx(2.0)
    assert np.isnan(r.loc[("baseline", "code"), "accept_length"])  # no verify steps: no acceptance
    for key in (("nextn", "code"), ("nextn", "chat")):
        row = r.loc[key]
        assert row["n_runs"] == 3 and row["n_requests"] == 30
        assert row["tpot_ms_mean_lo"] < row["tpot_ms_mean"] < row["tpot_ms_mean_hi"]  # 3 repeats: an interval
        assert row["per_user_tok_s_mean_lo"] < row["per_user_tok_s_mean"] < row["per_user_tok_s_mean_hi"]
    # TPOT: 32 tokens in 8 steps (code) or 16 steps (chat) of ~10 ms, over 32 gaps → ~2.5 ms and ~5 ms
    assert r.loc[("nextn", "code"), "tpot_ms_mean"] == pytest.approx(2.5, rel=0.05)
    assert r.loc[("nextn", "chat"), "tpot_ms_mean"] == pytest.approx(5.0, rel=0.05)
    assert r.loc[("baseline", "chat"), "tpot_ms_mean"] == pytest.approx(10.0, rel=0.05)
    # the speedup differs by category: ~4× for code, ~2× for chat, both significant
    assert r.loc[("nextn", "code"), "speedup_tpot"] == pytest.approx(4.0, rel=0.05)
    assert r.loc[("nextn", "chat"), "speedup_tpot"] == pytest.approx(2.0, rel=0.05)
    assert r.loc[("nextn", "code"), "speedup_tpot_lo"] > r.loc[("nextn", "chat"), "speedup_tpot_hi"]
    assert set(r["speedup_tpot_verdict"]) == {"baseline", "faster"}
    assert "per category" in df.attrs["ci_method"]


def test_without_categories_one_dash_row_per_cell_and_the_cli(tmp_path: Path) -> None:
    _build(str(tmp_path), categories=False)
    df = compare_by_category(Results.open(str(tmp_path), "cats"), n_boot=200)
    assert list(df["category"]) == ["-", "-"]
    # no categories: the whole window's acceptance (10 code-like requests at 4 and 10 chat-like at 2 tokens/step)
    assert df.set_index("variant").loc["nextn", "accept_length"] == pytest.approx(32 * 20 / (8 * 10 + 16 * 10))
    _build(str(tmp_path / "c"))
    args = ["results", "compare", "cats", "--root", str(tmp_path / "c"), "--by", "category", "--n-boot", "200"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "code" in res.output and "chat" in res.output and "4.00" in res.output and "per category" in res.output
    csv = CliRunner().invoke(app, args + ["--format", "csv"])
    assert csv.exit_code == 0 and csv.output.splitlines()[0].startswith("workload,load_kind,load_value,variant,"
                                                                         "category,")


def test_one_repeat_says_no_interval_in_the_table(tmp_path: Path) -> None:
    # the rendered table must print "[no CI]" literally (rich would read it as a markup tag and drop it, leaving
    # a bare figure that looks like it has an interval somewhere)
    _build(str(tmp_path), repeats=1)
    res = CliRunner().invoke(app, ["results", "compare", "cats", "--root", str(tmp_path), "--by", "category",
                                   "--n-boot", "200"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "4.00 [no CI]" in res.output and "2.00 [no CI]" in res.output


def test_the_report_has_the_category_table_only_when_prompts_have_categories(tmp_path: Path) -> None:
    import html

    from cluster.analysis.report import build_report

    _build(str(tmp_path / "with"))
    page = html.unescape(build_report(Results.open(str(tmp_path / "with"), "cats"), str(tmp_path / "r1"), n_boot=200).read_text())
    assert "By prompt category" in page and "<td>code</td>" in page and "<td>chat</td>" in page
    # nextn's code requests carry 4 tokens per verify step: (33 - 1) / 8 steps = 4.00, chat's 2.00
    section = page.split("By prompt category")[1].split("<h2>")[0]
    assert "4.00" in section and "2.00" in section
    # a category's tokens over the shared window follow how many of its prompts a repeat drew: never labelled as a
    # throughput of its own
    assert "tok/s share" in section and "output tok/s" not in section and "no speed of its own" in section
    _build(str(tmp_path / "without"), categories=False)
    page = build_report(Results.open(str(tmp_path / "without"), "cats"), str(tmp_path / "r2"), n_boot=200).read_text()
    assert "By prompt category" not in page


def _session_records() -> list[RequestRecord]:
    """5 sessions of 4 turns: turn t's prompt is 16·t tokens, of which the cache served 16·(t − 1) (the history);
    turn t's first token comes 10·t ms after its send, each of its 32 later tokens 10 ms apart."""
    recs, t0 = [], 0
    for i in range(20):
        turn = i % 4 + 1
        first = t0 + 10_000_000 * turn
        arrivals = [first + 10_000_000 * k for k in range(33)]
        recs.append(RequestRecord(
            request_index=i, intended_send_ns=t0, actual_send_ns=t0, prompt_tokens_sent=16 * turn, max_tokens=33,
            chunk_arrival_ns=arrivals, chunk_tokens=[1] * 33, prompt_tokens=16 * turn, completion_tokens=33,
            cached_tokens=16 * (turn - 1), finish_reason="length", session_index=i // 4, turn=turn))
        t0 = arrivals[-1]
    return recs


def test_by_turn_reports_each_session_turn_apart_with_its_prefix_hit_rate(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "cats")
    for p in make_plan(spec):
        recs = _session_records()
        reqs, chunks = request_batches(recs)
        dur = recs[-1].chunk_arrival_ns[-1] / 1e9
        store.write_run(p, RunRow(status="ok", duration_s=dur, metrics=summarize_run(reqs, chunks, dur, None)),
                        reqs, chunks)
    df = compare_by_category(Results.open(str(tmp_path), "cats"), n_boot=200, by="turn")
    base = df[df["variant"] == "baseline"].set_index("turn")
    assert list(base.index) == ["1", "2", "3", "4"]  # in turn order
    # prefix hit rate of turn t: Σ cached / Σ prompt = 16(t − 1) / 16t → 0, 1/2, 2/3, 3/4
    assert list(base["prefix_hit_rate"]) == pytest.approx([0.0, 1 / 2, 2 / 3, 3 / 4])
    # TTFT p50 of turn t: 10·t ms; TPOT: 32 gaps of 10 ms over 32 tokens = 10 ms in every turn
    assert list(base["ttft_ms_p50"]) == pytest.approx([10.0, 20.0, 30.0, 40.0])
    assert list(base["tpot_ms_mean"]) == pytest.approx([10.0] * 4)
    assert (base["n_requests"] == 15).all()  # 5 sessions × 3 repeats each
    assert "per session turn" in df.attrs["ci_method"]
    res = CliRunner().invoke(app, ["results", "compare", "cats", "--root", str(tmp_path), "--by", "turn",
                                   "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    assert "by session turn" in res.output and "prefix hit %" in res.output
