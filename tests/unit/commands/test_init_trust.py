"""`sglbench init` trusts neither what it reads nor where it writes: the probe's warnings become TODO lines, NEXTN is
written only when config.json and the weights agree on the MTP head, the checkpoint directory is never written into,
and a --python that is not SGLang's interpreter here is said, not silently recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.loader import load_spec
from cluster.engines.sglang import detect_version
from tests import checkpoints as ck


@pytest.fixture(autouse=True)
def _no_sglang_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SGLBENCH_SGLANG_VENV", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    detect_version.cache_clear()


def _init(*args: str) -> tuple[int, str]:
    got = CliRunner().invoke(app, ["init", *args])
    return got.exit_code, got.output


@pytest.mark.parametrize("case", sorted(ck.MTP_CONTRADICTIONS))
def test_a_contradicting_mtp_head_is_a_todo_and_a_commented_nextn_variant(tmp_path: Path, case: str) -> None:
    """Before: no TODO line, nothing printed, and an active `nextn` variant (NEXTN 1-3) in every case."""
    model = ck.mtp_contradiction(tmp_path / "model", case)
    out = tmp_path / "starter.yaml"
    code, printed = _init(str(model), "-o", str(out))
    assert code == 0, printed
    text = out.read_text()
    todo = [ln for ln in text.splitlines() if ln.startswith("# TODO: probe: ")]
    warned = [ln for ln in printed.splitlines() if ln.startswith("warning: probe: ")]
    assert len(todo) == 1 and len(warned) == 1, (todo, printed)
    assert todo[0].removeprefix("# TODO: probe: ") in warned[0]
    assert "\n  - name: nextn" not in text and "\n#  - name: nextn" in text
    (why,) = [ln for ln in text.splitlines() if ln.startswith("# no NEXTN variants: ")]
    assert todo[0].removeprefix("# TODO: probe: ") in why
    spec = load_spec(out)
    assert [v.name for v in spec.variants] == ["baseline"]
    planned = CliRunner().invoke(app, ["plan", str(out)])
    assert planned.exit_code == 0, planned.output


def test_each_contradiction_is_named_in_the_todo(tmp_path: Path) -> None:
    said = {}
    for case in ck.MTP_CONTRADICTIONS:
        model = ck.mtp_contradiction(tmp_path / case, case)
        code, printed = _init(str(model), "-o", "-")
        assert code == 0, printed
        said[case] = "\n".join(ln for ln in printed.splitlines() if ln.startswith("# TODO: probe: "))
    assert "declares no MTP layers" in said["undeclared"]
    assert "config declares 1 MTP layer(s); weights hold 2" in said["layer-count"]
    assert "text_config.mtp_num_hidden_layers = 1, num_nextn_predict_layers = 2" in said["keys-disagree"]
    assert "short num_hidden_layers" in said["hidden-layers"]


def test_the_uncommented_variant_is_the_one_init_writes_when_the_head_is_healthy(tmp_path: Path) -> None:
    healthy = ck.deepseek_nextn(tmp_path / "ok")
    _, good = _init(str(healthy), "-o", "-")
    _, bad = _init(str(ck.mtp_contradiction(tmp_path / "bad", "hidden-layers")), "-o", "-")
    active = good[good.index("  - name: nextn"):good.index("workloads:")].splitlines()
    commented = [ln[1:] for ln in bad.splitlines() if ln.startswith("#  ")]
    assert [ln.split("   # ")[0] for ln in commented] == [ln.split("   # ")[0] for ln in active]
    assert "# TODO: probe" not in good and "# TODO: probe" in bad


@pytest.mark.parametrize("where", ["config.json", "new.yaml", "sub/dir.yaml", "link/x.yaml", "default"])
@pytest.mark.parametrize("force", [False, True])
def test_the_starter_is_never_written_inside_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            where: str, force: bool) -> None:
    """Before: `-o MODEL/config.json --force` replaced the checkpoint's own config.json with the starter."""
    model = ck.qwen35_nvfp4(tmp_path / "model")
    (model / "sub").mkdir()
    (tmp_path / "link").symlink_to(model)
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    if where == "default":
        monkeypatch.chdir(model)
        target, args = model / "model.yaml", []
    else:
        target = (tmp_path if where.startswith("link") else model) / where
        args = ["-o", str(target)]
    code, printed = _init(str(model), *args, *(["--force"] if force else []))
    assert code == 2, printed
    (error,) = [ln for ln in printed.splitlines() if ln.startswith("error: ")]
    assert f"{target} is inside the checkpoint directory {model}" in error and "-o" in error
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before
    assert not (model / "sub" / "dir.yaml").exists()


def test_beside_the_checkpoint_is_fine(tmp_path: Path) -> None:
    model = ck.qwen35_nvfp4(tmp_path / "model")
    code, printed = _init(str(model), "-o", str(tmp_path / "model.yaml"))
    assert code == 0 and load_spec(tmp_path / "model.yaml").model.path == str(model), printed


def test_a_python_that_does_not_exist_is_a_warning_and_a_todo(tmp_path: Path) -> None:
    """Before: written into engines.sglang.python without a word, its version taken as the default release."""
    model = ck.qwen35_nvfp4(tmp_path / "model")
    out = tmp_path / "s.yaml"
    missing = str(tmp_path / "nowhere" / "bin" / "python")
    code, printed = _init(str(model), "-o", str(out), "--python", missing)
    assert code == 0, printed
    assert f"warning: --python {missing} does not exist on this machine" in printed
    text = out.read_text()
    assert f"# TODO: --python {missing} does not exist on this machine" in text
    assert load_spec(out).engines["sglang"].python == missing  # written as given: it may be the GPU node's path


def test_a_python_without_sglang_is_a_warning_and_a_todo(tmp_path: Path) -> None:
    model = ck.qwen35_nvfp4(tmp_path / "model")
    py = tmp_path / "bin" / "python"
    py.parent.mkdir()
    answer = '{"sglang": null, "flashinfer": null, "torch": null, "sglang_found": false}'
    py.write_text(f"#!/bin/sh\necho '{answer}'\n")
    py.chmod(0o755)
    code, printed = _init(str(model), "-o", "-", "--python", str(py))
    assert code == 0, printed
    assert f"warning: --python {py}: it runs but has no importable sglang" in printed
    assert f"# TODO: --python {py}: it runs but has no importable sglang" in printed


def test_a_healthy_checkpoint_gets_no_todo_and_its_starter_validates(tmp_path: Path) -> None:
    for build in (ck.qwen35_nvfp4, ck.deepseek_nextn, ck.qwen3_next_flat, ck.mimo_mtp):
        model = build(tmp_path / build.__name__)
        out = tmp_path / f"{build.__name__}.yaml"
        code, printed = _init(str(model), "-o", str(out))
        assert code == 0 and "warning" not in printed, printed
        text = out.read_text()
        assert "# TODO: probe" not in text and "\n  - name: nextn" in text
        validated = CliRunner().invoke(app, ["validate", str(out)])
        assert validated.exit_code == 0, validated.output


def test_the_probe_json_carries_the_records(tmp_path: Path) -> None:
    model = ck.mtp_contradiction(tmp_path / "m", "keys-disagree")
    got = CliRunner().invoke(app, ["probe", "--json", str(model)])
    doc = json.loads(got.output)
    assert [r["code"] for r in doc["warning_records"]] == ["mtp-keys-disagree"]
    assert doc["warnings"] == [r["message"] for r in doc["warning_records"]]
    assert doc["config"]["mtp_declared_keys"] == {"config.json text_config.mtp_num_hidden_layers": 1,
                                                  "config.json num_nextn_predict_layers": 2}
    assert os.path.isdir(model)
