"""The Ray-job driver's log (what `sglbench submit` follows) ends with the comparison `sglbench run` prints, then
the one JSON line with the counts — on every path."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from cluster.config.loader import parse_spec_text
from tests.unit.analysis.test_comparison import build_dataset


def _main(monkeypatch: pytest.MonkeyPatch, name: str, root: str, counts: dict[str, int]) -> int:
    """The job entry point (commands/job.py main) on experiment `name` whose run 'recorded' `counts` under `root`
    (Ray and the run faked)."""
    from cluster.commands import job

    result = SimpleNamespace(dataset_root=root, counts=lambda: counts, skipped=0)
    spec = parse_spec_text(f"version: 1\nname: {name}\nmodel: {{path: sim://m, engine: sim}}\n"
                           "variants: [{name: base}]\n"
                           "workloads: [{name: chat, input_tokens: 8, output_tokens: 8, num_requests: 8}]\n"
                           "load: {concurrency: [1]}\n")
    monkeypatch.setattr(job, "load_spec", lambda path: spec)
    monkeypatch.setattr(job, "init_ray", lambda *a: None)
    monkeypatch.setattr(job, "logical_gpus_for", lambda spec: None)
    monkeypatch.setattr(job, "run_experiment", lambda spec, **kw: result)
    return job.main(["exp.yaml"])


def test_driver_main_prints_the_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path)
    build_dataset(root, "job", other="tuned", steps=[], conc=(1,), repeats=1, n_requests=8, out_tokens=8)
    assert _main(monkeypatch, "job", root, {"ok": 2}) == 0
    out = capsys.readouterr().out
    assert f"dataset: {root}/job  runs: ok=2" in out
    assert "job / chat: means over ok repeats" in out and "tuned" in out and "×base" in out
    assert json.loads(out.strip().splitlines()[-1]) == {"dataset_root": root, "counts": {"ok": 2}, "skipped": 0}


@pytest.mark.parametrize("made", [True, False], ids=["empty-experiment", "no-experiment-directory"])
def test_driver_main_prints_its_json_line_when_no_run_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  made: bool) -> None:
    """Every run failed before writing (or all were skipped): print_compare says 'no runs recorded' and raises
    typer.Exit, a RuntimeError in the installed typer, which once escaped main() as a traceback (exit 70) instead of
    the job's JSON line."""
    root = str(tmp_path)
    if made:
        (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert _main(monkeypatch, "empty", root, {"failed": 2}) == 1
    out = capsys.readouterr()
    assert ("no runs recorded" if made else "not found") in out.err and "bug in sglbench" not in out.err
    assert json.loads(out.out.strip().splitlines()[-1]) == {"dataset_root": root, "counts": {"failed": 2}, "skipped": 0}
