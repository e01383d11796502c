"""`sglbench doctor` with deployments: the GPUs a node needs (a packed deployment's total, a rank's share), SGLang's
gateway beside the engine's interpreter (a fake `smg` that prints its version, and none), the prefill/decode
transfer backend's module imported by that interpreter, and the nodes a server across nodes needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text
from cluster.node.checks import NodeNeeds, NodesNeed, check_gateway, check_gpus, check_nodes, check_transfer
from cluster.node.collect import gateway_fact, module_facts
from cluster.node.facts import GatewayFact, GpuFact, ModuleFact, NodeFacts
from cluster.node.needs import needs_for, query_for

REPO = Path(__file__).resolve().parents[3]

SPEC = """version: 1
name: dep
model: {{path: /models/q, engine: sglang, tp: 1}}
engines: {{sglang: {{python: {python}}}}}
cluster: {{gpus_per_node: 8, nodes: 2}}
variants:
  - {{name: tp4, tp: 4}}
  - name: 2xtp4
    tp: 4
    deployment: {{kind: replicas, replicas: 2}}
  - name: 4p4d
    deployment:
      kind: pd
      prefill: {{servers: 1, tp: 4}}
      decode: {{servers: 1, tp: 4}}
      transfer_backend: mooncake
  - name: tp16-2n
    tp: 16
    deployment: {{kind: nodes, nodes: 2}}
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2, prompts: {{source: random_ids}}}}]
load: {{concurrency: [1]}}
"""


def _spec(variants: str = "", python: str = "/opt/sglang/bin/python") -> str:
    text = SPEC.format(python=python)
    if variants:
        head, _, tail = text.partition("variants:\n")
        text = head + "variants:\n" + variants + tail[tail.index("workloads:"):]
    return text


def test_a_nodes_gpus_come_from_its_largest_deployment_and_each_need_is_named() -> None:
    needs = needs_for(parse_spec_text(_spec(), "dep.yaml"))
    # 2xtp4 and 4p4d pack 8 on one node; tp16-2n needs 8 per node; tp4 only 4
    assert needs.gpus == 8 and needs.gpus_for.startswith("2xtp4 (2 replica(s) of tp 4")
    assert needs.gateway and needs.gateway_variants == ("2xtp4", "4p4d")
    assert needs.transfer_backends == ("mooncake",)
    assert needs.nodes == (NodesNeed(variant="tp16-2n", nodes=2, gpus_per_node=8),)
    query = query_for(parse_spec_text(_spec(), "dep.yaml"), None, Path("/tmp"))
    assert query.gateway == "/opt/sglang/bin/smg" and query.modules == ("mooncake.engine",)
    # four replicas of tp 4 do not fit one node of 8: Ray spreads them, a node needs one replica's 4
    spread = needs_for(parse_spec_text(_spec("  - {name: r4, tp: 4, deployment: {kind: replicas, replicas: 4}}\n"),
                                       "dep.yaml"))
    assert spread.gpus == 4 and spread.transfer_backends == () and spread.nodes == ()
    one = needs_for(parse_spec_text(_spec("  - {name: tp2, tp: 2}\n"), "dep.yaml"))
    assert (one.gpus, one.gateway, one.gpus_for) == (2, False, "tp2 (one server of tp 2)")
    four = NodeFacts(hostname="n", gpus=tuple(GpuFact(index=i) for i in range(4)))
    line = check_gpus(four, needs).line()
    assert line.startswith("fail") and "2xtp4 (2 replica(s) of tp 4 behind the gateway" in line and "8 on one node" \
        in line


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_gateway_beside_the_engines_interpreter_is_run_for_its_version(tmp_path: Path) -> None:
    smg = _script(tmp_path / "venv" / "bin" / "smg", "#!/bin/sh\necho 'smg 1.13.0'\n")
    got = gateway_fact(str(smg))
    assert got.runs and got.version == "1.13.0"
    needs = NodeNeeds(from_spec=True, gateway=True, gateway_variants=("2xtp4",))
    ok = check_gateway(NodeFacts(hostname="n", gateway=got), needs)
    assert ok.level == "ok" and ok.message == f"smg 1.13.0 at {smg} for 2xtp4"
    missing = gateway_fact(str(tmp_path / "bare" / "bin" / "smg"))
    assert not missing.runs and missing.reason == "not installed (no such file)"
    fail = check_gateway(NodeFacts(hostname="n", gateway=missing), needs)
    assert fail.level == "fail" and "(2xtp4)" in fail.message and "pip install --no-deps smg==1.13.0" in fail.fix
    assert check_gateway(NodeFacts(hostname="n", gateway=missing), NodeNeeds(from_spec=True)).level == "info"
    old = _script(tmp_path / "old" / "smg", "#!/bin/sh\necho 'smg 1.9.0'\n")
    assert check_gateway(NodeFacts(hostname="n", gateway=gateway_fact(str(old))), needs).level == "warning"
    mute = _script(tmp_path / "mute" / "smg", "#!/bin/sh\necho 'usage: smg' >&2\nexit 2\n")
    said = gateway_fact(str(mute))
    assert not said.runs and said.reason == "`--version` did not print its version: usage: smg"


def test_the_transfer_backends_module_is_imported_by_the_engines_interpreter(tmp_path: Path) -> None:
    (tmp_path / "site" / "mooncake").mkdir(parents=True)
    (tmp_path / "site" / "mooncake" / "__init__.py").write_text("")
    (tmp_path / "site" / "mooncake" / "engine.py").write_text("class TransferEngine: pass\n")
    python = _script(tmp_path / "venv" / "bin" / "python",
                     f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    (good,) = module_facts(str(python), ("mooncake.engine",))
    assert good == ModuleFact(name="mooncake.engine", importable=True)
    (bad,) = module_facts(sys.executable, ("mooncake.engine",))
    assert not bad.importable and bad.reason == "ModuleNotFoundError: No module named 'mooncake'"
    (tmp_path / "site" / "mooncake" / "engine.py").write_text("raise ImportError('libibverbs.so.1: cannot open')\n")
    (broken,) = module_facts(str(python), ("mooncake.engine",))
    assert broken.reason == "ImportError: libibverbs.so.1: cannot open"
    needs = NodeNeeds(from_spec=True, transfer_backends=("mooncake",))
    (line,) = check_transfer(NodeFacts(hostname="n", modules=(broken,)), needs)
    assert line.level == "fail" and "mooncake: `import mooncake.engine` fails" in line.message
    assert "mooncake-transfer-engine" in line.fix
    (line,) = check_transfer(NodeFacts(hostname="n", modules=(good,)), needs)
    assert line.level == "ok"
    assert check_transfer(NodeFacts(hostname="n"), NodeNeeds(from_spec=True)) == []


def test_a_server_across_nodes_is_compared_with_the_live_cluster_or_noted() -> None:
    needs = NodeNeeds(from_spec=True, nodes=(NodesNeed(variant="tp16-2n", nodes=2, gpus_per_node=8),))
    (note,) = check_nodes(NodeFacts(hostname="n"), needs)
    assert note.level == "info" and "must have 2 GPU nodes with at least 8 GPUs each" in note.message
    assert "--address" in note.message
    (ok,) = check_nodes(NodeFacts(hostname="n", cluster_gpus=(8, 8)), needs)
    assert ok.level == "ok" and "the cluster has 2 such node(s)" in ok.message
    (short,) = check_nodes(NodeFacts(hostname="n", cluster_gpus=(8, 4)), needs)
    assert short.level == "fail" and "has 1 such node(s) (GPUs per node: 8, 4)" in short.message
    assert check_nodes(NodeFacts(hostname="n", cluster_gpus=(8,)), NodeNeeds()) == []


def _line(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if ln.split()[1:2] == [name])


@pytest.mark.parametrize("with_smg", [True, False])
def test_doctor_reports_the_gateway_and_the_transfer_module_end_to_end(tmp_path: Path, with_smg: bool) -> None:
    python = _script(tmp_path / "venv" / "bin" / "python", f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    if with_smg:
        _script(tmp_path / "venv" / "bin" / "smg", "#!/bin/sh\necho 'smg 1.13.0'\n")
    spec = tmp_path / "dep.yaml"
    spec.write_text(_spec(python=str(python)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SGLBENCH_SGLANG_VENV", None)
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "doctor", str(spec)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    gateway = _line(done.stdout, "gateway")
    if with_smg:
        assert gateway == f"ok      gateway     smg 1.13.0 at {tmp_path}/venv/bin/smg for 2xtp4, 4p4d", done.stdout
    else:
        assert gateway.startswith(f"fail    gateway     {tmp_path}/venv/bin/smg: not installed"), done.stdout
        assert "-> <engine venv>/bin/python -m pip install --no-deps smg==1.13.0" in gateway
    assert _line(done.stdout, "transfer").startswith("fail    transfer    mooncake: `import mooncake.engine` fails")
    assert "must have 2 GPU nodes with at least 8 GPUs each" in _line(done.stdout, "nodes")
    assert done.returncode == 3
