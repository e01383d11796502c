"""An error found after the spec loaded (a referenced path, the output root, a flag the engine's parser refuses) is
said at the experiment's file:line and field that caused it, the referenced path kept (red-team F7, F8); an error
inside a referenced file keeps that file's own line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.errors import UserError
from cluster.config.loader import field_line, restate_at_field
from tests.unit.config.test_bad_inputs import VALID, _invoke

_SIM = VALID.replace("path: /models/qwen", "path: sim://tiny").replace("  tp: 4", "  tp: 1")


def _error_line(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "spec.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, out = _invoke(["validate", "spec.yaml"])
    assert code == 2, out
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, out
    return errors[0].removeprefix("error: ")


def _with_prompts(path: str) -> str:
    text = _SIM.replace("    num_requests: 8\n", f"    num_requests: 8\n    prompts: {{source: jsonl, path: {path}}}\n")
    assert text != _SIM
    return text


@pytest.mark.parametrize("make,said", [(lambda p: None, "does not exist"), (lambda p: p.mkdir(), "is a directory")])
def test_a_referenced_prompt_file_that_is_not_a_file_is_said_at_the_spec_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object, said: str) -> None:
    target = tmp_path / "p.jsonl"
    make(target)  # type: ignore[operator]
    text = _with_prompts("p.jsonl")
    line = text.splitlines().index("    prompts: {source: jsonl, path: p.jsonl}") + 1
    err = _error_line(tmp_path, text, monkeypatch)
    assert err.startswith(f"spec.yaml:{line}: workloads.0.prompts.path: '{target}' {said}"), err


def test_an_output_root_that_is_a_file_is_said_at_the_spec_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "taken").write_text("x")
    text = _SIM + "output: taken\n"
    err = _error_line(tmp_path, text, monkeypatch)
    assert err.startswith(f"spec.yaml:{text.count(chr(10))}: output: '{tmp_path / 'taken'}' is a file"), err


def test_a_flag_the_engines_parser_refuses_is_said_at_its_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    text = _SIM + "server:\n  args:\n    max-prefill-token: 4096\n"
    err = _error_line(tmp_path, text, monkeypatch)
    assert err.startswith(f"spec.yaml:{text.count(chr(10))}: server.args.max-prefill-token: variant "), err
    assert "write the full name max-prefill-tokens" in err


def test_a_row_error_inside_a_referenced_file_keeps_its_own_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    err = _error_line(tmp_path, _with_prompts("p.jsonl"), monkeypatch)
    assert f"{tmp_path / 'p.jsonl'}:2: invalid JSON" in err, err
    said = restate_at_field("s.yaml", UserError("/d/t.csv:3: bad row", file="/d/t.csv", field="workloads.0.prompts"))
    assert said is None  # located in the trace file by its own line: left as it is


def test_restate_leaves_errors_without_a_field_and_says_defaults_without_a_line(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(VALID)
    assert restate_at_field(spec, UserError("no field here")) is None
    assert field_line(spec, "output") is None  # not written: the default
    said = restate_at_field(spec, UserError("/r: output is a file", file="/r", field="output"))
    assert said == f"{spec}: output: '/r' is a file"
    assert field_line(spec, "workloads.0.input_tokens") == VALID.splitlines().index("    input_tokens: 128") + 1
    assert field_line(tmp_path / "absent.yaml", "output") is None
