"""Deployments planned on the CPU (plan/deployment.py, kernel/deployment.py): the processes of each kind with their
GPUs and role flags, the placement group they ask for, refusals of what cannot be placed (the GPUs needed against
what the cluster has), strict fields, run keys of one-server variants unchanged, and `plan` printing every
process's command."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.fields import SpecError
from cluster.config.loader import parse_spec_text
from cluster.kernel.deployment import deployment_processes, placement_strategy
from cluster.plan.deployment import launched_processes, placement_problems, planned_processes, variant_reservation
from cluster.kernel.deployment import Assigned
from cluster.plan.runs import expand_variants, make_plan
from cluster.plan.schedule import unplaceable

SPEC = """version: 1
name: dep
model: {path: "sim://tiny", engine: sim, tp: 1}
cluster: {gpus_per_node: 8, nodes: 2}
server: {args: {max-running-requests: 8}}
variants:
  - {name: tp8, tp: 8}
  - name: r2
    tp: 4
    deployment: {kind: replicas, replicas: 2, policy: round_robin}
  - name: pd
    deployment:
      kind: pd
      prefill: {servers: 1, tp: 4, args: {chunked-prefill-size: 4096}}
      decode: {servers: 2, tp: 2, env: {DECODE_ONLY: "1"}}
  - name: n2
    tp: 16
    deployment: {kind: nodes, nodes: 2}
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 4}]
load: {concurrency: [1]}
"""


def _variants() -> dict[str, object]:
    return {v.name: v for v in expand_variants(parse_spec_text(SPEC, "dep.yaml"))}


def test_each_kind_is_its_processes_with_their_gpus_and_role_flags() -> None:
    vs = _variants()
    tp8, r2, pd, n2 = (vs[n] for n in ("tp8", "r2", "pd", "n2"))
    assert [(p.name, p.tp) for p in deployment_processes(tp8)] == [("server", 8)]  # type: ignore[arg-type]
    assert [(p.name, p.tp) for p in deployment_processes(r2)] == [("replica-0", 4), ("replica-1", 4)]  # type: ignore[arg-type]
    assert [(p.name, p.tp) for p in deployment_processes(pd)] == [  # type: ignore[arg-type]
        ("prefill-0", 4), ("decode-0", 2), ("decode-1", 2)]
    assert [(p.name, p.tp, p.node_rank) for p in deployment_processes(n2)] == [  # type: ignore[arg-type]
        ("rank-0", 8, 0), ("rank-1", 8, 1)]
    # GPUs: 4+4, 4+2+2, 16 over two nodes (8 each)
    assert [vs[n].gpus for n in ("tp8", "r2", "pd", "n2")] == [8, 8, 8, 16]  # type: ignore[attr-defined]
    got = dict(launched_processes(pd, {"prefill-0": Assigned(bootstrap_port=41000)}))  # type: ignore[arg-type]
    by_name = {p.name: v for p, v in got.items()}
    pre, dec = by_name["prefill-0"], by_name["decode-1"]
    assert pre.args["disaggregation-mode"] == "prefill" and pre.args["disaggregation-bootstrap-port"] == 41000
    assert pre.args["disaggregation-transfer-backend"] == "mooncake"
    assert pre.args["chunked-prefill-size"] == 4096 and pre.args["max-running-requests"] == 8  # pool over variant
    assert pre.tp == 4 and dec.tp == 2 and dec.env == {"DECODE_ONLY": "1"} and "chunked-prefill-size" not in dec.args
    assert "disaggregation-bootstrap-port" not in dec.args and dec.args["disaggregation-mode"] == "decode"
    ranks = [v for _, v in launched_processes(n2, {p.name: Assigned(dist_init_addr="10.0.0.1:5000")  # type: ignore[arg-type]
                                                   for p in deployment_processes(n2)})]  # type: ignore[arg-type]
    # each rank is launched with the whole server's --tp-size (SGLang splits it per node: tp // nnodes), while
    # its bundle holds its share (deployment_processes: 8 each)
    assert [(r.tp, r.args["nnodes"], r.args["node-rank"], r.args["dist-init-addr"]) for r in ranks] == [
        (16, 2, 0, "10.0.0.1:5000"), (16, 2, 1, "10.0.0.1:5000")]
    assert all(r.deployment is None and r.name.startswith("n2.rank-") for r in ranks)


def test_placement_packs_a_deployment_that_fits_and_spreads_ranks() -> None:
    vs = _variants()
    assert placement_strategy(vs["r2"], 8) == "STRICT_PACK"  # type: ignore[arg-type]
    assert placement_strategy(vs["n2"], 8) == "STRICT_SPREAD"  # type: ignore[arg-type]
    assert placement_strategy(vs["r2"], 4) == "PACK"  # type: ignore[arg-type]  # does not fit one node: spread only then
    r = variant_reservation(vs["pd"], "node", 8)  # type: ignore[arg-type]
    assert r.bundles == (4, 2, 2) and r.gpus == 8
    r = variant_reservation(vs["r2"], "node", 16)  # type: ignore[arg-type]
    assert r.bundles == (4, 4, 8) and r.gpus == 16  # isolation=node pads a packed deployment to the whole node
    assert variant_reservation(vs["r2"], "gpus", 16).bundles == (4, 4)  # type: ignore[arg-type]
    assert variant_reservation(vs["tp8"], "node", 8).bundles == ()  # type: ignore[arg-type]  # one server: as before


def test_what_cannot_be_placed_is_refused_with_the_gpus_needed_and_what_the_cluster_has() -> None:
    vs = list(_variants().values())
    assert placement_problems(vs, "gpus", 8, 2) == []  # type: ignore[arg-type]
    msgs = placement_problems(vs, "gpus", 8, 1)  # type: ignore[arg-type]
    assert len(msgs) == 1 and "'n2'" in msgs[0] and "needs 16 GPUs one process per node (8 + 8 per process)" in msgs[0]
    assert "the cluster has 8 GPUs on 1 node(s)" in msgs[0]
    # 2 replicas of tp 4 on 6-GPU nodes: PACK over two nodes fits, one node would not
    r2 = variant_reservation(_variants()["r2"], "gpus", 6)  # type: ignore[arg-type]
    assert unplaceable([r2], [6, 6]) == [] and "needs 8 GPUs over the nodes" in unplaceable([r2], [6])[0]


def test_plan_refuses_a_deployment_the_declared_cluster_cannot_hold(tmp_path: Path) -> None:
    from cluster.cli import app

    p = tmp_path / "dep.yaml"
    p.write_text(SPEC.replace("{gpus_per_node: 8, nodes: 2}", "{gpus_per_node: 8, nodes: 1}"))
    res = CliRunner().invoke(app, ["plan", str(p)])
    assert res.exit_code == 2, res.output
    assert "needs 16 GPUs" in res.output and "cluster" in res.output


def test_fields_are_strict_and_owned_flags_refused() -> None:
    bad = [
        (SPEC.replace("policy: round_robin}", "policy: round_robin, polcy: x}"), "polcy"),
        (SPEC.replace("policy: round_robin", "policy: fastest"), "policy"),
        (SPEC.replace("chunked-prefill-size: 4096", "disaggregation-mode: decode"), "disaggregation-mode"),
        (SPEC.replace("kind: pd\n", "kind: pd\n      transfer_backend: fake\n"), "fake"),
        (SPEC.replace("tp: 16\n", "tp: 15\n"), "multiple of deployment.nodes"),
        (SPEC.replace("  - name: pd\n", "  - name: pd\n    tp: 2\n"), "each pool gives its own tp"),
        (SPEC.replace("policy: round_robin}", "policy: round_robin, gateway_args: {worker-urls: x}}"), "worker-urls"),
        (SPEC.replace("engine: sim, tp: 1}", "engine: vllm, tp: 1}"), "cannot serve a deployment of kind replicas"),
    ]
    for text, word in bad:
        with pytest.raises(SpecError) as e:
            parse_spec_text(text, "dep.yaml")
        assert word in str(e.value), (word, str(e.value))


def test_one_server_run_keys_do_not_move_and_a_deployment_has_its_own() -> None:
    spec = parse_spec_text(SPEC, "dep.yaml")
    keys = {r.variant.name: r.run_key for r in make_plan(spec)}
    head, tail = SPEC.split("  - name: r2\n")[0], "workloads:" + SPEC.split("workloads:")[1]
    alone = parse_spec_text(head + tail, "dep.yaml")  # the one-server variant without the deployments beside it
    assert {r.variant.name: r.run_key for r in make_plan(alone)}["tp8"] == keys["tp8"]
    assert len(set(keys.values())) == 4
    other = parse_spec_text(SPEC.replace("policy: round_robin", "policy: cache_aware"), "dep.yaml")
    assert {r.variant.name: r.run_key for r in make_plan(other)}["r2"] != keys["r2"]  # the policy is measured


def test_plan_prints_every_process_command_one_per_line(tmp_path: Path) -> None:
    from cluster.cli import app

    p = tmp_path / "dep.yaml"
    p.write_text(SPEC)
    res = CliRunner().invoke(app, ["plan", str(p)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    cmds = [line for line in lines if "cluster.sim.server" in line]
    assert len(cmds) == 1 + 2 + 3 + 2  # tp8, two replicas, prefill + two decodes, two ranks
    for name in ("replica-0", "replica-1", "prefill-0", "decode-1", "rank-1"):
        head = next(i for i, line in enumerate(lines) if line.startswith("# ") and f" {name}:" in line)
        assert "GPU(s)" in lines[head] and "cluster.sim.server" in lines[head + 1]
    rank1 = shlex.split(next(line for line in cmds if "--node-rank 1" in line))
    assert rank1[rank1.index("--nnodes") + 1] == "2" and rank1[rank1.index("--tp-size") + 1] == "16"
    assert any("--disaggregation-bootstrap-port 8998" in line for line in cmds)
    assert all(pv.tp for v in expand_variants(parse_spec_text(SPEC, "d.yaml")) for _, pv in planned_processes(v))
