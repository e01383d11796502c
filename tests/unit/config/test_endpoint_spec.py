"""A variant that is an endpoint already running (`deployment: {kind: endpoint}`): strict model, refusals at their
line and field, its expansion (no argv, no GPU), run keys of launched variants unchanged, `plan` printing its URL
and never its key, the engines' restart mark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.fields import SpecError
from cluster.config.loader import parse_spec_text
from cluster.engines.registry import get_engine
from cluster.plan.runs import expand_variants, make_plan
from cluster.plan.schedule import reservation

BASE = """version: 1
name: ep
model: {path: "sim://tiny", engine: sim, tp: 2}
server: {args: {max-running-requests: 8}, env: {PLAIN: "1"}}
variants:
  - name: launched
  - name: prod
    deployment: {kind: endpoint, url: "http://10.0.0.5:30000/", api_key_env: EP_KEY}
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 4}]
load: {concurrency: [1]}
"""


def test_an_endpoint_variant_launches_nothing_and_reserves_no_gpu() -> None:
    spec = parse_spec_text(BASE, "ep.yaml")
    launched, prod = expand_variants(spec)
    assert launched.launched and launched.endpoint is None and launched.args == {"max-running-requests": 8}
    assert not prod.launched and prod.endpoint is not None
    assert prod.endpoint.url == "http://10.0.0.5:30000" and prod.endpoint.flush_cache is False  # never by default
    assert prod.args == {} and prod.env == {}  # server-wide flags are for servers sglbench launches
    assert reservation(prod.name, 0, "node", 8).gpus == 0
    assert reservation(launched.name, launched.tp, "node", 8).gpus == 8


def test_run_keys_of_launched_variants_are_unchanged_and_an_endpoint_keys_by_its_url() -> None:
    spec = parse_spec_text(BASE, "ep.yaml")
    launched, prod = expand_variants(spec)
    assert "endpoint" not in launched.identity()  # every existing dataset keeps its run keys
    ident = prod.identity()["endpoint"]
    assert ident == {"kind": "endpoint", "url": "http://10.0.0.5:30000", "api_key_env": "EP_KEY",
                     "flush_cache": False}
    other = parse_spec_text(BASE.replace("10.0.0.5", "10.0.0.6"), "ep.yaml")
    keys = {p.variant.name: p.run_key for p in make_plan(spec)}
    keys2 = {p.variant.name: p.run_key for p in make_plan(other)}
    assert keys["launched"] == keys2["launched"] and keys["prod"] != keys2["prod"]


@pytest.mark.parametrize("deployment, field, says", [
    ('{kind: endpoint, url: "ftp://h:1"}', "variants.1.deployment.url", "not an http:// or https:// URL"),
    ('{kind: endpoint, url: "http://u:pw@h:1"}', "variants.1.deployment.url", "api_key_env"),
    ('{kind: endpoint, url: "http://h:1/?k=v"}', "variants.1.deployment.url", "query"),
    ('{kind: endpoint, url: "http://h:99999"}', "variants.1.deployment.url", "port"),
    ('{kind: endpoint, url: "http://h:1", api_key_env: "1BAD"}', "variants.1.deployment.api_key_env", "name"),
    ('{kind: endpoint, url: "http://h:1", api_key: "x"}', "variants.1.deployment.api_key", ""),
    ('{kind: cluster, url: "http://h:1"}', "variants.1.deployment", "unknown deployment kind"),
])
def test_a_bad_endpoint_is_refused_at_its_field(deployment: str, field: str, says: str) -> None:
    bad = BASE.replace('{kind: endpoint, url: "http://10.0.0.5:30000/", api_key_env: EP_KEY}', deployment)
    with pytest.raises(SpecError) as ei:
        parse_spec_text(bad, "ep.yaml")
    assert ei.value.field == field and says in str(ei.value), str(ei.value)


@pytest.mark.parametrize("extra, field", [
    ("tp: 4", "tp"), ("args: {mem-fraction-static: 0.8}", "args"), ("env: {A: b}", "env"),
    ("speculative: {algorithm: NEXTN, num_steps: 1}", "speculative"), ("tuning: {kind: flashinfer_autotune}", "tuning"),
    ("sim: {time_scale: 0.5}", "sim"), ("profile: {steps: 4}", "profile"),
])
def test_what_configures_a_launched_server_is_refused_on_an_endpoint(extra: str, field: str) -> None:
    bad = BASE.replace("api_key_env: EP_KEY}\n", f"api_key_env: EP_KEY}}\n    {extra}\n")
    with pytest.raises(SpecError) as ei:
        parse_spec_text(bad, "ep.yaml")
    assert ei.value.field == f"variants.1.{field}", str(ei.value)
    assert "already running" in str(ei.value) and "would be ignored" in str(ei.value)


def test_plan_prints_the_endpoint_and_its_url_never_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.cli import app

    monkeypatch.setenv("EP_KEY", "planted-plan-key-77d1")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ep.yaml"
    path.write_text(BASE)
    res = CliRunner().invoke(app, ["plan", str(path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("# prod"))
    assert "is an endpoint already running at http://10.0.0.5:30000: no argv" in line, line
    assert "$EP_KEY" in line and "planted-plan-key-77d1" not in res.output
    assert "cluster.sim.server" in res.output  # the launched variant's command is still printed


def test_the_restart_mark_is_sglangs_startup_time() -> None:
    infos = {"server_info": {"startup_time": {"load_weight": 1.5, "scheduler_e2e": 3.25}}}
    assert get_engine("sglang").start_mark(infos) == json.dumps(infos["server_info"]["startup_time"], sort_keys=True)
    assert get_engine("sim").start_mark({"server_info": {"startup_time": 0.731}}) == "0.731"
    assert get_engine("sglang").start_mark({"server_info": {"error": "ConnectionRefused"}}) is None
    assert get_engine("vllm").start_mark({"models": {"data": []}}) is None  # vLLM has none: no restart judged
