"""Two real SGLang 0.5.23 CPU replicas (tp 1 each) behind the real gateway (smg 1.13.0 beside the tier's
interpreter) against one server on the same workload, through the driver `sglbench run` drives, on local Ray: the
per-replica split recorded, then replica-1 SIGKILLed by its own pid in the next window fails that run naming it,
and every process group of both variants (the gateway's too) is gone after. One experiment, three server starts:
`one` (r0, r1, r2 ok) and `two` (r0 ok and compared; r1 killed mid-window; r2 failed as an earlier death).
CPU numbers with stand-in kernels, never GPU numbers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cpu_faults import FLUSH_LINE, MidWindow, kill_main
from cpu_pipeline import assert_group_gone, assert_none_marked, facts, load, run, spec_text, table
from tests.conftest import tier_required

pytestmark = pytest.mark.ray

NAME = "cpu-deploy"
CONCURRENCY, REQUESTS, OUTPUT_TOKENS = 8, 16, 32
"""Two waves of 8 over two replicas (4 each at a time): the kill at replica-1's first prefill of the window lands
with most of its requests still to come."""
HEALTH_TIMEOUT_S = 900
"""Two real servers start side by side on 2 cores: 15-22 s each on a quiet machine, minutes under load."""
VARIANTS = """  - {name: one}
  - name: two
    deployment: {kind: replicas, replicas: 2, policy: round_robin}"""


@pytest.fixture(scope="module")
def deployment_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from cluster.engines.gateway import gateway_program

    tmp = tmp_path_factory.mktemp("deploy")
    spec = load(spec_text(NAME, mimo_models / "echo", sglang_cpu_python, tmp / "out", VARIANTS,
                          concurrency=f"[{CONCURRENCY}]", num_requests=REQUESTS, output_tokens=OUTPUT_TOKENS,
                          gate="{enabled: true, check_answers: false, max_new_tokens: 8}",
                          health_timeout_s=HEALTH_TIMEOUT_S, repeats=3))
    # no engines.sglang.gateway declared: the smg beside the tier's interpreter is the one launched
    launcher = spec.engines["sglang"]
    assert launcher.gateway is None
    smg = Path(gateway_program(launcher, launcher.gateway))
    assert smg.parent == sglang_cpu_python.parent
    if not smg.exists():
        why = f"SGLang's gateway (smg) not installed at {smg} (scripts/setup_sglang_venv.sh installs it)"
        if tier_required("sglang"):
            pytest.fail(why + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(why)
    watcher = MidWindow("two", kill_main, process="replica-1")

    def on_run(drv: Any, p: Any, status: str) -> None:
        if p.variant.name == "two" and p.repeat == 0:  # armed before r1: fires at replica-1's first prefill of it
            watcher.arm(drv)

    t0 = time.monotonic()
    result = run(spec, tmp, on_run)
    wall_s = time.monotonic() - t0
    watcher.join()
    print(f"[sglang_cpu] deployment experiment: {wall_s:.1f} s")
    return {"spec": spec, "result": result, "runs": table(result, spec, "runs").sort_values("order_index"),
            "requests": table(result, spec, "requests"), "watcher": watcher, "smg": smg}


def _rows(runs: pd.DataFrame, variant: str) -> list[pd.Series]:
    return [r for _, r in runs[runs["variant"] == variant].sort_values("order_index").iterrows()]


def test_two_replicas_behind_the_real_gateway_against_one(deployment_experiment: dict[str, Any]) -> None:
    runs, result = deployment_experiment["runs"], deployment_experiment["result"]
    one, two = _rows(runs, "one"), _rows(runs, "two")
    assert [r["status"] for r in one] == ["ok"] * 3, [(r["status"], r["invalid_reasons"], r["failure_reason"])
                                                    for r in one]
    assert two[0]["status"] == "ok", (two[0]["invalid_reasons"], two[0]["failure_reason"], two[0]["log_tail"])
    split = json.loads(two[0]["worker_requests_json"])
    f = facts(result, "two")
    urls = {p.name: p.facts.base_url.rstrip("/") for p in f.processes}
    named = {n: split.get(u) for n, u in urls.items() if n != "gateway"}
    tok_s = {"one": float(one[0]["m_output_tok_s"]), "two": float(two[0]["m_output_tok_s"])}
    figures = (f"split {named} ({split}); output tok/s (r0, c{CONCURRENCY}, {REQUESTS} x {OUTPUT_TOKENS} tokens): "
               f"one {tok_s['one']:.1f}, two {tok_s['two']:.1f} ({tok_s['two'] / 2:.1f} per replica); one r1/r2 "
               f"{float(one[1]['m_output_tok_s']):.1f}/{float(one[2]['m_output_tok_s']):.1f}")
    print(f"[sglang_cpu] {figures}")
    assert set(split) == {urls["replica-0"], urls["replica-1"]}, (figures, urls)
    assert list(split.values()) == [REQUESTS // 2] * 2, figures  # round robin
    assert two[0]["m_worker_imbalance"] == pytest.approx(1.0), figures
    assert pd.isna(one[0]["worker_requests_json"])
    assert all(v > 0 for v in tok_s.values()), figures
    reqs = deployment_experiment["requests"]
    served = reqs[reqs["run_key"] == two[0]["run_key"]]
    assert set(served["worker"]) == set(split) and (served["error"].isna() | (served["error"] == "")).all()
    prov = json.loads(two[0]["provenance_json"])
    assert [p["name"] for p in prov["processes"]] == ["replica-0", "replica-1", "gateway"]
    gateway = next(p for p in f.processes if p.name == "gateway")
    assert gateway.facts.argv[0] == str(deployment_experiment["smg"]), gateway.facts.argv
    assert "--disable-retries" in gateway.facts.argv
    replicas = [p.facts for p in f.processes if p.name != "gateway"]
    for r in replicas:  # each replica is a real SGLang server on the CPU, in its own process group
        si = r.infos["server_info"]
        assert si["version"] == "0.5.23" and si["device"] == "cpu" and si["tp_size"] == 1, r.log_path
    assert len({r.pgid for r in replicas} | {gateway.facts.pgid}) == 3
    # each on its own bundle of the deployment's placement group: disjoint (logical) GPUs
    assert len({r.cuda_visible_devices for r in replicas}) == 2, [r.cuda_visible_devices for r in replicas]
    assert f.base_url.rstrip("/") == gateway.facts.base_url.rstrip("/")
    for p in f.processes:  # each replica's own cache flushed before both of its windows (r0, and r1 before the kill)
        if p.name != "gateway":
            assert Path(p.facts.log_path).read_text(errors="replace").count(FLUSH_LINE) >= 2, p.name
    sm = table(result, deployment_experiment["spec"], "server_metrics")
    labels = set(sm[(sm["run_key"] == two[0]["run_key"]) & (sm["metric"] == "sglang:num_running_reqs")]["labels"])
    assert {"replica-0", "replica-1"} <= {part.split("=", 1)[1] for lab in labels for part in lab.split(",")
                                          if part.startswith("process=")}, labels


def test_replica_killed_mid_window_fails_the_runs_naming_it(deployment_experiment: dict[str, Any]) -> None:
    w = deployment_experiment["watcher"]
    assert w.done.get("what", "").startswith("SIGKILL main pid"), w.done
    two = _rows(deployment_experiment["runs"], "two")
    assert [r["status"] for r in two] == ["ok", "failed", "failed"], \
        [(r["status"], r["failure_reason"]) for r in two]
    text = f"{two[1]['failure_reason']}\n{two[1]['log_tail']}"
    assert "server died during the measured window" in two[1]["failure_reason"], two[1]["failure_reason"]
    assert "[two replica-1] died" in text, text[-3000:]
    assert "[two replica-0] died" not in text, text[-3000:]
    assert "server died during an earlier run" in two[2]["failure_reason"], two[2]["failure_reason"]
    # the gateway runs with --disable-retries: what was routed to replica-1 failed (500 naming its URL, or its
    # stream cut), nothing routed to replica-0 did
    urls = {p.name: p.facts.base_url.rstrip("/") for p in facts(deployment_experiment["result"], "two").processes}
    reqs = deployment_experiment["requests"]
    window = reqs[reqs["run_key"] == two[1]["run_key"]]
    failed = window[window["error"].fillna("") != ""]
    print(f"[sglang_cpu] killed window: {len(failed)} of {len(window)} requests failed")
    assert len(failed) > 0
    for _, r in failed.iterrows():
        assert r["worker"] == urls["replica-1"] or urls["replica-1"] in r["error"], (r["worker"], r["error"])
    assert (window[window["worker"] == urls["replica-0"]]["error"].fillna("") == "").all()


def test_nothing_left_running(deployment_experiment: dict[str, Any]) -> None:
    result = deployment_experiment["result"]
    for variant in ("one", "two"):
        for p in facts(result, variant).process_facts():  # every server's group and the gateway's
            assert_group_gone(p.facts.pgid, f"{variant} {p.name}")
    assert_none_marked(NAME)
