"""Code outside the adapters asks them what differs per engine (runs_on_cpu, Engine.simulated, registry.is_simulated):
no module outside cluster/engines/ and cluster/sim/ compares a value with the simulator's name "sim" or keys a
table by it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from cluster.engines.registry import get_engine, is_simulated, is_simulated_source
from cluster.kernel.runs import ResolvedVariant

REPO = Path(__file__).resolve().parents[3]
EXEMPT = ("cluster/engines/", "cluster/sim/")
SIM = "sim"


def _mentions_sim(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == SIM for n in ast.walk(node))


def _problems(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Compare) and any(_mentions_sim(c) for c in [node.left, *node.comparators]):
            out.append(f"line {node.lineno}: compares with {SIM!r}")
        elif isinstance(node, ast.Dict) and any(k is not None and _mentions_sim(k) for k in node.keys):
            out.append(f"line {node.lineno}: a table keyed by {SIM!r}")
    return out


def test_no_comparison_with_the_simulator_name_outside_the_adapters() -> None:
    found = [f"{p.relative_to(REPO).as_posix()}: {problem}" for p in sorted((REPO / "cluster").rglob("*.py"))
             if not p.relative_to(REPO).as_posix().startswith(EXEMPT) for problem in _problems(p)]
    assert found == []


def test_the_check_sees_each_form(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('if v.engine == "sim":\n    pass\n'
                     'x = "sim" in set(engines)\n'
                     'y = engines != ["sim"]\n'
                     'label = {"sim": "simulated"}\n'
                     'z = v.engine == "sglang" or is_simulated(v.engine)\n')
    assert _problems(probe) == ["line 1: compares with 'sim'", "line 3: compares with 'sim'",
                                "line 4: compares with 'sim'", "line 5: a table keyed by 'sim'"]


def test_the_predicates_name_the_simulator_only() -> None:
    assert is_simulated("sim") and not is_simulated("sglang") and not is_simulated("vllm")
    assert not is_simulated("an-engine-of-another-version")
    assert is_simulated_source("sim") and not is_simulated_source("nvml")


def test_the_simulator_needs_no_gpu_and_is_profiled_as_the_gpu_it_models() -> None:
    """What `engine == "sim" or runs_on_cpu(v)` asked is one question now; the profile request it sends is
    unchanged (SGLang on a GPU asks for CPU and GPU activities, a `device: cpu` SGLang server for CPU only)."""
    sim = ResolvedVariant(name="v", engine="sim", tp=8, model_path="sim://m", args={}, env={})
    sglang_cpu = ResolvedVariant(name="v", engine="sglang", tp=1, model_path="/m", args={"device": "cpu"}, env={})
    assert get_engine("sim").runs_on_cpu(sim) and get_engine("sglang").runs_on_cpu(sglang_cpu)
    assert not get_engine("sglang").runs_on_cpu(ResolvedVariant(name="v", engine="sglang", tp=8, model_path="/m",
                                                                args={}, env={}))

    def activities(engine: str, cpu: bool) -> object:
        req = get_engine(engine).profile_request("/tmp/p", 3, "id", cpu)
        assert req is not None
        return json.loads(req.body)["activities"]

    assert activities("sim", True) == ["CPU", "GPU"] == activities("sglang", False)
    assert activities("sglang", True) == ["CPU"]
