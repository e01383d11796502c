"""Bad checkpoints: each gives one clear line naming the file and the problem, exit code 2, never a traceback."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Callable

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.cli import app  # noqa: E402
from cluster.probe.safetensors_header import CheckpointError  # noqa: E402
from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402

SHARD1 = "model-00001-of-00002.safetensors"


def _good(tmp: Path) -> Path:
    return ck.deepseek_nextn(tmp / "m")


def _raw_shard(path: Path, header: bytes, declared_len: int | None = None, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header) if declared_len is None else declared_len) + header + data)


def _replace_shard_header(d: Path, header: dict[str, object], data: bytes = b"") -> None:
    _raw_shard(d / SHARD1, json.dumps(header).encode(), data=data)


def missing_dir(tmp: Path) -> tuple[Path, str, str]:
    return tmp / "nope", "nope", "does not exist"


def not_a_directory(tmp: Path) -> tuple[Path, str, str]:
    f = tmp / "file.txt"
    f.write_text("x")
    return f, "file.txt", "is not a directory"


def not_a_model(tmp: Path) -> tuple[Path, str, str]:
    d = tmp / "empty"
    d.mkdir()
    (d / "README.md").write_text("hello")
    return d, "empty", "not a model directory"


def missing_config(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").unlink()
    return d, "config.json", "missing"


def invalid_config_json(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").write_text('{"hidden_size": 64,\n "num_hidden_layers": }')
    return d, "config.json", "invalid JSON (Expecting value: line 2 column"


def config_not_object(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").write_text("[1, 2]")
    return d, "config.json", "expected a JSON object"


def config_bad_layers(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": "sixty"}))
    return d, "config.json", "num_hidden_layers must be a non-negative integer"


def index_invalid_json(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "model.safetensors.index.json").write_text("{not json")
    return d, "model.safetensors.index.json", "invalid JSON"


def index_without_weight_map(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    return d, "model.safetensors.index.json", "missing 'weight_map'"


def index_missing_shard(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / SHARD1).unlink()
    return d, "model.safetensors.index.json", f"{SHARD1} but it does not exist"


def index_shard_escapes(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    return d, "model.safetensors.index.json", "outside the model directory"


def header_longer_than_file(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _raw_shard(d / SHARD1, b"{}", declared_len=10_000)
    return d, SHARD1, "header length 10000 is larger than the file"


def header_over_cap(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _raw_shard(d / SHARD1, b"{}", declared_len=200_000_000)
    return d, SHARD1, "exceeds the 100000000-byte limit"


def file_too_short(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / SHARD1).write_bytes(b"\x01\x02")
    return d, SHARD1, "too short"


def header_not_json(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _raw_shard(d / SHARD1, b"this is not json")
    return d, SHARD1, "invalid JSON"


def header_not_object(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _raw_shard(d / SHARD1, b"[1, 2, 3]")
    return d, SHARD1, "expected a JSON object at the top level, got list"


def unknown_dtype(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _replace_shard_header(d, {"model.embed_tokens.weight": {"dtype": "FP4X", "shape": [2], "data_offsets": [0, 1]}},
                          data=b"\0")
    return d, SHARD1, "unknown dtype 'FP4X'"


def offsets_outside_file(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _replace_shard_header(d, {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}},
                          data=b"\0" * 4)
    return d, SHARD1, "outside the file"


def offsets_wrong_size(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _replace_shard_header(d, {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}},
                          data=b"\0" * 8)
    return d, SHARD1, "needs 8"


def bad_shape(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _replace_shard_header(d, {"x.weight": {"dtype": "BF16", "shape": [-1], "data_offsets": [0, 0]}})
    return d, SHARD1, "shape must be a list of non-negative integers"


def duplicate_header_key(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    e = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    _raw_shard(d / SHARD1, f'{{"a": {e}, "a": {e}}}'.encode(), data=b"\0")
    return d, SHARD1, "duplicate key 'a'"


def no_weights(tmp: Path) -> tuple[Path, str, str]:
    d = tmp / "cfg-only"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d, "cfg-only", "no weights"


def bad_hf_quant_config(tmp: Path) -> tuple[Path, str, str]:
    d = ck.qwen35_nvfp4(tmp / "q")
    (d / "hf_quant_config.json").write_text('{"producer": {}}')
    return d, "hf_quant_config.json", "missing the 'quantization' object"


def deep_config_json(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    return d, "config.json", "JSON nests more than 64 levels"


def deep_header_json(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    _raw_shard(d / SHARD1, b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    return d, SHARD1, "JSON nests more than 64 levels"


def shard_is_a_directory(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / SHARD1).unlink()
    (d / SHARD1).mkdir()
    return d, "model.safetensors.index.json", "is a directory, not a file"


def shard_is_a_symlink_loop(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / SHARD1).unlink()
    (d / SHARD1).symlink_to(d / SHARD1)
    return d, "model.safetensors.index.json", "is a symlink loop"


def shard_is_a_fifo(tmp: Path) -> tuple[Path, str, str]:
    import os

    d = _good(tmp)
    (d / SHARD1).unlink()
    os.mkfifo(d / SHARD1)  # opening it for reading would block forever: the probe must not
    return d, "model.safetensors.index.json", "is a FIFO (named pipe), not a file"


def shard_is_a_dangling_symlink(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / SHARD1).unlink()
    (d / SHARD1).symlink_to(d / "gone.safetensors")
    return d, "model.safetensors.index.json", "is a dangling symlink"


def config_is_a_directory(tmp: Path) -> tuple[Path, str, str]:
    d = _good(tmp)
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    return d, "config.json", "is a directory, not a file"


CASES: list[Callable[[Path], tuple[Path, str, str]]] = [
    missing_dir, not_a_directory, not_a_model, missing_config, invalid_config_json, config_not_object,
    config_bad_layers, index_invalid_json, index_without_weight_map, index_missing_shard, index_shard_escapes,
    header_longer_than_file, header_over_cap, file_too_short, header_not_json, header_not_object, unknown_dtype,
    offsets_outside_file, offsets_wrong_size, bad_shape, duplicate_header_key, no_weights, bad_hf_quant_config,
    deep_config_json, deep_header_json, shard_is_a_directory, shard_is_a_symlink_loop, shard_is_a_fifo,
    shard_is_a_dangling_symlink, config_is_a_directory,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
@pytest.mark.timeout(30)  # a FIFO opened for reading would hang here
def test_bad_input_is_one_clear_line(case: Callable[[Path], tuple[Path, str, str]], tmp_path: Path) -> None:
    path, file_part, message_part = case(tmp_path)
    with pytest.raises(CheckpointError) as ei:
        probe_checkpoint(str(path))
    msg = str(ei.value)
    assert "\n" not in msg
    assert ei.value.file is not None and file_part in ei.value.file, msg
    assert message_part in msg, msg

    result = CliRunner().invoke(app, ["probe", str(path)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message_part in lines[0], result.output
    assert "Traceback" not in result.output


def test_cli_json_and_human_output(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4_mtp_stripped(tmp_path / "m")
    res = CliRunner().invoke(app, ["probe", str(d), "--json"])
    assert res.exit_code == 0, res.output
    j = json.loads(res.output)
    assert j["schema"] == 1 and j["mtp"]["verdict"] == "declared_but_absent"
    res = CliRunner().invoke(app, ["probe", str(d)])
    assert res.exit_code == 0
    assert "declared_but_absent" in res.output and "NVFP4" in res.output
    assert len(res.output.splitlines()) <= 12


_READ_KEYS = {  # every config key the probe reads (text_config of the Qwen3.5 layout, or hf_quant_config.json)
    ("config.json", "text_config", "model_type"): "string",
    ("config.json", "", "model_type"): "string",
    ("config.json", "text_config", "layer_types"): "list",
    ("config.json", "text_config", "mtp_use_dedicated_embeddings"): "bool",
    ("config.json", "text_config", "hidden_size"): "size",
    ("config.json", "text_config", "num_hidden_layers"): "size",
    ("config.json", "text_config", "vocab_size"): "size",
    ("config.json", "text_config", "full_attention_interval"): "size",
    ("config.json", "text_config", "max_position_embeddings"): "size",
    ("hf_quant_config.json", "quantization", "quant_algo"): "string",
    ("hf_quant_config.json", "quantization", "kv_cache_quant_algo"): "string",
    ("hf_quant_config.json", "quantization", "group_size"): "size",
}
_WRONG = {"string": [7, ["x"], {"a": 1}, True], "list": [5, "linear_attention", {"a": 1}],
          "bool": ["false", 0, [True]], "size": ["16", 0, [16], {"n": 16}, True]}


def _probe_with(tmp_path: Path, file: str, scope: str, key: str, value: object) -> None:
    """Probe the tiny Qwen3.5 checkpoint with one key of `file` (under `scope`) set to `value`."""
    model = ck.qwen35_nvfp4(tmp_path / "m")
    data = json.loads((model / file).read_text())
    (data[scope] if scope else data)[key] = value
    (model / file).write_text(json.dumps(data))
    probe_checkpoint(str(model))


@pytest.mark.parametrize(("file", "scope", "key", "value"),
                         [(f, s, k, v) for (f, s, k), kind in _READ_KEYS.items() for v in _WRONG[kind]],
                         ids=lambda x: repr(x)[:24])
def test_a_read_key_of_the_wrong_type_or_a_zero_size_is_refused_naming_it(
        tmp_path: Path, file: str, scope: str, key: str, value: object) -> None:
    """The invariant: a key the probe reads is either used as given or refused naming it. Before, a wrong type
    (model_type 7, layer_types 5, quant_algo 4, group_size "16") was read as absent, and a 0 size passed."""
    with pytest.raises(CheckpointError) as e:
        _probe_with(tmp_path, file, scope, key, value)
    assert f"{scope + '.' if scope else ''}{key}" in str(e.value) and file in str(e.value)


def test_layer_types_must_have_one_entry_per_layer(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="layer_types has 1 entries for 4 layers"):
        _probe_with(tmp_path, "config.json", "text_config", "layer_types", ["linear_attention"])
