"""Fuzz the `sglbench doctor` boundaries: whatever facts a node sends back (through JSON, from a remote Ray task) and
whatever an engine interpreter prints, the checks never raise, each check is exactly one line, and the exit code
follows the worst level."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster.node.checks import NodeNeeds, NodesNeed, exit_code, run_checks
from cluster.node.collect import interpreter_answer
from cluster.node.facts import CheckpointFact, DiskFact, GatewayFact, GpuFact, InterpreterFact, ModuleFact, NodeFacts
from tests.fuzz.fuzzing import FUZZ

TEXT = st.text(max_size=40)
OPT_TEXT = st.none() | TEXT
OPT_INT = st.none() | st.integers(-1, 2**40)
GPU = st.builds(GpuFact, index=st.integers(0, 16), bus_id=OPT_TEXT, compute_cap=st.none() | st.sampled_from(
    ["12.0", "9.0", "10.0", "8.6", "x"]), width_current=st.none() | st.integers(0, 32),
    width_max=st.none() | st.integers(0, 32))
FACTS = st.builds(
    NodeFacts, hostname=TEXT, gpus=st.none() | st.lists(GPU, max_size=9).map(tuple), gpus_reason=OPT_TEXT,
    cuda_visible_devices=OPT_TEXT, nvml_ok=st.none() | st.booleans(), nvml_reason=OPT_TEXT, topology_text=OPT_TEXT,
    topology_reason=OPT_TEXT,
    interpreter=st.none() | st.builds(InterpreterFact, path=TEXT, runs=st.booleans(), reason=OPT_TEXT,
                                      sglang_version=OPT_TEXT, flashinfer_version=OPT_TEXT, torch_version=OPT_TEXT),
    gateway=st.none() | st.builds(GatewayFact, path=TEXT, runs=st.booleans(), version=OPT_TEXT, reason=OPT_TEXT),
    modules=st.lists(st.builds(ModuleFact, name=st.sampled_from(["mooncake.engine", "nixl._api", "x"]),
                               importable=st.booleans(), reason=OPT_TEXT), max_size=3).map(tuple),
    cluster_gpus=st.none() | st.lists(st.integers(0, 16), max_size=4).map(tuple),
    checkpoint=st.none() | st.builds(CheckpointFact, path=TEXT, readable=st.booleans(), reason=OPT_TEXT,
                                     mtp_verdict=OPT_TEXT, mtp_weights_present=st.booleans(),
                                     tensors=st.integers(0, 10**6)),
    disks=st.lists(st.builds(DiskFact, path=TEXT, measured_at=OPT_TEXT, free_bytes=OPT_INT, writable=st.booleans(),
                             reason=OPT_TEXT), max_size=3).map(tuple),
    shm_bytes=OPT_INT, shm_reason=OPT_TEXT, nofile_soft=OPT_INT, nofile_hard=OPT_INT, cpus=OPT_INT,
    ray_node_id=OPT_TEXT, ray_node_cpus=st.none() | st.floats(0, 512), ray_available_cpus=st.none() | st.floats(0, 512),
    clocksource=OPT_TEXT, clocksource_available=st.lists(TEXT, max_size=4).map(tuple), clocksource_reason=OPT_TEXT)
NEEDS = st.builds(NodeNeeds, from_spec=st.booleans(), gpus=st.integers(0, 16), sglang=st.booleans(),
                  sglang_version=OPT_TEXT, target_version=st.none() | st.just("0.5.23"), speculative=st.booleans(),
                  concurrency_per_actor=st.integers(1, 100_000), load_actors=st.integers(1, 64),
                  load_actor_cpus=st.floats(0.1, 8), gpus_for=TEXT, gateway=st.booleans(),
                  gateway_variants=st.lists(TEXT, max_size=2).map(tuple),
                  transfer_backends=st.lists(st.sampled_from(["mooncake", "nixl", "mori"]), max_size=3,
                                             unique=True).map(tuple),
                  nodes=st.lists(st.builds(NodesNeed, variant=TEXT, nodes=st.integers(2, 8),
                                           gpus_per_node=st.integers(1, 16)), max_size=2).map(tuple))


@FUZZ
@given(FACTS, NEEDS)
def test_any_facts_give_one_line_per_check(facts: NodeFacts, needs: NodeNeeds) -> None:
    sent = NodeFacts.model_validate_json(facts.model_dump_json())  # what the pinned task's answer becomes
    assert sent == facts
    results = run_checks(sent, needs)
    assert len(results) == 11 + len(facts.disks) + len(needs.transfer_backends) + len(needs.nodes)
    for r in results:
        assert r.line().isprintable(), r.line()
    worst = {"fail": 3, "warning": 1}
    assert exit_code(results) == max((worst.get(r.level, 0) for r in results), default=0)


@FUZZ
@given(st.integers(-255, 255), st.text(max_size=200) | st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 100_000)),
       st.text(max_size=200))
def test_any_interpreter_answer_is_a_fact(returncode: int, stdout: str, stderr: str) -> None:
    got = interpreter_answer("/opt/py", returncode, stdout, stderr)
    assert got.runs is (got.reason is None)
