"""An adaptive variant's derived config: validate/plan write nothing under a result root, run writes it atomically
(refusing another config already there), the argv names it by an absolute path the engine actor checks before
launching, and an experiment source's root defaults to the output root the run uses (`--output`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import load_spec
from cluster.distributed.actors import EngineActorImpl
from cluster.errors import PreflightError
from cluster.node.preflight import PreflightLine, input_checks
from cluster.plan.runs import expand_variants, launch_form
from cluster.probe.checkpoint import ProbeReport
from cluster.server.process import ServerStartError
from tests.unit.analysis.test_comparison import build_dataset


def _input_checks(spec: ExperimentSpec, output: str, reports: dict[str, ProbeReport],
                  write_adaptive: bool = False) -> list[PreflightLine]:
    """Preflight's input checks as `validate` and `run` call them from this directory; the lines it said."""
    said: list[PreflightLine] = []
    input_checks(spec, Path.cwd(), said.append, output, reports, write_adaptive)
    return said

SPEC = """
name: adaptive-next
model: {{path: "sim://m", engine: sim, tp: 1}}
server: {{args: {{max-running-requests: 8}}}}
variants:
  - {{name: baseline}}
  - {{name: adaptive, speculative: {{num_steps: 1, adaptive: {{experiment: one}}}}}}
workloads: [{{name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}}]
load: {{concurrency: [1]}}
output: {output}
"""


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root holding experiment `one`, whose depth schedule is nextn-1 at c16."""
    root = tmp_path_factory.mktemp("earlier")
    build_dataset(str(root), "one", steps=[1, 2], repeats=2, conc=(1, 4, 16), n_requests=16, out_tokens=16)
    return root


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_validate_and_plan_write_nothing_under_a_result_root(earlier: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: both wrote <root>/one/adaptive-config.json into the earlier experiment's results."""
    (tmp_path / "exp.yaml").write_text(SPEC.format(output=earlier))
    monkeypatch.chdir(tmp_path)
    before = _tree(earlier)
    for cmd in ("validate", "plan"):
        res = CliRunner().invoke(app, [cmd, "exp.yaml"])
        assert res.exit_code == 0, res.output
        assert _tree(earlier) == before, f"{cmd} changed the result root"
    target = str(earlier / "one" / "adaptive-config.json")
    assert f"`run` writes {target} (nothing is written now)" in res.output
    assert f"--speculative-adaptive-config {target}" in res.output  # the argv run launches, absolute
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("sglbench-adaptive-*")], "temp file kept"


def test_run_writes_the_config_once_and_refuses_another_already_there(earlier: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec_path = tmp_path / "exp.yaml"
    spec_path.write_text(SPEC.format(output=earlier))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_path)
    target = earlier / "one" / "adaptive-config.json"
    target.unlink(missing_ok=True)
    _input_checks(spec, spec.output, {}, write_adaptive=True)
    written = target.read_text()
    assert json.loads(written) == {"1": {"candidate_steps": [1]}}
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")], "no temp file left beside it"
    _input_checks(spec, spec.output, {}, write_adaptive=True)  # the same config again: kept as is
    assert target.read_text() == written
    target.write_text('{"1": {"candidate_steps": [2]}}')
    try:
        with pytest.raises(PreflightError) as info:
            _input_checks(spec, spec.output, {}, write_adaptive=True)
        assert info.value.file == str(target) and info.value.field == "variants.1.speculative.adaptive"
        assert "another content" in str(info.value) and target.read_text() == '{"1": {"candidate_steps": [2]}}'
    finally:
        target.unlink()


def test_the_argv_names_the_config_by_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: the argv held `results/one/adaptive-config.json`, read from the server's working directory."""
    (tmp_path / "exp.yaml").write_text(SPEC.format(output="results"))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(tmp_path / "exp.yaml")
    v = next(x for x in expand_variants(spec) if x.name == "adaptive")
    launched = launch_form(spec, v, str(tmp_path / "results"), tmp_path)
    assert launched.speculative is not None
    assert launched.speculative.adaptive_config == str(tmp_path / "results" / "one" / "adaptive-config.json")
    assert v.speculative is not None and v.speculative.adaptive_config == "results/one/adaptive-config.json", \
        "the run key keeps the declared path, whatever the working directory"
    res = CliRunner().invoke(app, ["plan", "exp.yaml"])  # no results there: refused naming the field
    assert res.exit_code == 2 and "variants.1.speculative.adaptive.experiment" in res.output


def test_the_engine_actor_refuses_a_config_missing_on_its_node(tmp_path: Path) -> None:
    spec_path = tmp_path / "exp.yaml"
    spec_path.write_text(SPEC.format(output=tmp_path / "results"))
    spec = load_spec(spec_path)
    v = launch_form(spec, next(x for x in expand_variants(spec) if x.name == "adaptive"),
                    str(tmp_path / "results"), tmp_path)
    actor = EngineActorImpl(v, None, str(tmp_path / "logs"))
    with pytest.raises(ServerStartError) as info:
        actor.start(5.0)
    assert str(tmp_path / "results" / "one" / "adaptive-config.json") in str(info.value)
    assert "variant adaptive" in str(info.value) and "storage every node shares" in str(info.value)
    assert actor.server is None, "no server was launched"


def test_the_experiment_source_is_read_under_the_runs_output_root(earlier: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: with `run --output EARLIER` the source was looked for under the spec's output and refused."""
    (tmp_path / "exp.yaml").write_text(SPEC.format(output=tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(tmp_path / "exp.yaml")
    with pytest.raises(PreflightError, match="elsewhere"):
        _input_checks(spec, spec.output, {})
    _input_checks(spec, str(earlier), {})  # found under the --output root, and nothing written there
    assert not (earlier / "one" / "adaptive-config.json").exists()
