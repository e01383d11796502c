"""`sglbench init`: the starter written for the tests' tiny checkpoints validates and plans with no warning, pins what
the fairness rules ask on every checkpoint layout and GPU, finds (or marks as TODO) the SGLang interpreter, and
never overwrites a file without --force."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.commands.init import Interpreter, find_interpreter, render_starter, residual_findings
from cluster.engines.sglang import detect_version
from cluster.probe.checkpoint import probe_checkpoint
from cluster.config.loader import load_spec
from tests import checkpoints as ck

FINDING_PREFIXES = ("warning", "error", "note")
EXPLICIT_BASELINE = "note: variants.0.baseline: marks the variant that is the baseline anyway"
"""The starter's explicit `baseline: true` is a documented no-op (cluster/config/relevance.py): its note is no
finding."""


@pytest.fixture(autouse=True)
def _no_sglang_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No SGLang interpreter unless a test makes one: PATH holds only a python without sglang."""
    monkeypatch.delenv("SGLBENCH_SGLANG_VENV", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    detect_version.cache_clear()


def _fake_sglang_venv(root: Path, version: str = "0.5.23", importable: bool = True) -> Path:
    """A venv whose python answers the version script (cluster/node/collect.py) as one with sglang would."""
    py = root / "bin" / "python"
    py.parent.mkdir(parents=True)
    answer = f'{{"sglang": "{version}", "flashinfer": null, "torch": "2.9.1", ' \
             f'"sglang_found": {"true" if importable else "false"}}}'
    py.write_text(f"#!/bin/sh\necho '{answer}'\n")
    py.chmod(0o755)
    return py


def _plan(runner: CliRunner, path: Path) -> str:
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("build", "nextn"), [(ck.qwen35_nvfp4, True),
                                               (lambda d: ck.qwen35_nvfp4(d, mtp_weights=False, mtp_declared=False),
                                                False)], ids=["mtp", "no-mtp"])
def test_init_on_the_tiny_checkpoints_writes_a_starter_that_plans_without_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: Callable[[Path], Path], nextn: bool) -> None:
    model = build(tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    out = tmp_path / "starter.yaml"
    result = runner.invoke(app, ["init", str(model), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert not any(ln.startswith("warning") for ln in result.output.splitlines()), result.output
    text = out.read_text()
    assert "# TODO python:" in text and "python:" not in text.replace("# TODO python:", "")
    spec = load_spec(out)
    assert spec.model.path == str(model) and spec.repeats == 3 and spec.slo is not None
    assert [v.name for v in spec.variants] == (["baseline", "nextn"] if nextn else ["baseline"])
    assert ("# no NEXTN variants: the checkpoint has no MTP/NextN weights" in text) is not nextn
    validated = runner.invoke(app, ["validate", str(out)])
    assert validated.exit_code == 0 and "ok " in validated.output, validated.output
    planned = _plan(runner, out)
    findings = [ln for ln in planned.splitlines() if ln.strip().lower().startswith(FINDING_PREFIXES)
                and not ln.startswith(EXPLICIT_BASELINE)]
    assert findings == [], findings
    assert f"fairness: no findings over {4 if nextn else 1} variant(s)" in planned
    assert ("--speculative-num-steps 3" in planned) is nextn


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "qwen35-nvfp4-mtp": ck.qwen35_nvfp4,
    "qwen35-quant-in-config": lambda d: ck.qwen35_nvfp4(d, quant_in_config=True),
    "qwen35-mtp-stripped": ck.qwen35_nvfp4_mtp_stripped,
    "deepseek-nextn": ck.deepseek_nextn,
    "deepseek-no-nextn": lambda d: ck.deepseek_nextn(d, nextn_weights=False),
    "qwen3-next-flat": ck.qwen3_next_flat,
    "dense-single-file": ck.single_file_model,
    "mimo-mtp": ck.mimo_mtp,
    "ernie45-mtp": ck.ernie45_mtp,
    "deepseek-v4-mtp": ck.deepseek_v4_mtp,
}


@pytest.mark.parametrize("gpu_sm", [None, 90, 100, 120])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_checkpoint_layout_gets_a_starter_with_no_fairness_finding(tmp_path: Path, name: str,
                                                                          gpu_sm: Optional[int]) -> None:
    report = probe_checkpoint(str(BUILDERS[name](tmp_path / name)))
    text = render_starter(report, Interpreter(None, None, "none"), "0.5.23", gpu_sm)
    assert residual_findings(text, report, "starter.yaml", gpu_sm) == []
    assert ("\n  - name: nextn" in text) is (report.nextn_refused is None)


def test_the_residual_check_reports_a_rule_the_starter_missed(tmp_path: Path) -> None:
    report = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m")))
    text = render_starter(report, Interpreter(None, None, "none"), "0.5.23")
    dropped = "\n".join(ln for ln in text.splitlines() if "mamba-radix-cache-strategy" not in ln) + "\n"
    assert any("mamba-radix-cache-strategy" in f for f in residual_findings(dropped, report, "x.yaml"))


def test_a_detected_interpreter_is_written_with_its_version_and_plans(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    py = _fake_sglang_venv(tmp_path / "venv")
    monkeypatch.setenv("SGLBENCH_SGLANG_VENV", str(tmp_path / "venv"))
    found = find_interpreter()
    assert found == Interpreter(str(py), "0.5.23", "$SGLBENCH_SGLANG_VENV has sglang 0.5.23")
    model = ck.qwen35_nvfp4(tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["init", str(model)])
    assert result.exit_code == 0, result.output
    spec = load_spec(tmp_path / "model.yaml")  # default file: <model dir name>.yaml here
    launcher = spec.engines["sglang"]
    assert launcher.python == str(py) and launcher.version == "0.5.23"
    planned = _plan(CliRunner(), tmp_path / "model.yaml")
    assert not [ln for ln in planned.splitlines() if ln.strip().lower().startswith(FINDING_PREFIXES)
                and not ln.startswith(EXPLICIT_BASELINE)]


def test_metadata_without_an_importable_package_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sglang_venv(tmp_path / "venv", importable=False)
    monkeypatch.setenv("SGLBENCH_SGLANG_VENV", str(tmp_path / "venv"))
    got = find_interpreter()
    assert got.path is None and str(tmp_path / "venv" / "bin" / "python") in got.note


def test_no_interpreter_with_sglang_leaves_a_marked_todo() -> None:
    got = find_interpreter()
    assert got.path is None and got.version is None and "no interpreter with sglang found" in got.note


def test_an_existing_file_is_refused_without_force(tmp_path: Path) -> None:
    model = ck.qwen35_nvfp4(tmp_path / "model")
    out = tmp_path / "mine.yaml"
    out.write_text("my own experiment\n")
    runner = CliRunner()
    refused = runner.invoke(app, ["init", str(model), "-o", str(out)])
    assert refused.exit_code == 2 and "exists; pass --force" in refused.output
    assert out.read_text() == "my own experiment\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".sglbench-init-")] == []
    forced = runner.invoke(app, ["init", str(model), "-o", str(out), "--force"])
    assert forced.exit_code == 0 and load_spec(out).model.path == str(model)


def test_dash_prints_the_starter_and_a_bad_checkpoint_is_a_user_error(tmp_path: Path) -> None:
    model = ck.single_file_model(tmp_path / "dense")
    runner = CliRunner()
    printed = runner.invoke(app, ["init", str(model), "-o", "-"])
    assert printed.exit_code == 0 and "name: \"dense\"" in printed.output
    assert not os.path.exists(tmp_path / "dense.yaml")
    missing = runner.invoke(app, ["init", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "nowhere" in missing.output


@pytest.mark.parametrize("gpu_sm", [None, 120])
def test_an_older_release_gets_its_sm120_launch_notes_pinned(tmp_path: Path, gpu_sm: Optional[int]) -> None:
    """Fuzz finding (tests/fuzz/test_fuzz_init_starter.py): with a release before 0.5.23 detected, the starter lacked
    the per-release SM120 flags (attention triton, shared-experts fusion off), so `plan` warned on every variant."""
    report = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m")))
    text = render_starter(report, Interpreter(None, None, "none"), "0.5.14", gpu_sm)
    assert residual_findings(text, report, "starter.yaml", gpu_sm) == []
    assert "attention-backend: triton" in text and "disable-shared-experts-fusion: true" in text
    on_h200 = render_starter(report, Interpreter(None, None, "none"), "0.5.14", 90)
    assert "disable-shared-experts-fusion" not in on_h200 and "attention-backend: flashinfer" in on_h200


def test_an_output_path_that_cannot_be_a_file_is_a_user_error(tmp_path: Path) -> None:
    model = ck.single_file_model(tmp_path / "dense")
    runner = CliRunner()
    for target in (tmp_path, tmp_path / "missing-dir" / "x.yaml"):
        for extra in ([], ["--force"]):
            got = runner.invoke(app, ["init", str(model), "-o", str(target), *extra])
            assert got.exit_code == 2 and "-o names the experiment file" in got.output, got.output


def test_a_relative_model_dir_is_written_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck.single_file_model(tmp_path / "dense")
    monkeypatch.chdir(tmp_path)
    got = CliRunner().invoke(app, ["init", "dense", "-o", "s.yaml"])
    assert got.exit_code == 0, got.output
    assert load_spec(tmp_path / "s.yaml").model.path == str(tmp_path / "dense")


def test_checkpoint_text_and_path_stay_data_in_the_starter(tmp_path: Path) -> None:
    """Fuzz finding (tests/fuzz/test_fuzz_init_starter.py): a newline in config.json's model_type ended the probe
    comment and made the rest a YAML line (in the probe comment: architectures, else model_type), a \\x1f made the file unreadable YAML, and a character past the BMP in
    the path was written as a JSON surrogate pair that YAML reads back as two lone surrogates."""
    import json

    model = ck.single_file_model(tmp_path / "model-\U00010000-é")
    cfg = json.loads((model / "config.json").read_text())
    cfg |= {"architectures": ["LlamaForCausalLM\nname: injected\x1f\u2028repeats: 9"], "model_type": "llama"}
    (model / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "s.yaml"
    got = CliRunner().invoke(app, ["init", str(model), "-o", str(out)])
    assert got.exit_code == 0, got.output
    spec = load_spec(out)
    assert spec.model.path == str(model) and spec.name == "model" and spec.repeats == 3
    text = out.read_text()
    assert "\nname: injected" not in text and "\\nname: injected" in text and "\\x1f" in text


def test_a_path_no_experiment_can_hold_is_refused_naming_the_model_dir(tmp_path: Path) -> None:
    model = ck.single_file_model(tmp_path / "bad\x1fname")
    got = CliRunner().invoke(app, ["init", str(model), "-o", str(tmp_path / "s.yaml")])
    assert got.exit_code == 2 and "an experiment cannot name this checkpoint" in got.output, got.output
    assert not (tmp_path / "s.yaml").exists()


def test_without_the_bundled_dataset_the_workload_draws_random_ids_and_still_plans(tmp_path: Path) -> None:
    report = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m")))
    text = render_starter(report, Interpreter(None, None, "none"), "0.5.23", dataset=None)
    assert "source: random_ids, vocab_size: 256" in text and "sharegpt" not in text
    assert residual_findings(text, report, "starter.yaml") == []


def test_the_next_line_is_a_shell_word_that_names_the_written_file(tmp_path: Path) -> None:
    """Before: `next: sglbench plan /p/a b;c.yaml` printed unquoted, so a pasted line ran `c.yaml` as a command."""
    import shlex

    model = ck.qwen35_nvfp4(tmp_path / "model")
    out = tmp_path / "a b;$(c).yaml"
    result = CliRunner().invoke(app, ["init", str(model), "-o", str(out)])
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("next: ")]
    assert shlex.split(line[len("next: "):]) == ["sglbench", "plan", str(out)]


@pytest.mark.parametrize("option", ["-o", "--python"])
def test_a_path_option_with_a_control_character_is_refused_and_named(tmp_path: Path, option: str) -> None:
    """Before: -o wrote a file whose name held a newline (and printed a `next:` line split in two); --python with a
    newline was blamed on the checkpoint ('an experiment cannot name this checkpoint')."""
    model = ck.qwen35_nvfp4(tmp_path / "model")
    args = ["-o", str(tmp_path / "a\nb.yaml")] if option == "-o" else ["-o", "-", "--python", "/x\ny"]
    result = CliRunner().invoke(app, ["init", str(model), *args])
    assert result.exit_code == 2, result.output
    assert f"{option} " in result.output and "a newline" in result.output
    assert "checkpoint" not in result.output and not (tmp_path / "a\nb.yaml").exists()


def test_the_starter_is_written_with_the_umask_not_mkstemp_0600(tmp_path: Path) -> None:
    """Before: every starter was 0600 (mkstemp's mode), unreadable to the Ray job's user on a shared node."""
    model = ck.qwen35_nvfp4(tmp_path / "model")
    out = tmp_path / "s.yaml"
    old = os.umask(0o022)
    try:
        result = CliRunner().invoke(app, ["init", str(model), "-o", str(out)])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert out.stat().st_mode & 0o777 == 0o644
