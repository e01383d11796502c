"""`engine: sglang` experiments through the sglbench driver on local Ray against real SGLang 0.5.23 on the CPU.

The EngineActor launches `python -m sglang.launch_server` from the tier's interpreter with the argv `sglbench plan`
prints; acceptance, counters, the correctness gate, the concurrency cap, flushes, metrics and smoke are asserted on
what the real server answered. Numbers here are CPU numbers with stand-in kernels, never GPU numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cpu_faults import MidWindow, assert_decisive, kill_main, kill_scheduler
from cpu_pipeline import assert_group_gone, facts, ideal_accept_length, load, run, spec_text, table
from sglang_cpu_server import ORACLE_MAX_NEW_TOKENS, PROMPTS, accept_length

pytestmark = pytest.mark.ray

OUTPUT_TOKENS = 32
STEPS = (1, 2, 3)
OK_POINT, FAULT_POINT = 4, 8
ECHO_REQUESTS = 16
OPENAI_TOKENS = 12
"""Two waves at c8: a window long enough (~1 s) for a fault fired at its first prefill to land inside it."""
FAULTS = {"baseline": kill_scheduler, "nextn-1": kill_main}
"""The echo variants whose c8 window is hit, and how."""


def _verify_sum(requests: pd.DataFrame, run_key: str) -> int:
    return int(requests[requests["run_key"] == run_key]["spec_verify_ct"].sum())


def _counter_delta(row: pd.Series, name: str) -> float:
    return float(json.loads(row["server_counters_json"])["delta"].get(name, 0.0))


SESSION_INPUT, SESSION_OUTPUT, SESSION_TURNS = 16, 8, 3


def _session_window(base_url: str, tmp: Path) -> dict[str, list[Any]]:
    """Two 3-turn sessions sent straight to the running server by the window runner (the columns of `requests`)."""
    from cluster.engines.sglang import SGLangEngine
    from cluster.loadgen.prompt_sources import build_prompt_sequence, build_session_plan
    from cluster.loadgen.runner import run_load_point
    from cluster.kernel.window_job import WindowJob
    from cluster.kernel.runs import LoadPoint
    from cluster.config.workload import WorkloadSpec

    w = WorkloadSpec.model_validate({
        "name": "s", "input_tokens": SESSION_INPUT, "output_tokens": SESSION_OUTPUT, "num_requests": 2 * SESSION_TURNS,
        "prompts": {"source": "random_ids", "vocab_size": 900}, "sessions": {"turns": SESSION_TURNS}})
    prompts = build_prompt_sequence(w, w.num_requests, 11, tmp)
    res = run_load_point(SGLangEngine(), WindowJob(base_url, "native", SESSION_OUTPUT, LoadPoint("concurrency", 2.0),
                                                   11, True, 0.0, "tiny", 300.0), prompts,
                                                   sessions=build_session_plan(w, w.num_requests, 11, tmp))
    out: dict[str, list[Any]] = res.requests.to_pydict()
    return out


PROFILE_STEPS = 4


def _view(python: Path, model: Path, f: Any) -> Any:
    """A handle on the driver's server (the EngineActor started it and stops it); never starts or stops one."""
    from sglang_cpu_server import SGLangCPUServer

    view = SGLangCPUServer(python=python, model=model, extra_args=[], log_path=Path(f.log_path), port=f.port)
    assert view.url == f.base_url.rstrip("/"), (view.url, f.base_url)
    return view


def _profile(server: Any, out: Path) -> dict[str, Any]:
    """sglbench's own /start_profile body, two short requests, then the traces and /stop_profile's answer."""
    from cluster.engines.sglang import SGLangEngine
    from cluster.telemetry.profile import wait_for_traces

    req = SGLangEngine().profile_request(str(out), PROFILE_STEPS, "sglbench-real", cpu=True)
    assert req is not None
    status, text = server.request(req.path, json.loads(req.body))
    assert status == 200, text
    for prompt in PROMPTS[:2]:
        assert server.generate(prompt, max_new_tokens=8)[0] == 200
    files = wait_for_traces(out, 1, timeout_s=120)
    return {"out": out, "files": files, "stop": server.request("/stop_profile", {})}


def _openai_streams(server: Any) -> dict[str, list[bytes]]:
    """The baseline's streamed OpenAI answers (completions and chat; usage none, final only, in every chunk) as
    their SSE data payloads, for the OpenAI parser's fast path against what SGLang really sends."""
    out: dict[str, list[bytes]] = {}
    for path, body in (("/v1/completions", {"prompt": PROMPTS[0]}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPTS[0]}]})):
        for usage in ("none", "final", "each"):
            b: dict[str, Any] = {**body, "model": "tiny", "max_tokens": OPENAI_TOKENS, "temperature": 0,
                                 "stream": True, "ignore_eos": True}
            if usage != "none":
                b["stream_options"] = {"include_usage": True, "continuous_usage_stats": usage == "each"}
            status, text = server.request(path, b)
            assert status == 200, text[:500]
            out[f"{path} usage {usage}"] = [line[6:].encode() for line in text.split("\n")
                                            if line.startswith("data: ") and line != "data: [DONE]"]
    return out


@pytest.fixture(scope="module")
def echo_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """echo: a baseline and NEXTN-1/2/3 in one experiment (four servers, one at a time), each at c4 then c8. Once the
    baseline's c4 run is done, while its server is still up: its greedy outputs, /server_info, wire transcript and a
    kernel profile. Once NEXTN-3's: smoke, greedy outputs (compared with the baseline's), a negative budget, its wire
    transcript and two sessions. Two faults ride on these servers' c8 windows (each extra start costs ~35-60 s of
    the tier): the baseline's scheduler is SIGKILLed, then NEXTN-1's main pid; the next variant goes on each time.
    No server of its own for the oracle: SGLang's torch_native attention is the stand-in attention's reference op by
    op (test_standin_ops.py)."""
    from record_transcripts import record_running, redaction_paths

    from cluster.engines.smoke import run_smoke

    tmp = tmp_path_factory.mktemp("echo-pipeline")
    variants = """  - {name: baseline, baseline: true}
  - {name: nextn, speculative: {algorithm: NEXTN, num_steps: [1, 2, 3]}}"""
    spec = load(spec_text("cpu-echo", mimo_models / "echo", sglang_cpu_python, tmp / "out", variants,
                          concurrency=f"[{OK_POINT}, {FAULT_POINT}]", num_requests=ECHO_REQUESTS))
    redact = redaction_paths(sglang_cpu_python, mimo_models, tmp)
    base: dict[str, Any] = {}
    live: dict[str, Any] = {}
    watchers = {v: MidWindow(v, kill) for v, kill in FAULTS.items()}

    def on_run(drv: Any, p: Any, status: str) -> None:
        extras(drv, p)
        # armed after the extras (the transcript flushes the cache and sends requests): the c8 window is the fault's
        if p.load.label == f"c{OK_POINT}" and p.variant.name in watchers:
            watchers[p.variant.name].arm(drv)

    def extras(drv: Any, p: Any) -> None:
        if p.variant.name == "baseline" and not base:
            f = facts(drv.result, "baseline")
            view = _view(sglang_cpu_python, mimo_models / "echo", f)
            base["outputs"] = view.greedy_outputs(ORACLE_MAX_NEW_TOKENS)
            code, body = view.request("/server_info")
            assert code == 200, body[:500]
            base["server_info"] = json.loads(body)
            base["transcript"] = record_running(view, "baseline", redact)
            base["profile"] = _profile(view, tmp / "profile")
            base["openai_streams"] = _openai_streams(view)
            base["log_path"] = f.log_path
        if p.variant.name != "nextn-3" or live:
            return
        f = facts(drv.result, "nextn-3")
        live["smoke"] = run_smoke(f.base_url, 120.0)
        view = _view(sglang_cpu_python, mimo_models / "echo", f)
        live["outputs"] = view.greedy_outputs(ORACLE_MAX_NEW_TOKENS)
        live["bad_max_new_tokens"] = view.generate(PROMPTS[0], max_new_tokens=-1)
        live["transcript"] = record_running(view, f"nextn{max(STEPS)}", redact, list(f.argv))
        live["sessions"] = _session_window(f.base_url, tmp)

    result = run(spec, tmp, on_run)
    for w in watchers.values():
        w.join()
    return {"spec": spec, "result": result, "live": live, "runs": table(result, spec, "runs"), "watchers": watchers,
            "baseline": base, "requests": table(result, spec, "requests"),
            "server_metrics": table(result, spec, "server_metrics")}


def _ok_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs no fault hit."""
    return runs[~(runs["variant"].isin(list(FAULTS)) & (runs["load_value"] == FAULT_POINT))]


def test_echo_runs_ok_and_accepts_every_draft(echo_experiment: dict[str, Any]) -> None:
    runs = _ok_rows(echo_experiment["runs"])
    assert sorted(zip(runs["variant"], runs["load_value"].astype(int))) == [
        ("baseline", OK_POINT), ("nextn-1", OK_POINT), ("nextn-2", OK_POINT), ("nextn-2", FAULT_POINT),
        ("nextn-3", OK_POINT), ("nextn-3", FAULT_POINT)]
    assert set(runs["status"]) == {"ok"}, \
        runs[["variant", "status", "invalid_reasons", "failure_reason"]].to_dict("records")
    assert runs[runs["variant"] == "baseline"]["m_accept_length"].isna().all()
    for k in STEPS:
        ideal = ideal_accept_length(k, OUTPUT_TOKENS)
        for acc in runs[runs["variant"] == f"nextn-{k}"]["m_accept_length"].astype(float):
            print(f"[sglang_cpu] echo NEXTN-{k}: accept length {acc:.3f} (all accepted: {ideal:.3f})")
            assert 0.97 * ideal <= acc <= k + 1 + 1e-9, f"echo NEXTN-{k}: {acc:.3f}, every draft should be accepted"


def test_verify_counter_delta_equals_per_request_verify_steps(echo_experiment: dict[str, Any]) -> None:
    runs, requests = _ok_rows(echo_experiment["runs"]), echo_experiment["requests"]
    for _, row in runs[runs["variant"] != "baseline"].iterrows():
        per_request = _verify_sum(requests, row["run_key"])
        assert per_request > 0
        assert _counter_delta(row, "verify_calls") == per_request, (row["variant"], row["server_counters_json"])
    base = runs[runs["variant"] == "baseline"].iloc[0]
    assert _counter_delta(base, "verify_calls") == 0


def _faulted_run(echo_experiment: dict[str, Any], variant: str) -> pd.Series:
    runs = echo_experiment["runs"]
    rows = runs[runs["variant"] == variant].sort_values("order_index")
    assert list(rows["load_value"].astype(int)) == [OK_POINT, FAULT_POINT]
    assert rows.iloc[0]["status"] == "ok", rows.iloc[0].to_dict()
    row = rows.iloc[1]
    assert row["status"] == "failed", row.to_dict()
    assert "server died during the measured window" in row["failure_reason"], row["failure_reason"]
    assert row["log_tail"], "a failed run keeps the server log tail"
    return row


def _next_variant_went_on(echo_experiment: dict[str, Any], variant: str) -> None:
    runs = echo_experiment["runs"]
    order = list(runs.sort_values("order_index")["variant"].drop_duplicates())
    after = order[order.index(variant) + 1]
    assert (runs[runs["variant"] == after]["status"] == "ok").any(), f"{after} did not go on after {variant}'s fault"


def test_scheduler_sigkill_mid_window(echo_experiment: dict[str, Any]) -> None:
    w = echo_experiment["watchers"]["baseline"]
    assert w.done.get("what", "").startswith("SIGKILL sglang::scheduler"), w.done
    row = _faulted_run(echo_experiment, "baseline")
    # SGLang's own line: "Subprocess scheduler_0 (pid=…) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    assert "scheduler_0" in row["failure_reason"] and "crashed with exit code -9" in row["failure_reason"]
    assert_decisive(row)
    assert_group_gone(w.done["pgid"], "baseline")
    _next_variant_went_on(echo_experiment, "baseline")


def test_main_pid_sigkill_mid_window(echo_experiment: dict[str, Any]) -> None:
    w = echo_experiment["watchers"]["nextn-1"]
    assert w.done.get("what", "").startswith("SIGKILL main pid"), w.done
    row = _faulted_run(echo_experiment, "nextn-1")
    # a SIGKILLed SGLang writes nothing: the watchdog's note is the decisive line
    assert "was killed by SIGKILL" in row["failure_reason"], row["failure_reason"]
    assert_decisive(row)
    assert_group_gone(w.done["pgid"], "nextn-1")
    _next_variant_went_on(echo_experiment, "nextn-1")


def test_echo_experiment_leaves_no_process(echo_experiment: dict[str, Any]) -> None:
    from cpu_pipeline import assert_none_marked

    assert_none_marked(echo_experiment["spec"].name)


def test_server_info_records_what_sglang_resolved(echo_experiment: dict[str, Any]) -> None:
    """NEXTN resolved as EAGLE is expected; device, backend, steps and the explicit cap are what we asked."""
    result = echo_experiment["result"]
    for k in STEPS:
        f = facts(result, f"nextn-{k}")
        si = f.infos["server_info"]
        assert si["speculative_algorithm"] == "EAGLE" and si["speculative_num_steps"] == k
        assert si["speculative_num_draft_tokens"] == k + 1 and si["speculative_eagle_topk"] == 1
        assert si["device"] == "cpu" and si["attention_backend"] == "intel_amx" and si["version"] == "0.5.23"
        assert si["max_running_requests"] == 16
        assert si["internal_states"][0]["effective_max_running_requests_per_dp"] == 16
        assert "--speculative-algorithm NEXTN" in " ".join(f.argv)
        # SGLang turns overlap scheduling off for speculative decoding on a CPU; every variant here asks for it off
        assert si["disable_overlap_schedule"] is True
    base = facts(result, "baseline")
    assert base.infos["server_info"]["speculative_algorithm"] is None
    assert base.infos["server_info"]["attention_backend"] == "intel_amx"


def test_argv_is_what_plan_prints(echo_experiment: dict[str, Any]) -> None:
    """The EngineActor ran exactly the command `sglbench plan` shows (the port aside)."""
    from cluster.engines.registry import get_engine
    from cluster.plan.runs import expand_variants

    spec, result = echo_experiment["spec"], echo_experiment["result"]
    for v in expand_variants(spec):
        f = facts(result, v.name)
        planned = get_engine("sglang").launch(v, "127.0.0.1", f.port, spec.engines["sglang"], "python").argv
        assert tuple(f.argv) == tuple(planned)
        assert list(f.argv[:3]) == [str(spec.engines["sglang"].python), "-m", "sglang.launch_server"]


def test_flush_before_every_window_and_metrics_scraped(echo_experiment: dict[str, Any]) -> None:
    runs, sm, result = _ok_rows(echo_experiment["runs"]), echo_experiment["server_metrics"], echo_experiment["result"]
    for _, row in runs.iterrows():
        prov = json.loads(row["provenance_json"])
        assert prov.get("flushed", True) is True and "cache flush" not in str(row["invalid_reasons"])
        log = Path(facts(result, row["variant"]).log_path).read_text(errors="replace")
        # SGLang's own log line for a successful /flush_cache: one per window (smoke adds one on nextn-3)
        assert log.count("Cache flushed successfully!") >= 1, row["variant"]
    names = set(sm["metric"])
    for metric in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:generation_tokens_total"):
        assert metric in names, sorted(names)[:40]
    spec_runs = set(runs[runs["variant"] != "baseline"]["run_key"])
    assert "sglang:spec_verify_calls_total" in set(sm[sm["run_key"].isin(spec_runs)]["metric"])


def test_gate_passes_on_echo_without_answer_checks(echo_experiment: dict[str, Any]) -> None:
    result = echo_experiment["result"]
    for name in ("baseline", "nextn-1", "nextn-2", "nextn-3"):
        gate = result.servers[name].segment.correctness
        assert gate is not None and gate.passed and not gate.skipped, (name, gate)


def test_smoke_passes_against_real_nextn(echo_experiment: dict[str, Any]) -> None:
    checks = echo_experiment["live"]["smoke"]
    failed = [(c.name, c.expected, c.found) for c in checks if not c.ok]
    assert failed == [], failed
    assert "meta_info.spec_verify_ct" in {c.name for c in checks}


def test_no_server_outlived_its_segment(echo_experiment: dict[str, Any]) -> None:
    result = echo_experiment["result"]
    for name in result.servers:
        assert_group_gone(facts(result, name).pgid, name)



def test_compare_labels_cpu_numbers(echo_experiment: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The compare table says these are CPU numbers: SGLang's own /server_info answered device=cpu."""
    from rich.console import Console

    import cluster.commands.results as results_cmd
    from cluster.analysis.comparison import served_devices
    from cluster.analysis.results import Results

    root, name = str(echo_experiment["result"].dataset_root), echo_experiment["spec"].name
    assert served_devices(Results.open(root, name)) == {"cpu"}
    recorder = Console(record=True, width=200)
    monkeypatch.setattr(results_cmd, "console", recorder)
    results_cmd.print_compare(Results.open(root, name), None, "table")
    assert "served on CPU (CPU numbers, not GPU numbers)" in " ".join(recorder.export_text().split())


def test_baseline_serves_greedy_tokens(echo_experiment: dict[str, Any]) -> None:
    base = echo_experiment["baseline"]
    assert len(base["outputs"]) == len(PROMPTS)
    for out in base["outputs"]:
        assert out["meta_info"]["completion_tokens"] == ORACLE_MAX_NEW_TOKENS
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert "spec_verify_ct" not in out["meta_info"]
    info = base["server_info"]
    assert info["speculative_algorithm"] is None and info["attention_backend"] == "intel_amx"


def test_live_baseline_keeps_the_recorded_shapes(echo_experiment: dict[str, Any]) -> None:
    """The committed contract fixture (recorded on the mix model) has the shapes the driver's baseline answers in."""
    from record_transcripts import assert_keeps_recorded_shapes

    assert_keeps_recorded_shapes("baseline", echo_experiment["baseline"]["transcript"])


def test_openai_parser_fast_path_agrees_with_json_on_real_streams(echo_experiment: dict[str, Any]) -> None:
    """What SGLang 0.5.23 streams on /v1/completions and /v1/chat/completions, with usage off, final only and in
    every chunk: the parser's key-search path and its full JSON decode (keep_text) give the same counts and meta;
    only token-less chunks, the finishing one and the usage-only one are decoded in full (the completions chunks'
    `"usage":null` included: the fast path reads them), and with usage the total is the budget."""
    from cluster.engines.streams import OpenAIStreamParser

    streams = echo_experiment["baseline"]["openai_streams"]
    assert any(b'"usage":null' in p for p in streams["/v1/completions usage none"])
    for name, payloads in streams.items():
        fast, full = OpenAIStreamParser(), OpenAIStreamParser(keep_text=True)
        decoded: list[bytes] = []
        feed_full = fast._feed_full
        fast._feed_full = lambda p: (decoded.append(p), feed_full(p))[1]  # type: ignore[method-assign]
        counts = [fast.feed(p) for p in payloads]
        assert counts == [full.feed(p) for p in payloads], name
        assert fast.meta() == full.meta() and fast.meta().error is None, name
        assert fast.meta().finish_reason == "length", name
        if not name.endswith("none"):
            assert fast.meta().completion_tokens == OPENAI_TOKENS, name
        # a decoded chunk is one the fast path may not read: no token, or the finish / the usage-only chunk
        assert all(k == 0 or b'"finish_reason":null' not in p for p, k in zip(payloads, counts) if p in decoded), name
        assert len(decoded) <= 3, (name, decoded)


def test_real_server_profile_is_summarised(echo_experiment: dict[str, Any]) -> None:
    """sglbench's /start_profile body is accepted, the profiler stops by itself after num_steps, /stop_profile is then
    a bare 500, and the torch profiler's chrome trace is summarised (CPU ops: no device kernels on a CPU)."""
    from cluster.analysis.kernel_profile import summarize_traces
    from cluster.telemetry.profile import archive_dir

    base = echo_experiment["baseline"]
    prof = base["profile"]
    assert [f.name for f in prof["files"]] == ["sglbench-real-TP-0.trace.json.gz"], base["log_path"]
    # num_steps stopped the profiler by itself: SGLang raises RuntimeError("Profiling is not in progress ...") in the
    # handler, which FastAPI answers as a bare 500 (the sim and the actor rely on this)
    assert prof["stop"] == (500, "Internal Server Error"), prof["stop"]
    s = summarize_traces(prof["files"])
    print(f"[sglang_cpu] profile: level {s.level}, {len(s.top)} top ops, first {s.top[0].kernel} "
          f"({s.top[0].share:.0%}), by category {({k: round(v) for k, v in s.by_category_us.items()})}")
    assert s.level in ("cpu_op", "kernel") and not s.simulated and s.top and s.total_us > 0
    data, sha, size, note = archive_dir(prof["out"], 64 << 20)
    assert data is not None and sha and note is None


def test_nextn_matches_the_baseline_and_accepts_every_draft(echo_experiment: dict[str, Any]) -> None:
    """NEXTN-3 gives the baseline's greedy outputs, token for token, with every draft accepted: the echo model's MTP
    layer predicts the next token exactly (both on the stand-in intel_amx attention)."""
    outs, baseline = echo_experiment["live"]["outputs"], echo_experiment["baseline"]["outputs"]
    assert [o["text"] for o in outs] == [o["text"] for o in baseline], "NEXTN changed greedy outputs"
    acc, k = accept_length(outs), max(STEPS)
    ideal = ideal_accept_length(k, ORACLE_MAX_NEW_TOKENS)
    print(f"[sglang_cpu] NEXTN-{k} echo accept length {acc:.3f} (ideal {ideal:.3f}), greedy outputs as the baseline's")
    assert 0.97 * ideal <= acc <= k + 1 + 1e-9, f"echo drafts should all be accepted, got {acc:.3f}"
    for out in outs:
        assert len(out["meta_info"]["spec_correct_drafts_histogram"]) == k + 1


def test_negative_budget_is_a_400_on_real_nextn(echo_experiment: dict[str, Any]) -> None:
    status, err = echo_experiment["live"]["bad_max_new_tokens"]
    assert status == 400 and "max_new_tokens" in err, (status, err[:300])


def test_live_nextn_server_keeps_the_recorded_shapes(echo_experiment: dict[str, Any]) -> None:
    """The committed NEXTN-3 contract fixture (recorded on a directly started server) has the shapes the driver's
    NEXTN-3 server answers in."""
    from record_transcripts import assert_keeps_recorded_shapes

    assert_keeps_recorded_shapes(f"nextn{max(STEPS)}", echo_experiment["live"]["transcript"])


def test_sessions_on_real_nextn_append_the_answer_ids_and_hit_the_radix_cache(echo_experiment: dict[str, Any]) -> None:
    """SGLang's /generate stream gives each turn's output_ids, so a later turn sends the history with the answer;
    its radix cache then serves that history (recorded in the closing note: what 0.5.23 reported on the CPU)."""
    t = echo_experiment["live"]["sessions"]
    assert all(e is None for e in t["error"]), t["error"]
    assert t["turn"] == [1, 2, 3] * 2
    # the server's own count: 16; 16 + 8 + 16 = 40; 40 + 8 + 16 = 64
    assert t["prompt_tokens"] == [16, 40, 64] * 2
    # the radix cache serves the turn before's prompt and answer but that answer's last token, whose KV was never
    # computed: 16 + 8 - 1 = 23, then 40 + 8 - 1 = 47 (what 0.5.23 served on the CPU, baseline and NEXTN alike)
    assert t["cached_tokens"] == [0, 23, 47] * 2
