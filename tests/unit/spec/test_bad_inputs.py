"""Malformed experiment YAMLs are rejected with one SpecError naming file, line and field; experiments/ all load."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.spec.loader import MAX_SPEC_BYTES, load_spec, parse_spec_text
from cluster.spec.models import SpecError

REPO = Path(__file__).resolve().parents[3]
BAD_DIR = REPO / "tests" / "data" / "bad_specs"
ROOT = ""
"""The field of a problem with the whole document (printed as <root>)."""

# file -> (line, field, a fragment of the message that says what was expected)
EXPECTED: dict[str, tuple[int, str, str]] = {
    "anchor_alias.yaml": (9, "variants.0.sim", "anchors and aliases are not allowed"),
    "comments_only.yaml": (1, ROOT, "got an empty document"),
    "complex_key.yaml": (21, "<sequence key>", "unhashable key"),
    "concurrency_zero.yaml": (19, "load.concurrency.1", "must be at least 1"),
    "control_character.yaml": (2, ROOT, "special characters are not allowed"),
    "deep_nesting.yaml": (22, "sim.x" + ".0" * 62, "nests more than 64 levels"),
    "duplicate_key.yaml": (21, "repeats", "duplicate key"),
    "duplicate_nested_key.yaml": (7, "model.engine", "duplicate key"),
    "duplicate_variant_names.yaml": (9, "variants.1.name", "duplicate variant name 'baseline'"),
    "duplicate_workload_names.yaml": (18, "workloads.1.name", "duplicate workload name 'short'"),
    "eagle3_without_draft_path.yaml": (10, "variants.1.speculative.draft_model_path", "EAGLE3 needs draft_model_path"),
    "empty_file.yaml": (1, ROOT, "expected a mapping"),
    "empty_model_path.yaml": (4, "model.path", "at least 1 character"),
    "empty_variant_list.yaml": (7, "variants", "at least 1 item"),
    "env_name_invalid.yaml": (23, "server.env.1BAD-NAME", "[A-Za-z_][A-Za-z0-9_]*"),
    "env_value_not_string.yaml": (23, "server.env.NCCL_DEBUG", "valid string (got 1)"),
    "experiment_name_traversal.yaml": (2, "name", "letters, digits, '.', '_' or '-'"),
    "experiment_name_unicode.yaml": (2, "name", "letters, digits, '.', '_' or '-'"),
    "flag_leading_dashes.yaml": (23, "server.args.--tp-size", "without leading dashes"),
    "flag_uppercase.yaml": (11, "variants.1.args.Mem-Fraction", "lowercase letters"),
    "gpus_per_node_zero.yaml": (22, "cluster.gpus_per_node", "greater than or equal to 1"),
    "infinite_timeout.yaml": (21, "health_timeout_s", "finite number"),
    "jsonl_prompts_without_path.yaml": (18, "workloads.0.prompts.path", "needs 'path'"),
    "launcher_and_python.yaml": (24, "engines.sim.launcher", "either 'python' or 'launcher'"),
    "missing_model.yaml": (1, "model", "required field is missing"),
    "missing_model_path.yaml": (3, "model.path", "required field is missing"),
    "multi_document.yaml": (21, ROOT, "another document"),
    "nan_temperature.yaml": (18, "workloads.0.temperature", "finite number"),
    "nextn_draft_tokens_inconsistent.yaml": (13, "variants.1.speculative.num_draft_tokens", "must be num_steps + 1 = 3"),
    "nextn_draft_tokens_with_step_list.yaml": (13, "variants.1.speculative.num_draft_tokens", "num_steps is a list"),
    "nextn_steps_duplicate.yaml": (12, "variants.1.speculative.num_steps", "duplicates"),
    "nextn_steps_empty.yaml": (12, "variants.1.speculative.num_steps", "must not be empty"),
    "nextn_steps_zero.yaml": (12, "variants.1.speculative.num_steps.1", "between 1 and 16"),
    "no_load_points.yaml": (18, "load", "at least one concurrency or request_rate"),
    "non_utf8.yaml": (4, ROOT, "not valid UTF-8 (byte 0xe9"),
    "null_variant.yaml": (8, "variants.0", "valid dictionary"),
    "num_requests_negative.yaml": (17, "workloads.0.num_requests", "greater than or equal to 1 (got -5)"),
    "python_object_tag.yaml": (2, "name", "could not determine a constructor"),
    "repeats_float.yaml": (20, "repeats", "valid integer"),
    "repeats_negative.yaml": (20, "repeats", "greater than or equal to 1 (got -1)"),
    "repeats_zero.yaml": (20, "repeats", "greater than or equal to 1 (got 0)"),
    "request_rate_negative.yaml": (19, "load.request_rate.1", "positive number of requests/s"),
    "seed_too_large.yaml": (21, "seed", "less than or equal to 9223372036854775807"),
    "tab_indentation.yaml": (6, "model.engine", "'\\t'"),
    "top_level_list.yaml": (1, ROOT, "got a list"),
    "top_level_scalar.yaml": (1, ROOT, "got a str"),
    "tp_boolean.yaml": (6, "model.tp", "got a boolean"),
    "tp_larger_than_node.yaml": (6, "model.tp", "larger than cluster.gpus_per_node 8"),
    "tp_not_integer.yaml": (6, "model.tp", "valid integer"),
    "two_baselines.yaml": (11, "variants.1.baseline", "at most one variant"),
    "unclosed_flow_list.yaml": (20, "load.concurrency.1", "expected ',' or ']'"),
    "unknown_engine.yaml": (5, "model.engine", "'sglang', 'sim' or 'vllm' (got 'tgi')"),
    "unknown_isolation.yaml": (21, "isolation", "'node' or 'gpus' (got 'rack')"),
    "unknown_model_key.yaml": (7, "model.quant", "unknown field; expected one of: path, engine, tp"),
    "unknown_spec_algorithm.yaml": (11, "variants.1.speculative.algorithm", "(got 'MEDUSA')"),
    "unknown_top_key.yaml": (21, "colour", "unknown field; expected one of: version, name, model"),
    "unknown_variant_key.yaml": (9, "variants.0.tensor_parallel", "unknown field; expected one of: name, engine, tp"),
    "variant_name_slash.yaml": (9, "variants.1.name", "variant name 'a/b'"),
    "variant_name_traversal.yaml": (8, "variants.0.name", "variant name '../x'"),
    "variant_tp_larger_than_node.yaml": (9, "variants.0.tp", "larger than cluster.gpus_per_node 4"),
    "variants_not_a_list.yaml": (7, "variants", "valid list"),
    "version_2.yaml": (1, "version", "should be 1 (got 2)"),
    "workload_name_dotdot.yaml": (14, "workloads.0.name", "workload name '..'"),
    "yaml_bomb.yaml": (4, "sim.a", "anchors and aliases are not allowed"),
    "sim_knob_misspelled.yaml": (9, "sim.decode_base_msec", "unknown field; expected one of: seed, time_scale"),
    "sim_knob_out_of_range.yaml": (14, "variants.1.sim.accept_probs.1", "less than or equal to 1 (got 1.5)"),
    "tuning_option_misspelled.yaml": (13, "variants.1.tuning.options.batch_size",
                                      "unknown field; expected one of: model_config, dtype, batch_sizes, ep"),
}

VALID = """\
version: 1
name: demo
model:
  path: /models/qwen
  engine: sim
  tp: 4
variants:
  - name: baseline
  - name: nextn
    speculative:
      algorithm: NEXTN
      num_steps: [1, 2, 3]
workloads:
  - name: short
    input_tokens: 128
    output_tokens: 64
    num_requests: 8
load:
  concurrency: [1, 4]
repeats: 2
"""
"""The document every corpus file was derived from: it must load, so each file fails for its own mutation."""


def test_corpus_is_complete() -> None:
    on_disk = sorted(p.name for p in BAD_DIR.iterdir())
    assert len(on_disk) >= 30
    assert on_disk == sorted(EXPECTED)


def test_the_base_document_is_valid() -> None:
    spec = parse_spec_text(VALID, "base.yaml")
    assert [v.name for v in spec.variants] == ["baseline", "nextn"]
    assert spec.cluster.gpus_per_node == 8


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_spec_is_rejected_with_file_line_and_field(name: str) -> None:
    line, field, fragment = EXPECTED[name]
    path = BAD_DIR / name
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert (err.file, err.line, err.field) == (str(path), line, field)
    assert fragment in err.message
    text = str(err)
    assert text.startswith(f"{path}:{line}: {field or '<root>'}")
    assert "\n" not in text


def test_huge_file_is_rejected_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    filler = "# " + "x" * 98 + "\n"
    path.write_text(VALID + filler * (MAX_SPEC_BYTES // len(filler) + 10))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.file == str(path)
    assert info.value.line is not None and info.value.line > VALID.count("\n")
    assert "larger than" in info.value.message


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.file == str(path) and "cannot read file" in info.value.message


def test_tp_may_equal_a_declared_larger_node() -> None:
    spec = parse_spec_text(VALID.replace("  tp: 4", "  tp: 16") + "cluster:\n  gpus_per_node: 16\n")
    assert spec.model.tp == 16


EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml")) + sorted((REPO / "experiments").glob("*.yml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_every_shipped_experiment_validates(path: Path) -> None:
    spec = load_spec(path)
    assert spec.variants and spec.workloads
