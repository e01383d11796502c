"""A new engine is its adapter module, its registration and its test: tests/unit/engines/toy_engine.py registered
here (one EngineEntry) is accepted by the spec and the schema, gets its argv from `plan`, its cap warned about, its
checkpoint probed as it declares, its metric names scraped and its packages recorded, without any other file of the
project naming it; unregistered, it is refused again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.engines import EngineEntry, engine_names, register_engine, registered
from cluster.config.loader import parse_spec_text
from cluster.engines.flagcheck import check_launch_flags
from cluster.engines.registry import (get_engine, get_tuning_surface, reported_packages, scraped_metric_names,
                                      speaks_sglang_argv)
from cluster.engines.tuning_surfaces import GpuTuningSurface
from cluster.errors import UserError
from cluster.loadgen.gate import GateTarget
from cluster.loadgen.load_target import LoadTarget
from cluster.plan.fairness import check_fairness
from cluster.plan.preflight import check_speculative_support
from cluster.plan.runs import expand_variants
from cluster.probe.checkpoint import ProbeReport

from toy_engine import ToyEngine

SPEC = """version: 1
name: toy-walk
model: {path: /nonexistent/model, engine: toy, tp: 2}
engines: {toy: {python: /usr/bin/python3}}
server:
  args: {max-batch: 4}
variants: [{name: base}, {name: big, engine: toy, args: {max-batch: 16}}]
workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 8}]
load: {concurrency: [1, 8]}
"""


@pytest.fixture
def toy() -> Iterator[EngineEntry]:
    with registered(EngineEntry("toy", f"{ToyEngine.__module__}:ToyEngine")) as entry:
        yield entry


def _spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(SPEC)
    return path


def _schema_engines() -> list[list[str]]:
    res = CliRunner().invoke(app, ["schema"])
    assert res.exit_code == 0, res.output
    doc: Any = json.loads(res.output)
    model = doc["$defs"]["ModelSpec"]["properties"]["engine"]["enum"]
    variant = doc["$defs"]["VariantSpec"]["properties"]["engine"]["anyOf"][0]["enum"]
    return [model, variant, doc["properties"]["engines"]["propertyNames"]["enum"]]


def test_unregistered_the_engine_is_refused_at_its_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", str(_spec_file(tmp_path))])
    assert res.exit_code == 2, res.output
    assert "toy.yaml:3: model.engine: Input should be 'sglang', 'sim' or 'vllm' (got 'toy')" in res.output
    assert all("toy" not in names for names in _schema_engines())


def test_registered_the_schema_lists_it_and_validate_accepts_it(toy: EngineEntry, tmp_path: Path) -> None:
    assert engine_names() == ("sglang", "sim", "vllm", "toy")
    assert _schema_engines() == [["sglang", "sim", "vllm", "toy"]] * 3
    res = CliRunner().invoke(app, ["validate", str(_spec_file(tmp_path))])
    assert res.exit_code == 0, res.output
    assert "load.concurrency 8 is above its --max-batch 4" in res.output  # its cap flag, from the adapter


def test_plan_builds_its_argv(toy: EngineEntry, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plan", str(_spec_file(tmp_path))])
    assert res.exit_code == 0, res.output
    assert "/usr/bin/python3 -m toy_server.serve --model /nonexistent/model --host 127.0.0.1 --port 30000 " \
           "--shards 2 --max-batch 16" in res.output
    assert "engine=toy tp=2" in res.output


def test_its_checkpoint_is_probed_as_it_declares(toy: EngineEntry, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec_text(SPEC)
    variants = expand_variants(spec)
    probed: list[str] = []

    def probe(path: str) -> ProbeReport:
        probed.append(path)
        raise AssertionError("recorded, not read")

    with pytest.raises(AssertionError, match="recorded"):
        check_speculative_support(spec, variants, probe)
    assert probed == ["/nonexistent/model"]  # not a directory here, probed anyway: checkpoint_probed
    monkeypatch.setattr(ToyEngine, "checkpoint_probed", False)
    assert check_speculative_support(spec, variants, probe) == {} and probed == ["/nonexistent/model"]


def test_its_other_facts_reach_their_consumers(toy: EngineEntry) -> None:
    spec = parse_spec_text(SPEC)
    variants = expand_variants(spec)
    assert scraped_metric_names()[-2:] == ("toy:requests_running", "toy:requests_waiting")
    assert reported_packages()[-1] == "toy-server"
    assert isinstance(get_tuning_surface("toy"), GpuTuningSurface)
    assert not speaks_sglang_argv("toy") and check_fairness(variants) == []  # SGLang's rules are not its own
    assert check_launch_flags(spec, variants, "python", on_node=True) == []  # it declares no parser to ask
    engine = get_engine("toy")
    assert isinstance(engine, LoadTarget) and isinstance(engine, GateTarget)


def test_a_registration_holds_only_inside_its_block_and_only_once() -> None:
    entry = EngineEntry("toy", f"{ToyEngine.__module__}:ToyEngine")
    with registered(entry):
        with pytest.raises(ValueError, match="registered twice"):
            register_engine(EngineEntry("toy", "elsewhere:Other"))
        assert get_engine("toy").label == "Toy server"
    assert "toy" not in engine_names()
    with pytest.raises(UserError, match="expected sglang, sim or vllm"):
        get_engine("toy")


def test_an_entry_must_name_the_adapter_of_its_own_name() -> None:
    with registered(EngineEntry("toy2", f"{ToyEngine.__module__}:ToyEngine")):
        with pytest.raises(TypeError, match="whose name is 'toy'"):
            get_engine("toy2")
