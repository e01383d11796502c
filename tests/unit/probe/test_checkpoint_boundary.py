"""The checkpoint boundary, one test per failure class: each bad file is a CheckpointError naming the file, the field
and what was expected (exit 2 from `sglbench probe`), within a timeout, never a traceback, a hang or a silent accept."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from typing import Callable

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.cli import app  # noqa: E402
from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from cluster.probe.safetensors_header import CheckpointError  # noqa: E402

SHARD1 = "model-00001-of-00002.safetensors"
HUB_META = Path(".cache") / "huggingface" / "download" / "config.json.metadata"


def _good(tmp: Path) -> Path:
    return ck.deepseek_nextn(tmp / "m")


def _header(d: Path, header: dict[str, object], data_bytes: int) -> None:
    raw = json.dumps(header).encode()
    (d / SHARD1).write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)


def _entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def _config(d: Path, **extra: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | extra))


# Each case: (model dir, the file the error must name, a part of the message, the field it must name or None).
Case = Callable[[Path], tuple[Path, str, str, "str | None"]]


def generation_config_fifo(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    os.mkfifo(d / "generation_config.json")  # the fingerprint opened it with open(): blocked forever
    return d, "generation_config.json", "is a FIFO (named pipe), not a file", None


def hub_metadata_fifo(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / HUB_META).parent.mkdir(parents=True)
    os.mkfifo(d / HUB_META)
    return d, "config.json.metadata", "is a FIFO (named pipe), not a file", None


def model_dir_symlink_loop(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = tmp / "loop"
    d.symlink_to(d)
    return d, "loop", "is a symlink loop", None  # was "does not exist"


def index_symlink_loop(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "model.safetensors.index.json").unlink()
    (d / "model.safetensors.index.json").symlink_to(d / "model.safetensors.index.json")
    return d, "model.safetensors.index.json", "is a symlink loop", None  # was skipped: shards listed instead


def hf_quant_config_symlink_loop(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "hf_quant_config.json").symlink_to(d / "hf_quant_config.json")
    return d, "hf_quant_config.json", "is a symlink loop", None  # was skipped: "unquantized"


def hub_metadata_not_utf8(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / HUB_META).parent.mkdir(parents=True)
    (d / HUB_META).write_bytes(b"\xff\xfe" + b"a" * 38 + b"\n")
    return d, "config.json.metadata", "not UTF-8", None  # was a UnicodeDecodeError traceback


def hub_metadata_without_commit(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / HUB_META).parent.mkdir(parents=True)
    (d / HUB_META).write_text("main\netag\n1700000000.0\n")
    return d, "config.json.metadata", "is not a commit", "commit"  # was hub_revision None ("not recorded")


def config_int_past_digit_limit(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "config.json").write_text('{"num_hidden_layers": ' + "9" * 5000 + "}")
    return d, "config.json", "invalid JSON (Exceeds the limit", None  # was a ValueError traceback


def index_int_past_digit_limit(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": ' + "1" * 4400 + "}}")
    return d, "model.safetensors.index.json", "Exceeds the limit", None


def config_int_past_int64(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _config(d, vocab_size=2**64)
    return d, "config.json", "must be a non-negative integer of at most", "vocab_size"  # was accepted


def config_layer_types_not_strings(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _config(d, layer_types=[{"a": 1}, 2])
    return d, "config.json", "layer_types must be a list of strings", "layer_types"  # was counted as str()


def config_lone_surrogate(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "config.json").write_text('{"architectures": ["Deepseek\\ud800V3"], "num_hidden_layers": 3}')
    return d, "config.json", "lone surrogate", "architectures[0]"  # printing it raised UnicodeEncodeError


def config_moderately_deep(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    (d / "config.json").write_text('{"quantization_config": ' + "[" * 500 + "]" * 500 + "}")
    return d, "config.json", "JSON nests more than 64 levels", None


def shape_product_past_digit_limit(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"w.weight": _entry("BF16", [10**2200, 10**2200], 0, 2)}, 2)
    return d, SHARD1, "is absurd", "w.weight.shape"  # str() of the product's byte count raised ValueError


def shape_absurd_but_empty(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"w.weight": _entry("BF16", [0, 10**30], 0, 0)}, 0)
    return d, SHARD1, "is absurd", "w.weight.shape"  # 0 elements, 0 bytes: was accepted


def shape_too_many_dims(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"w.weight": _entry("U8", [1] * 100, 0, 1)}, 1)
    return d, SHARD1, "is absurd", "w.weight.shape"


def offsets_overlap(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"a.weight": _entry("BF16", [4], 0, 8), "b.weight": _entry("BF16", [4], 4, 12)}, 12)
    return d, SHARD1, "overlap tensor 'a.weight'", "b.weight.data_offsets"  # was accepted


def offsets_duplicated(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"a.weight": _entry("BF16", [4], 0, 8), "b.weight": _entry("BF16", [4], 0, 8)}, 8)
    return d, SHARD1, "overlap", "data_offsets"


def metadata_not_an_object(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    _header(d, {"__metadata__": [], "a.weight": _entry("BF16", [4], 0, 8)}, 8)
    return d, SHARD1, "__metadata__ must be an object", "__metadata__"  # `[] or {}` was accepted


def shard_name_with_nul(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(iter(idx["weight_map"]))
    idx["weight_map"][name] = "model\x00.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    return d, "model.safetensors.index.json", "holds a NUL byte", f"weight_map.{name}"  # was a ValueError traceback


def shard_name_absolute(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(iter(idx["weight_map"]))
    idx["weight_map"][name] = str(d / SHARD1)
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    return d, "model.safetensors.index.json", "outside the model directory", f"weight_map.{name}"


def model_path_with_nul(tmp: Path) -> tuple[Path, str, str, "str | None"]:
    d = _good(tmp)
    return Path(str(d) + "\x00x"), "m", "holds a NUL byte", "model path"


CASES: list[Case] = [
    generation_config_fifo, hub_metadata_fifo, model_dir_symlink_loop, index_symlink_loop,
    hf_quant_config_symlink_loop, hub_metadata_not_utf8, hub_metadata_without_commit, config_int_past_digit_limit,
    index_int_past_digit_limit, config_int_past_int64, config_layer_types_not_strings, config_lone_surrogate,
    config_moderately_deep, shape_product_past_digit_limit, shape_absurd_but_empty, shape_too_many_dims,
    offsets_overlap, offsets_duplicated, metadata_not_an_object, shard_name_with_nul, shard_name_absolute,
    model_path_with_nul,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
@pytest.mark.timeout(20)  # a FIFO opened for reading would block here
def test_bad_checkpoint_file_is_one_clear_error(case: Case, tmp_path: Path) -> None:
    path, file_part, message_part, field = case(tmp_path)
    with pytest.raises(CheckpointError) as ei:
        probe_checkpoint(str(path))
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 1000, msg
    assert ei.value.file is not None and file_part in ei.value.file, msg
    assert message_part in msg, msg
    if field is not None:
        assert ei.value.field is not None and field in ei.value.field, (ei.value.field, msg)
    if "\x00" in str(path):
        return  # a NUL path cannot pass through argv
    result = CliRunner().invoke(app, ["probe", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "bug in sglbench" not in result.output


def test_a_zero_size_tensor_shares_no_bytes_and_is_accepted(tmp_path: Path) -> None:
    d = _good(tmp_path)
    _header(d, {"a.weight": _entry("BF16", [4], 0, 8), "e.weight": _entry("BF16", [0, 4], 4, 4),
                "b.weight": _entry("BF16", [4], 8, 16)}, 16)
    r = probe_checkpoint(str(d))
    assert r.tensor_count > 0


def test_a_hub_revision_and_a_bom_config_are_still_read(tmp_path: Path) -> None:
    d = _good(tmp_path)
    (d / "config.json").write_bytes(b"\xef\xbb\xbf" + (d / "config.json").read_bytes())
    (d / HUB_META).parent.mkdir(parents=True)
    (d / HUB_META).write_text("a" * 40 + "\netag\n1700000000.0\n")
    r = probe_checkpoint(str(d))
    assert r.hub_revision == "a" * 40 and r.config.num_hidden_layers == 3


def test_a_garbled_generation_config_is_refused(tmp_path: Path) -> None:
    """generation_config.json is only hashed into the fingerprint, but SGLang loads it: invalid JSON is refused."""
    d = _good(tmp_path)
    (d / "generation_config.json").write_bytes(b'{"eos_token_id": \xff}')
    with pytest.raises(CheckpointError, match="not UTF-8") as ei:
        probe_checkpoint(str(d))
    assert ei.value.file is not None and ei.value.file.endswith("generation_config.json")


def test_an_unused_hf_quant_config_is_still_checked(tmp_path: Path) -> None:
    """config.json's quantization_config names the KV cache, so hf_quant_config.json is not consulted; it is still
    a file SGLang reads, so an invalid one is refused."""
    d = ck.qwen35_nvfp4(tmp_path / "q", quant_in_config=True)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["kv_cache_quant_algo"] = "FP8"
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "hf_quant_config.json").write_text('{"quantization": [[[')
    with pytest.raises(CheckpointError, match="invalid JSON") as ei:
        probe_checkpoint(str(d))
    assert ei.value.file is not None and ei.value.file.endswith("hf_quant_config.json")


def test_names_from_the_checkpoint_print_as_text_not_markup(tmp_path: Path) -> None:
    """A directory named `[/x]` and an architecture `[/bold]` are printed as written (Rich raised MarkupError, exit
    70), and a path byte that is not UTF-8 is printed as an escape rather than failing the strict stdout."""
    d = ck.single_file_model(tmp_path / "[/x]" / os.fsdecode(b"m\xff"))
    _config(d, architectures=["[/bold]LlamaForCausalLM"])
    res = CliRunner().invoke(app, ["probe", str(d)])
    assert res.exit_code == 0, res.output
    assert "[/x]" in res.output and "[/bold]LlamaForCausalLM" in res.output and "\\udcff" in res.output


def test_preflight_keeps_the_checkpoint_file_field_and_expectation(tmp_path: Path) -> None:
    """validate/run refuse through preflight: its PreflightError carries the CheckpointError's file, field and
    expectation (before: none of them, so the CLI blamed the experiment YAML)."""
    from cluster.plan.preflight import check_speculative_support
    from cluster.errors import PreflightError
    from cluster.plan.runs import expand_variants
    from cluster.config.loader import parse_spec_text

    d = _good(tmp_path)
    _header(d, {"a.weight": _entry("BF16", [4], 0, 8), "b.weight": _entry("BF16", [4], 4, 12)}, 12)
    spec = parse_spec_text(f"""
version: 1
name: overlap
model: {{path: "{d}", engine: sglang, tp: 1}}
variants:
  - {{name: base, baseline: true}}
workloads:
  - {{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}
load: {{concurrency: [1]}}
""")
    with pytest.raises(PreflightError) as ei:
        check_speculative_support(spec, expand_variants(spec))
    assert ei.value.file == str(d / SHARD1) and ei.value.field == "b.weight.data_offsets", str(ei.value)
    assert ei.value.expected is not None and "begin >= 8" in ei.value.expected


def test_more_experts_per_token_than_experts_is_refused(tmp_path: Path) -> None:
    """Active parameters were counted as routed × 9/4 of the total (more active than there are)."""
    d = _good(tmp_path)
    _config(d, num_experts_per_tok=9)
    with pytest.raises(CheckpointError, match="more than the 4 experts") as ei:
        probe_checkpoint(str(d))
    assert ei.value.field == "num_experts_per_tok"


def test_an_empty_model_path_is_refused_not_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.chdir(_good(tmp_path))
    with pytest.raises(CheckpointError, match="the model path is empty"):
        probe_checkpoint("")


@pytest.mark.timeout(20)
def test_the_tuning_stage_reads_config_json_through_the_boundary(tmp_path: Path) -> None:
    """cluster/tuning/stage.py's load_model_config (now engines/tuning_contract.py load_moe_config) read config.json with read_text(): a FIFO hung it and deep
    nesting escaped as RecursionError. Both are now TuningErrors naming the file."""
    from cluster.engines.tuning_contract import TuningError, load_moe_config

    d = _good(tmp_path)
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")
    with pytest.raises(TuningError, match="is a FIFO") as ei:
        load_moe_config(str(d))
    assert ei.value.file == str(d / "config.json")
    (d / "config.json").unlink()
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TuningError, match="nests more than 64 levels"):
        load_moe_config(str(d))


def test_a_tensor_name_with_a_5000_digit_index_is_refused(tmp_path: Path) -> None:
    """The MTP layer index of `mtp.layers.<5000 digits>.w` went through int(): a ValueError traceback."""
    d = ck.single_file_model(tmp_path / "m")
    ck.write_safetensors(d / "model.safetensors", {"mtp.layers." + "9" * 5000 + ".w.weight": ("BF16", [2, 2])})
    with pytest.raises(CheckpointError, match="longer than 18 digits") as ei:
        probe_checkpoint(str(d))
    assert ei.value.field is not None and ei.value.field.startswith("mtp.layers.999")


def test_an_index_name_with_a_5000_digit_index_is_no_layer(tmp_path: Path) -> None:
    """The same name only in the index's weight_map: counted as no MTP layer, and warned about as unmapped."""
    d = _good(tmp_path)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["mtp.layers." + "9" * 5000 + ".w.weight"] = SHARD1
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    r = probe_checkpoint(str(d))
    assert any("not in their shard's header" in w.message for w in r.warnings)


def test_a_message_built_from_file_content_stays_one_line(tmp_path: Path) -> None:
    """Found by tests/fuzz/test_fuzz_checkpoint.py: a header entry keyed "\\n" holding "\\ud800" put a newline into
    the message's key path; a shard name with a newline did the same. Every CheckpointError is one printable line."""
    d = _good(tmp_path)
    _header(d, {"a.weight": {"\n": "\ud800"}}, 0)
    with pytest.raises(CheckpointError) as ei:
        probe_checkpoint(str(d))
    assert str(ei.value).isprintable() and "lone surrogate" in str(ei.value)
    d2 = ck.deepseek_nextn(tmp_path / "m2")
    idx = json.loads((d2 / "model.safetensors.index.json").read_text())
    name = next(iter(idx["weight_map"]))
    idx["weight_map"][name] = "a\nb.safetensors"
    (d2 / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(CheckpointError) as ei:
        probe_checkpoint(str(d2))
    assert str(ei.value).isprintable() and "a\\nb.safetensors" in str(ei.value)


def test_a_newline_in_a_tensor_name_prints_as_an_escape(tmp_path: Path) -> None:
    """The MTP head's fc tensor is printed by name: a newline in it split the summary line."""
    d = ck.single_file_model(tmp_path / "m")
    ck.write_safetensors(d / "model.safetensors", {"model.embed_tokens.weight": ("BF16", [4, 4]),
                                                    "mtp.a\nb.eh_proj.weight": ("BF16", [4, 8])})
    res = CliRunner().invoke(app, ["probe", str(d)])
    assert res.exit_code == 0 and "mtp.a\\nb.eh_proj.weight" in res.output, res.output


@pytest.mark.parametrize("target", ["config.json", "model.safetensors.index.json"])
def test_a_key_given_twice_in_checkpoint_json_is_refused(target: str, tmp_path: Path) -> None:
    """json.loads keeps the last of two equal keys and silently drops the first (a weight_map entry, a setting)."""
    d = _good(tmp_path)
    text = (d / target).read_text().rstrip()
    (d / target).write_text(text[:-1].rstrip() + ', "num_hidden_layers": 7, "num_hidden_layers": 3}')
    with pytest.raises(CheckpointError, match="duplicate key 'num_hidden_layers'") as ei:
        probe_checkpoint(str(d))
    assert ei.value.file is not None and ei.value.file.endswith(target) and ei.value.field == "num_hidden_layers"
