"""One real SGLang 0.5.23 CPU server across two "nodes" (tp 2 as `--nnodes 2`, one rank per raylet of a joined
loopback cluster, gloo between them) through the driver `sglbench run` drives, preflight on: each rank's argv goes
through SGLang's own parser, r0 serves through rank 0 with the greedy output the echo model's oracle gives, rank 1
SIGKILLed by its own pid in r1's window fails that run naming it, and both ranks' process groups are gone after.
One experiment, one server start of two processes. CPU numbers with stand-in kernels, never GPU numbers."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pytest

from cpu_faults import MidWindow
from cpu_pipeline import assert_group_gone, assert_none_marked, facts, load, run, spec_text, table

pytestmark = pytest.mark.ray

NAME = "cpu-nodes"
CONCURRENCY, REQUESTS, OUTPUT_TOKENS = 4, 8, 32
HEALTH_TIMEOUT_S = 900
"""Two ranks start side by side on 2 cores and meet over gloo: 354 s to health under load (deployments-facts §3)."""
THREADS_BIND = "0-1"
"""SGLANG_CPU_OMP_THREADS_BIND, the same for both ranks: without it a one-NUMA machine fails `world_size <=
n_numa_node` (sglang/srt/utils/numa_utils.py:459-467); with it each rank takes the `|`-entry at its local device id
(distributed/bootstrap.py:84-87: get_device().gpu_id), which is 0 on both nodes, so one entry serves both."""
VARIANTS = f"""  - name: n2
    tp: 2
    deployment: {{kind: nodes, nodes: 2}}
    args: {{attention-backend: torch_native}}
    env: {{SGLANG_CPU_OMP_THREADS_BIND: "{THREADS_BIND}"}}"""
PROBE_IDS = [[11, 300, 42], [500, 7, 42], [900, 64, 255]]
"""Greedy prompts for rank 0 after r0 (both ranks up): the first two end in the same token."""
PROBE_TOKENS = 8


@pytest.fixture(scope="module")
def two_raylets() -> Iterator[None]:
    from cluster.distributed.driver import WORKER_NICENESS_ENV
    from tests.conftest import joined_loopback_cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault(WORKER_NICENESS_ENV, "0")  # as a cluster sglbench starts: servers not niced
    head = {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 100 * 1024**2}
    node = {"num_cpus": 4, "num_gpus": 1, "object_store_memory": 100 * 1024**2}
    with joined_loopback_cluster(head, [node, node]):
        yield


def _bf16(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file stored as bf16, read as float32 (numpy has no bf16)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name in names:
        h = header[name]
        assert h["dtype"] == "BF16", h
        a, b = h["data_offsets"]
        bits = np.frombuffer(raw, dtype=np.uint16, count=(b - a) // 2, offset=8 + n + a)
        out[name] = (bits.astype(np.uint32) << 16).view(np.float32).reshape(h["shape"])
    return out


BF16_TIE = 2.0**-6
"""Logits within this fraction of the best one are a tie a bf16 server may break either way (bf16 spacing is 2^-7
relative; one probe of this test met 33.39 vs 33.27)."""


def echo_choices(model: Path) -> Callable[[int], set[int]]:
    """The echo model's greedy next tokens after `token`: its attention and MLP outputs are zero, so the logits are
    lm_head · RMSNorm(embed[token]); the best token and any within a bf16 tie of it."""
    w = _bf16(model / "model.safetensors", ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"])
    eps = float(json.loads((model / "config.json").read_text())["rms_norm_eps"])

    def choices(token: int) -> set[int]:
        x = w["model.embed_tokens.weight"][token]
        logits = w["lm_head.weight"] @ (x / np.sqrt(np.mean(x * x) + eps) * w["model.norm.weight"])
        best = float(logits.max())
        return {int(i) for i in np.flatnonzero(logits >= best - abs(best) * BF16_TIE)}
    return choices


def _greedy(base_url: str, ids: list[int]) -> list[int]:
    import urllib.request

    body = json.dumps({"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": PROBE_TOKENS,
                                                             "ignore_eos": True}}).encode()
    req = urllib.request.Request(base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return [int(t) for t in json.loads(r.read())["output_ids"]]


def kill_rank1(drv: Any, f: Any, variant: str) -> str:
    """Fired at rank 0's first prefill of the window: SIGKILL rank 1's main pid, from the driver's recorded facts."""
    rank1 = next(p for p in drv.result.servers[variant].facts.processes if p.name == "rank-1").facts
    pid = rank1.server_pid or rank1.pid
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL rank-1 pid {pid}"


@pytest.fixture(scope="module")
def nodes_experiment(sglang_cpu_python: Path, mimo_models: Path, two_raylets: None,
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # the venv checked before Ray
    from cluster.engines.flagcheck import launch_argvs, probe_answer
    from cluster.plan.deployment import processes_of
    from cluster.plan.runs import expand_variants

    tmp = tmp_path_factory.mktemp("nodes")
    spec = load(spec_text(NAME, mimo_models / "echo", sglang_cpu_python, tmp / "out", VARIANTS,
                          concurrency=f"[{CONCURRENCY}]", num_requests=REQUESTS, output_tokens=OUTPUT_TOKENS,
                          gate="{enabled: true, check_answers: false, max_new_tokens: 8}",
                          health_timeout_s=HEALTH_TIMEOUT_S, repeats=2,
                          extra="isolation: gpus\ncluster: {gpus_per_node: 1, nodes: 2}"))
    # SGLang's own parser on each rank's argv as preflight builds it, and on a rank argv it must refuse
    ranks = processes_of(expand_variants(spec)[0])
    argvs = launch_argvs(spec, ranks, str(sglang_cpu_python))
    bad = list(argvs["n2.rank-1"])
    bad[bad.index("--node-rank") + 1] = "one"
    parsed = probe_answer(str(sglang_cpu_python), "sglang", {**argvs, "bad-rank": bad})
    watcher = MidWindow("n2", kill_rank1, process="rank-0")
    greedy: dict[str, Any] = {}

    def on_run(drv: Any, p: Any, status: str) -> None:
        if p.variant.name == "n2" and p.repeat == 0 and status == "ok":  # both ranks up before r1: probe, arm
            url = facts(drv.result, "n2").base_url.rstrip("/")
            greedy["got"] = [_greedy(url, ids) for ids in PROBE_IDS]
            watcher.arm(drv)

    warnings: list[str] = []
    t0 = time.monotonic()
    result = run(spec, tmp, on_run, warn=warnings.append)
    wall_s = time.monotonic() - t0
    watcher.join()
    print(f"[sglang_cpu] nodes experiment: {wall_s:.1f} s; preflight warnings: {warnings}")
    return {"spec": spec, "result": result, "runs": table(result, spec, "runs").sort_values("order_index"),
            "requests": table(result, spec, "requests"), "watcher": watcher, "greedy": greedy,
            "argvs": argvs, "parsed": parsed, "warnings": warnings, "model": mimo_models / "echo"}


def test_each_rank_argv_through_sglangs_parser(nodes_experiment: dict[str, Any]) -> None:
    from cluster.engines.flagcheck import ParserAnswer

    parsed, argvs = nodes_experiment["parsed"], nodes_experiment["argvs"]
    assert isinstance(parsed, ParserAnswer), parsed
    assert {"--nnodes", "--node-rank", "--dist-init-addr"} <= parsed.options
    for name in ("n2.rank-0", "n2.rank-1"):
        assert parsed.errors.get(name) is None, (name, parsed.errors.get(name))
        a = argvs[name]
        assert a[a.index("--nnodes") + 1] == "2" and a[a.index("--node-rank") + 1] == name[-1], a
    assert "node-rank" in (parsed.errors.get("bad-rank") or ""), parsed.errors
    # preflight ran the same parser on the node over the same argvs: none left unchecked
    assert not [w for w in nodes_experiment["warnings"] if "not checked" in w], nodes_experiment["warnings"]


def _rows(runs: pd.DataFrame) -> list[pd.Series]:
    return [r for _, r in runs[runs["variant"] == "n2"].sort_values("order_index").iterrows()]


def test_one_server_across_two_raylets_serves_through_rank0(nodes_experiment: dict[str, Any]) -> None:
    rows, result = _rows(nodes_experiment["runs"]), nodes_experiment["result"]
    r0 = rows[0]
    assert r0["status"] == "ok", (r0["invalid_reasons"], r0["failure_reason"], r0["log_tail"])
    f = facts(result, "n2")
    ranks = {p.name: p.facts for p in f.processes}
    assert list(ranks) == ["rank-0", "rank-1"]
    assert ranks["rank-0"].node_id != ranks["rank-1"].node_id, "each rank on its own raylet"
    a0, a1 = ranks["rank-0"].argv, ranks["rank-1"].argv
    init = a0[a0.index("--dist-init-addr") + 1]
    assert init == a1[a1.index("--dist-init-addr") + 1], (a0, a1)
    assert a0[a0.index("--port") + 1] != a1[a1.index("--port") + 1]
    assert f.base_url == ranks["rank-0"].base_url  # the load went to rank 0
    si = ranks["rank-0"].infos["server_info"]
    assert si["version"] == "0.5.23" and si["device"] == "cpu", si
    assert (si["tp_size"], si["nnodes"], si["node_rank"], si["dist_init_addr"]) == (2, 2, 0, init), si
    for name, r in ranks.items():  # one bind entry served both ranks (local device id 0 on each node)
        log = Path(r.log_path).read_text(errors="replace")
        assert f"local_omp_cpuid={THREADS_BIND}" in log, name
    reqs = nodes_experiment["requests"]
    served = reqs[reqs["run_key"] == r0["run_key"]]
    assert len(served) == REQUESTS and (served["error"].fillna("") == "").all(), served["error"].tolist()
    assert (served["completion_tokens"] == OUTPUT_TOKENS).all(), served["completion_tokens"].tolist()
    prov = json.loads(r0["provenance_json"])
    assert [p["name"] for p in prov["processes"]] == ["rank-0", "rank-1"] and prov["gpus"] == 2, prov
    # the greedy output through both ranks (vocab-parallel embedding and head gathered over gloo) is the oracle's:
    # every token the best after the one before it, or in a bf16 tie with the best
    choices = echo_choices(nodes_experiment["model"])
    got = nodes_experiment["greedy"].get("got")
    ties = 0
    assert got is not None and len(got) == len(PROBE_IDS), got
    for ids, out in zip(PROBE_IDS, got):
        assert len(out) == PROBE_TOKENS, out
        prev = ids[-1]
        for tok in out:
            c = choices(prev)
            assert tok in c, (ids, out, prev, tok, sorted(c))
            ties += len(c) > 1
            prev = tok
    assert got[0] == got[1]  # the same last token, the same continuation
    print(f"[sglang_cpu] greedy through rank 0: {got} (oracle ties met: {ties}); r0 output tok/s "
          f"{float(r0['m_output_tok_s']):.1f} (c{CONCURRENCY}, {REQUESTS} x {OUTPUT_TOKENS}); ranks healthy after "
          f"{ranks['rank-0'].startup_s:.0f} / {ranks['rank-1'].startup_s:.0f} s")


def test_rank1_killed_fails_the_run_naming_it_and_both_ranks_are_gone(nodes_experiment: dict[str, Any]) -> None:
    w = nodes_experiment["watcher"]
    assert w.done.get("what", "").startswith("SIGKILL rank-1 pid"), w.done
    rows = _rows(nodes_experiment["runs"])
    assert [r["status"] for r in rows] == ["ok", "failed"], [(r["status"], r["failure_reason"]) for r in rows]
    text = f"{rows[1]['failure_reason']}\n{rows[1]['log_tail']}"
    assert "[n2 rank-1] died" in text and "[n2 rank-0] died" not in text, text[-3000:]
    for p in facts(nodes_experiment["result"], "n2").process_facts():
        assert_group_gone(p.facts.pgid, f"n2 {p.name}")
    assert_none_marked(NAME)
