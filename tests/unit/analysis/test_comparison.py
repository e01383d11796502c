"""compare_with_ci: a known large effect is 'faster', an A/A comparison is 'no significant difference'."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from cluster.analysis.comparison import compare_with_ci, format_estimate, format_speedup, request_arrays
from cluster.analysis.metrics import summarize_run
from cluster.plan.runs import make_plan
from cluster.analysis.query import QueryError, baseline_of
from cluster.kernel.records import RequestRecord
from cluster.kernel.run_row import RunRow
from cluster.loadgen.sink import request_batches
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results

SPEC = """
version: 1
name: {name}
model: {{path: sim://qwen, engine: sim, tp: 8}}
slo: {{ttft_ms: 400, tpot_ms: 20}}
variants:
  - name: baseline
    baseline: true
  - name: {other}
    speculative: {{algorithm: NEXTN, num_steps: {steps}}}
workloads:
  - {{name: chat, input_tokens: 128, output_tokens: {out}, num_requests: {n}}}
load: {{concurrency: {conc}}}
repeats: {repeats}
"""

ACCEPT_PROBS = (0.8, 0.65, 0.5)


def synth_records(rng: np.random.Generator, n: int, conc: int, step_ms: float, ttft_ms: float, out_tokens: int,
                  spec_steps: int, cached_tokens: Optional[int] = None) -> list[RequestRecord]:
    """Closed loop with `conc` lanes: each request = TTFT then verify steps carrying 1 + accepted drafts tokens."""
    lanes = np.zeros(conc, dtype=np.int64)
    recs = []
    for i in range(n):
        lane = i % conc
        send = int(lanes[lane])
        t = send + int(ttft_ms * rng.lognormal(0, 0.15) * 1e6)
        arrivals, tokens, left = [t], [1], out_tokens - 1
        hist = [0] * (spec_steps + 1)  # verify steps by drafts accepted, counted before the max_tokens cut (as SGLang)
        while left > 0:
            got = 1
            for p in ACCEPT_PROBS[:spec_steps]:
                if rng.random() >= p:
                    break
                got += 1
            hist[got - 1] += 1
            got = min(got, left)
            t += int(step_ms * rng.lognormal(0, 0.05) * 1e6)
            arrivals.append(t)
            tokens.append(got)
            left -= got
        lanes[lane] = t
        recs.append(RequestRecord(
            request_index=i, intended_send_ns=send, actual_send_ns=send + int(rng.integers(0, 200_000)),
            prompt_tokens_sent=128, max_tokens=out_tokens, chunk_arrival_ns=arrivals, chunk_tokens=tokens,
            prompt_tokens=128, completion_tokens=out_tokens,
            spec_verify_ct=len(arrivals) - 1 if spec_steps else None, finish_reason="length",
            cached_tokens=cached_tokens, spec_correct_drafts_histogram=hist if spec_steps else None))
    return recs


def build_dataset(root: str, name: str, *, other: str = "nextn", steps: Optional[list[int]] = None,
                  conc: tuple[int, ...] = (1, 8), repeats: int = 3, n_requests: int = 48, out_tokens: int = 48,
                  speed: Optional[dict[str, float]] = None, seed: int = 0, run_sigma: float = 0.03,
                  invalid: Optional[tuple[str, int, int]] = None, gpu_name: Optional[str] = None,
                  device: Optional[str] = None, engine: str = "sim",
                  cached_tokens: Optional[dict[str, int]] = None) -> None:
    """A synthetic experiment written through DatasetStore.write_run: baseline vs `other` (NEXTN depths `steps`,
    or a plain copy of the baseline when steps is empty), each repeat with its own run-level speed offset."""
    from cluster.dataset.store import DatasetStore

    steps = [1, 2, 3] if steps is None else steps
    spec = parse_spec_text(SPEC.format(name=name, other=other, steps=steps or [1], out=out_tokens,
                                       n=n_requests, conc=list(conc), repeats=repeats))
    if not steps:
        spec = parse_spec_text(SPEC.format(name=name, other=other, steps=[1], out=out_tokens, n=n_requests,
                                           conc=list(conc), repeats=repeats).replace(
            "    speculative: {algorithm: NEXTN, num_steps: [1]}\n", ""))
    if engine != "sim":
        spec = parse_spec_text(SPEC.format(
            name=name, other=other, steps=steps or [1], out=out_tokens, n=n_requests, conc=list(conc),
            repeats=repeats).replace("{path: sim://qwen, engine: sim, tp: 8}", f"{{path: /models/q, engine: {engine}, tp: 8}}"))
    store = DatasetStore(root, name)
    rng = np.random.default_rng(seed)
    for p in make_plan(spec):
        k = p.variant.speculative.num_steps if p.variant.speculative else 0
        c = int(p.load.value)
        factor = (speed or {}).get(p.variant.name, 1.0) * rng.lognormal(0, run_sigma)
        step_ms = 13.9 * (1 + 0.06 * (c - 1)) * (1 + 0.12 * k) / factor
        recs = synth_records(rng, n_requests, c, step_ms, 60.0 * (1 + 0.15 * (c - 1)), out_tokens, k,
                             (cached_tokens or {}).get(p.variant.name))
        reqs, chunks = request_batches(recs)
        duration_s = max(r.chunk_arrival_ns[-1] for r in recs) / 1e9
        row = RunRow(status="ok", duration_s=duration_s, metrics=summarize_run(reqs, chunks, duration_s, spec.slo))
        if invalid is not None and (p.variant.name, c, p.repeat) == invalid:
            row = replace(row, status="invalid", invalid_reasons="client lag p99 85 ms exceeds 50 ms")
        if gpu_name:
            row = replace(row, provenance_json='{"gpu_names": ["%s"]}' % gpu_name)
        if device:
            row = replace(row, resolved_args_json='{"device": "%s"}' % device)
        store.write_run(p, row, reqs, chunks)


def test_large_effect_is_faster(tmp_path: Path) -> None:
    build_dataset(str(tmp_path), "fast", other="tuned", steps=[], speed={"tuned": 1.5}, repeats=3)
    df = compare_with_ci(Results.open(str(tmp_path), "fast"), n_boot=500)
    r = df.set_index(["variant", "load_value"])
    for c in (1.0, 8.0):
        row = r.loc[("tuned", c)]
        assert row["speedup_tok_s_verdict"] == "faster"
        assert row["speedup_tpot_verdict"] == "faster"
        assert 1.3 < row["speedup_tok_s"] < 1.7 and row["speedup_tok_s_lo"] > 1.0
        assert row["speedup_tok_s_lo"] < row["speedup_tok_s"] < row["speedup_tok_s_hi"]
        assert row["speedup_tpot"] == pytest.approx(row["tpot_ms_mean"] and
                                                    r.loc[("baseline", c), "tpot_ms_mean"] / row["tpot_ms_mean"])
        assert r.loc[("baseline", c), "speedup_tok_s_verdict"] == "baseline"
        assert row["ttft_ms_p99_lo"] <= row["ttft_ms_p99"] <= row["ttft_ms_p99_hi"]
        assert row["n_runs"] == 3
    assert "95%" in df.attrs["ci_method"] and baseline_of(df) == "baseline"
    # the speedup text the CLI renders
    tuned = r.loc[("tuned", 1.0)]
    text = format_speedup(tuned["speedup_tok_s"], tuned["speedup_tok_s_lo"], tuned["speedup_tok_s_hi"], "faster")
    assert text.endswith("faster") and text.startswith(f"{tuned['speedup_tok_s']:.2f}× [")


def test_a_a_is_no_significant_difference(tmp_path: Path) -> None:
    build_dataset(str(tmp_path), "aa", other="copy", steps=[], repeats=3, seed=7)
    df = compare_with_ci(Results.open(str(tmp_path), "aa"), n_boot=500)
    copy = df[df["variant"] == "copy"]
    assert list(copy["speedup_tok_s_verdict"]) == ["no significant difference"] * 2
    assert list(copy["speedup_tpot_verdict"]) == ["no significant difference"] * 2
    assert (copy["speedup_tok_s_lo"] < 1.0).all() and (copy["speedup_tok_s_hi"] > 1.0).all()
    assert format_speedup(1.02, 0.95, 1.09, "no significant difference") == \
        "no significant difference (1.02× [0.95, 1.09])"


def test_acceptance_goodput_and_warnings(tmp_path: Path) -> None:
    build_dataset(str(tmp_path), "spec", steps=[2], repeats=2, invalid=("nextn", 8, 1))
    df = compare_with_ci(Results.open(str(tmp_path), "spec"), n_boot=300)
    r = df.set_index(["variant", "load_value"])
    nx = r.loc[("nextn", 1.0)]  # one depth: the variant keeps its spec name
    # E[accepted drafts] with p = 0.8, 0.65: 0.8 + 0.8 * 0.65 = 1.32 → accept length ≈ 2.32 (truncated at the end)
    assert 2.0 < nx["accept_length"] < 2.5
    assert math.isnan(r.loc[("baseline", 1.0), "accept_length"])
    assert 0.0 <= nx["slo_attainment"] <= 1.0 and nx["goodput_rps"] > 0
    inv = r.loc[("nextn", 8.0)]
    assert inv["n_runs"] == 1 and inv["n_invalid"] == 1
    assert any("repeat 1 invalid: client lag p99 85 ms" in w for w in inv["warnings"])
    assert inv["speedup_tok_s_verdict"] == "insufficient repeats"
    assert any("only 2 repeats" in w for w in nx["warnings"])
    assert any("ttft_ms_p99: a run has only 48 requests" in w for w in nx["warnings"])
    assert not any("less than 10 s" in w for w in nx["warnings"])  # c=1: 48 sequential requests ≈ 34 s
    assert any("less than 10 s" in w for w in inv["warnings"])


def test_request_arrays_and_run_level_mode(tmp_path: Path) -> None:
    build_dataset(str(tmp_path), "ra", steps=[3], repeats=2, conc=(4,))
    from cluster.dataset.store import DatasetStore

    runs = DatasetStore(str(tmp_path), "ra").read_table("runs").to_pandas()
    arrays = request_arrays(Results.open(str(tmp_path), "ra"), runs["run_key"].tolist()[:1])
    assert list(arrays) == runs["run_key"].tolist()[:1]
    a = arrays[runs["run_key"].iloc[0]]
    assert a["ttft_ms"].size == 48 and (a["e2e_ms"] > a["ttft_ms"]).all()
    run_level = compare_with_ci(Results.open(str(tmp_path), "ra"), n_boot=200, request_level=False)
    full = compare_with_ci(Results.open(str(tmp_path), "ra"), n_boot=200)
    assert run_level["output_tok_s"].tolist() == pytest.approx(full["output_tok_s"].tolist())
    m = runs.groupby("variant")["m_ttft_ms_p99"].mean()
    assert run_level.set_index("variant")["ttft_ms_p99"].to_dict() == pytest.approx(m.to_dict())
    with pytest.raises(QueryError, match="not a variant"):
        compare_with_ci(Results.open(str(tmp_path), "ra"), baseline="nope")


def test_format_estimate() -> None:
    assert format_estimate(123.44, 110.21, 130.06) == "123.4 [110.2, 130.1]"
    assert format_estimate(5.0, math.nan, math.nan) == "5.0 [no CI]"
    assert format_estimate(math.nan, 1, 2) == "-"


def test_one_baseline_rule_for_every_compare_path(tmp_path: Path) -> None:
    from cluster.analysis.query import compare_from_requests, compare_table

    build_dataset(str(tmp_path), "bl", steps=[2], repeats=1, conc=(2,), n_requests=8, out_tokens=8)
    paths = {
        "runs": lambda b: compare_table(Results.open(str(tmp_path), "bl"), b),
        "requests": lambda b: compare_from_requests(Results.open(str(tmp_path), "bl"), b),
        "ci": lambda b: compare_with_ci(Results.open(str(tmp_path), "bl"), b, n_boot=100, request_level=False),
    }
    for chosen, expected in ((None, "baseline"), ("nextn", "nextn")):
        for name, compare in paths.items():
            df = compare(chosen)
            assert df.loc[df["is_baseline"].astype(bool), "variant"].tolist() == [expected], (name, chosen)
    messages = set()
    for compare in paths.values():
        with pytest.raises(QueryError, match="not a variant") as e:
            compare("nope")
        assert e.value.field == "--baseline" and e.value.expected == "one of baseline, nextn"
        messages.add(str(e.value))
    assert len(messages) == 1


@pytest.mark.parametrize("engine,device,labelled", [("sglang", "cpu", True), ("sglang", "cuda", False),
                                                    ("sglang", None, False), ("sim", "cpu", False)])
def test_compare_table_says_when_servers_ran_on_a_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str,
                                                      device: Optional[str], labelled: bool) -> None:
    """A real engine on a CPU is labelled so (the simulator has its own label)."""
    from rich.console import Console

    import cluster.commands.results as results_cmd
    from cluster.analysis.comparison import served_devices

    build_dataset(str(tmp_path), "dev", steps=[1], repeats=1, conc=(1,), n_requests=8, device=device,
                  engine=engine)
    assert served_devices(Results.open(str(tmp_path), "dev")) == ({device} if device else set())
    recorder = Console(record=True, width=220)
    monkeypatch.setattr(results_cmd, "console", recorder)
    results_cmd.print_compare(Results.open(str(tmp_path), "dev"), None, "table")
    assert ("served on CPU (CPU numbers, not GPU numbers)" in " ".join(recorder.export_text().split())) is labelled


def test_prefix_hit_rate_per_point_and_only_shown_when_something_hit(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    # every nextn request found 32 of its 128 prompt tokens cached: 32 / 128 = 25 %; the baseline's found none
    build_dataset(str(tmp_path), "pc", steps=[1], conc=(1,), repeats=2, n_requests=12, out_tokens=8,
                  cached_tokens={"nextn": 32, "baseline": 0})
    r = compare_with_ci(Results.open(str(tmp_path), "pc"), n_boot=200).set_index("variant")
    assert r.loc["nextn", "prefix_hit_rate"] == pytest.approx(0.25)
    assert r.loc["baseline", "prefix_hit_rate"] == 0.0
    out = CliRunner().invoke(app, ["results", "compare", "pc", "--ci", "--n-boot", "200", "--root", str(tmp_path)],
                             env={"COLUMNS": "200"}).output
    assert "prefix hit %" in out and "25.0" in out, out
    build_dataset(str(tmp_path), "none", steps=[1], conc=(1,), repeats=2, n_requests=12, out_tokens=8)
    out = CliRunner().invoke(app, ["results", "compare", "none", "--ci", "--n-boot", "200", "--root", str(tmp_path)],
                             env={"COLUMNS": "200"}).output
    assert "prefix hit" not in out, out
