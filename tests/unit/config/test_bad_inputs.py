"""Malformed experiment YAMLs are rejected with one SpecError naming file, line and field; experiments/ all load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster.config.loader import MAX_SPEC_BYTES, load_spec, parse_spec_text
from cluster.config.fields import SpecError
from tests.checkpoints import materialise_tensor_specs

REPO = Path(__file__).resolve().parents[3]
BAD_DIR = REPO / "tests" / "data" / "bad_specs"
ROOT = ""
"""The field of a problem with the whole document (printed as <root>)."""

# file -> (line, field, a fragment of the message that says what was expected)
EXPECTED: dict[str, tuple[int, str, str]] = {
    "actors_per_server_not_dividing.yaml": (19, "load.concurrency.0", 'concurrency 1 must be a multiple of actors_per_s'),
    "anchor_alias.yaml": (9, "variants.0.sim", "anchors and aliases are not allowed"),
    "baseline_quoted_bool.yaml": (9, "variants.0.baseline", "expected a number or boolean, got the string 'ye"),
    "comments_only.yaml": (1, ROOT, "got an empty document"),
    "complex_key.yaml": (21, "<sequence key>", "unhashable key"),
    "concurrency_duplicate.yaml": (19, "load.concurrency", 'concurrency has duplicates: [4, 4]'),
    "concurrency_quoted.yaml": (19, "load.concurrency", "expected a number or boolean, got the string '1'"),
    "concurrency_zero.yaml": (19, "load.concurrency.1", "greater than or equal to 1 (got 0)"),
    "control_character.yaml": (2, ROOT, "special characters are not allowed"),
    "deep_nesting.yaml": (22, "sim.x" + ".0" * 62, "nests more than 64 levels"),
    "duplicate_key.yaml": (21, "repeats", "duplicate key"),
    "duplicate_nested_key.yaml": (7, "model.engine", "duplicate key"),
    "duplicate_variant_names.yaml": (9, "variants.1.name", "duplicate variant name 'baseline'"),
    "duplicate_workload_names.yaml": (18, "workloads.1.name", "duplicate workload name 'short'"),
    "eagle3_without_draft_path.yaml": (10, "variants.1.speculative.draft_model_path", "EAGLE3 needs draft_model_path"),
    "eagle_topk_zero.yaml": (13, "variants.1.speculative.eagle_topk", 'Input should be greater than or equal to 1'),
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
    "health_timeout_quoted.yaml": (21, "health_timeout_s", "expected a number or boolean, got the string '60"),
    "ignore_eos_quoted.yaml": (18, "workloads.0.ignore_eos", "expected a number or boolean, got the string 'fa"),
    "infinite_timeout.yaml": (21, "health_timeout_s", "finite number"),
    "input_tokens_huge.yaml": (15, "workloads.0.input_tokens", 'Input should be less than or equal to 1000000'),
    "input_tokens_quoted.yaml": (15, "workloads.0.input_tokens", "expected a number or boolean, got the string '12"),
    "isolation_number.yaml": (21, "isolation", "Input should be 'node' or 'gpus'"),
    "jsonl_prompts_without_path.yaml": (18, "workloads.0.prompts.path", "needs 'path'"),
    "launcher_and_python.yaml": (24, "engines.sim.launcher", "either 'python' or 'launcher'"),
    "launcher_empty.yaml": (23, "engines.sim.launcher", "'launcher' must be a non-empty list of argv word"),
    "load_missing.yaml": (1, "load", 'required field is missing'),
    "max_concurrency_zero.yaml": (21, "load.max_concurrency", 'Input should be greater than or equal to 1'),
    "min_prefix_negative.yaml": (22, "correctness.min_prefix_tokens", 'Input should be greater than or equal to 0'),
    "missing_model.yaml": (1, "model", "required field is missing"),
    "missing_model_path.yaml": (3, "model.path", "required field is missing"),
    "multi_document.yaml": (21, ROOT, "another document"),
    "name_missing.yaml": (1, "name", 'required field is missing'),
    "nan_temperature.yaml": (18, "workloads.0.temperature", "finite number"),
    "negative_temperature.yaml": (18, "workloads.0.temperature", 'Input should be greater than or equal to 0'),
    "nextn_draft_tokens_inconsistent.yaml": (13, "variants.1.speculative.num_draft_tokens", "must be num_steps + 1 = 3"),
    "nextn_draft_tokens_with_step_list.yaml": (13, "variants.1.speculative.num_draft_tokens", "num_steps is a list"),
    "nextn_steps_duplicate.yaml": (12, "variants.1.speculative.num_steps", "duplicates"),
    "nextn_steps_empty.yaml": (12, "variants.1.speculative.num_steps", "must not be empty"),
    "nextn_steps_zero.yaml": (12, "variants.1.speculative.num_steps.1", "greater than or equal to 1 (got 0)"),
    "no_load_points.yaml": (18, "load", "at least one concurrency or request_rate"),
    "non_utf8.yaml": (4, ROOT, "not valid UTF-8 (byte 0xe9"),
    "null_variant.yaml": (8, "variants.0", "valid dictionary"),
    "num_requests_negative.yaml": (17, "workloads.0.num_requests", "greater than or equal to 1 (got -5)"),
    "num_steps_list_quoted.yaml": (12, "variants.1.speculative.num_steps", "expected a number or boolean, got the string '2'"),
    "num_steps_quoted.yaml": (12, "variants.1.speculative.num_steps", "expected a number or boolean, got the string '3'"),
    "output_tokens_zero.yaml": (16, "workloads.0.output_tokens", 'Input should be greater than or equal to 1'),
    "owned_arg_host.yaml": (23, "server.args.host", "server arg 'host' is set by the spec; use nothin"),
    "owned_arg_model.yaml": (10, "variants.0.args.model", "server arg 'model' is set by the spec; use model"),
    "owned_arg_model_path.yaml": (10, "variants.0.args.model-path", "server arg 'model-path' is set by the spec; use"),
    "owned_arg_served_model_name.yaml": (10, "variants.0.args.served-model-name", "server arg 'served-model-name' is set by the spe"),
    "owned_arg_spec_algorithm_without_block.yaml": (10, "variants.0.args.speculative-algorithm", "server arg 'speculative-algorithm' is set by the"),
    "owned_arg_spec_draft_underscore.yaml": (23, "server.args.speculative_draft_model_path", "server arg 'speculative_draft_model_path' is set"),
    "owned_arg_spec_steps_beside_block.yaml": (14, "variants.1.args.speculative-num-steps", "server arg 'speculative-num-steps' is set by the"),
    "owned_arg_tensor_parallel_size.yaml": (23, "server.args.tensor-parallel-size", "server arg 'tensor-parallel-size' is set by the"),
    "owned_arg_tp.yaml": (10, "variants.0.args.tp", "server arg 'tp' is set by the spec; use tp (mode"),
    "owned_arg_tp_size.yaml": (23, "server.args.tp-size", "server arg 'tp-size' is set by the spec; use tp"),
    "python_object_tag.yaml": (2, "name", "YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"),
    "repeats_float.yaml": (20, "repeats", "expected an integer, got the number 2.5"),
    "repeats_negative.yaml": (20, "repeats", "greater than or equal to 1 (got -1)"),
    "repeats_quoted.yaml": (20, "repeats", "expected a number or boolean, got the string '2'"),
    "repeats_too_many.yaml": (20, "repeats", 'Input should be less than or equal to 1000'),
    "repeats_zero.yaml": (20, "repeats", "greater than or equal to 1 (got 0)"),
    "request_rate_negative.yaml": (19, "load.request_rate.1", "greater than 0 (got -0.5)"),
    "secret_env_not_string.yaml": (23, "server.env.HF_TOKEN", '(got <secret sha256:'),
    "seed_quoted.yaml": (21, "seed", "expected a number or boolean, got the string '7'"),
    "seed_too_large.yaml": (21, "seed", "less than or equal to 9223372036854775807"),
    "slo_zero.yaml": (22, "slo.ttft_ms", 'Input should be greater than 0'),
    "tab_indentation.yaml": (6, "model", "'\\t'"),
    "template_axis_names_clash.yaml": (18, "workloads.0.prompts.chat_template_kwargs", "both named 'style-a-b' once sanitised"),
    "temperature_quoted.yaml": (18, "workloads.0.temperature", "expected a number or boolean, got the string '0."),
    "text_prompts_without_path.yaml": (18, "workloads.0.prompts.path", "prompt source 'text' needs 'path'"),
    "top_level_list.yaml": (1, ROOT, "got a list"),
    "top_level_scalar.yaml": (1, ROOT, "got a str"),
    "tp_boolean.yaml": (6, "model.tp", "got a boolean"),
    "tp_larger_than_node.yaml": (6, "model.tp", "larger than cluster.gpus_per_node 8"),
    "tp_not_integer.yaml": (6, "model.tp", "valid integer"),
    "tp_quoted.yaml": (6, "model.tp", "expected a number or boolean, got the string '4'"),
    "two_baselines.yaml": (11, "variants.1.baseline", "at most one variant"),
    "unclosed_flow_list.yaml": (20, "load.concurrency.1", "expected ',' or ']'"),
    "unknown_api.yaml": (18, "workloads.0.api", "Input should be 'native', 'completions' or 'chat"),
    "unknown_engine.yaml": (5, "model.engine", "'sglang', 'sim' or 'vllm' (got 'tgi')"),
    "unknown_engine_launcher.yaml": (22, "engines.tgi", "Input should be 'sglang', 'sim' or 'vllm'"),
    "unknown_isolation.yaml": (21, "isolation", "'node' or 'gpus' (got 'rack')"),
    "unknown_model_key.yaml": (7, "model.quant", "unknown field; expected one of: path, engine, tp"),
    "unknown_order.yaml": (21, "order", "Input should be 'grouped' or 'interleaved'"),
    "unknown_prompt_source.yaml": (19, "workloads.0.prompts.source",
                                   "unknown prompt source; expected one of: random_ids, jsonl, text, sharegpt, messages, trace (got 'huggingface')"),
    "unknown_slo_key.yaml": (22, "slo.itl_ms", 'unknown field; expected one of: ttft_ms, tpot_ms'),
    "unknown_spec_algorithm.yaml": (11, "variants.1.speculative.algorithm", "(got 'MEDUSA')"),
    "unknown_top_key.yaml": (21, "colour", "unknown field; expected one of: version, name, model"),
    "unknown_tuning_kind.yaml": (10, "variants.1.tuning", 'unknown tuning kind; expected one of: flashinfer'),
    "unknown_variant_key.yaml": (9, "variants.0.tensor_parallel", "unknown field; expected one of: name, engine, tp"),
    "variant_name_slash.yaml": (9, "variants.1.name", "variant name 'a/b'"),
    "variant_name_traversal.yaml": (8, "variants.0.name", "variant name '../x'"),
    "variant_tp_larger_than_node.yaml": (9, "variants.0.tp", "larger than cluster.gpus_per_node 4"),
    "variant_tp_zero.yaml": (9, "variants.0.tp", 'Input should be greater than or equal to 1'),
    "variants_not_a_list.yaml": (7, "variants", "valid list"),
    "version_2.yaml": (1, "version", "should be 1 (got 2)"),
    "vocab_size_too_small.yaml": (19, "workloads.0.prompts.vocab_size", 'Input should be greater than or equal to 16'),
    "warmup_float_string.yaml": (21, "warmup_requests", "expected a number or boolean, got the string '2."),
    "workload_name_dotdot.yaml": (14, "workloads.0.name", "workload name '..'"),
    "workloads_empty.yaml": (13, "workloads", 'List should have at least 1 item after validatio'),
    "yaml_bomb.yaml": (4, "sim.a", "anchors and aliases are not allowed"),
    "sim_knob_misspelled.yaml": (9, "sim.decode_base_msec", "unknown field; expected one of: seed, time_scale"),
    "sim_knob_out_of_range.yaml": (14, "variants.1.sim.accept_probs.1", "less than or equal to 1 (got 1.5)"),
    "tuning_option_misspelled.yaml": (13, "variants.1.tuning.options.batch_size",
                                      "unknown field; expected one of: model_config, dtype, batch_sizes, ep"),
    # issue 29's classes: tracebacks, silent accepts and wrong messages at the experiment-file boundary
    "nul_in_path.yaml": (4, "model.path", "contains a NUL byte at character 12"),
    "integer_past_digit_limit.yaml": (21, "seed", "has more digits than Python converts (4300)"),
    "sim_knob_quoted.yaml": (22, "sim.decode_base_ms", "(got '12.5'): a quoted number is a string in YAML"),
    "concurrency_astronomical.yaml": (19, "load.concurrency.1", "less than or equal to 65536 (got 1000000000000)"),
    "port_float.yaml": (10, "variants.0.args.port", "'port' 8000.0 is not a TCP port: expected an integer 1-65535"),
    "port_out_of_range.yaml": (10, "variants.0.args.port", "'port' 70000 is not a TCP port: expected an integer 1-65535"),
    "packed_variants_same_port.yaml": (13, "variants.1.args.port", "port 8000 is fixed for 'nextn' and for variants.0"),
    "name_dotdot_inside.yaml": (8, "variants.0.name", "without '..'"),
    "output_unknown_scheme.yaml": (21, "output", "has the URI scheme 's4', which cannot be opened here"),
    "env_value_newline.yaml": (23, "server.env.NCCL_DEBUG", "contains a newline at character 4"),
    "merge_key.yaml": (22, "server.<<", "YAML merge keys (<<) are not allowed"),
    "flag_two_spellings.yaml": (24, "server.args.mem_fraction_static", "also given as 'mem-fraction-static'"),
    "flag_two_spellings_across_merge.yaml": (10, "variants.0.args.mem_fraction_static",
                                             "the flag server.args gives as 'mem-fraction-static'"),
    "baseline_expands_into_several.yaml": (13, "variants.1.baseline",
                                           "a baseline must be a single variant, but 'nextn' expands into 3"),
    "flag_string_boolean.yaml": (23, "server.args.enable-metrics", "is the string 'false': a boolean flag is written"),
    "boolean_given_mapping.yaml": (22, "telemetry.enabled", "Input should be a valid boolean (got a mapping)"),
    "key_read_as_boolean.yaml": (24, "server.env.yes", "key 'yes' is read by YAML as a bool"),
    "key_read_as_null.yaml": (24, "server.env.null", "key 'null' is read by YAML as a null"),
    "expanded_name_collides.yaml": (10, "variants.2.name", "'nextn-2' is produced twice: by variants.1 ('nextn-2') and "
                                    "variants.2 ('nextn')"),
    "binary_tag.yaml": (2, "name", "!!binary values are not allowed"),
    "backend_sweep_all_excluded.yaml": (14, "variants.1.tuning.options.exclude", "exclude leaves no back-end pair"),
    "yaml11_octal_number.yaml": (21, "warmup_requests", "'010' is an octal number in YAML 1.1"),
    "variant_names_differ_in_case.yaml": (9, "variants.1.name", "'Baseline' differs from 'baseline' only in case"),
    "arg_value_mapping.yaml": (23, "server.args.kv-cache-dtype", "a flag value is a string, number, boolean or a list"),
    "arg_value_empty_string.yaml": (23, "server.args.kv-cache-dtype", "is an empty string: no flag takes an empty"),
    "arg_value_reads_as_flag.yaml": (23, "server.args.kv-cache-dtype", "parser would read it as a flag"),
    "arg_out_of_flag_domain.yaml": (24, "server.args.mem-fraction-static", "expected a number > 0 and <= 1"),
    "integer_field_given_float.yaml": (6, "model.tp", "expected an integer, got the number 2.0"),
    "env_set_by_sglbench.yaml": (24, "server.env.CUDA_VISIBLE_DEVICES", "is set by Ray"),
    # issue 37: a field another field makes meaningless (cluster/config/relevance.py, docs/field-walk.md)
    "max_concurrency_on_closed_loop.yaml": (20, "load.max_concurrency", "shapes open-loop points (request_rate"),
    "gamma_arrivals_on_concurrency_points.yaml": (20, "load.arrival", "arrival shapes open-loop points (request_rate"),
    "arrival_cv_with_trace_arrivals.yaml": (22, "load.arrival_cv", "arrival_cv is for arrival: gamma (arrival: trace"),
    "repeats_until_accept_length_without_speculative.yaml": (17, "repeats.until.metric",
                                                             "no variant sets variants[].speculative"),
    "repeats_until_tpot_one_output_token.yaml": (21, "repeats.until.metric", "but workloads.0.output_tokens is 1"),
    "concurrency_above_request_count.yaml": (19, "load.concurrency.1", "concurrency 16 is above workloads.0.num_requ"),
    "request_rate_once_in_31_years.yaml": (19, "load.request_rate.0", "a window may take at most 86400 s (one day)"),
    "eval_prompt_field_is_answer_field.yaml": (22, "correctness.eval.answer_field", "answer_field is prompt_field"),
    "dataset_output_on_sim_without_tokenizer.yaml": (16, "workloads.0.output_tokens",
                                                     "model.path 'sim://qwen' is simulated and has none"),
    "engine_launcher_for_unused_engine.yaml": (22, "engines.vllm", "no variant runs on vllm"),
    "sim_engine_version.yaml": (22, "engines.sim.version", "engines.sim.version would be ignored"),
    "interleaved_with_one_repeat.yaml": (21, "order", "but repeats is 1"),
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


# ---------------------------------------------------------------------------------------------------- the CLI
# Every corpus file through the command line as a user meets it: exit code 2, one `error:` line naming the file and
# the field, no traceback, within a timeout, and nothing written (the working directory is left as it was).

INPUTS_DIR = REPO / "tests" / "data" / "bad_inputs"
"""One directory per case: spec.yaml (its first line `# expect: command=... exit=... file=... field=... message=...`)
beside the prompt files and checkpoints it names. Each fails at validate/plan, before any server would start."""
INPUT_CASES = sorted(p.name for p in INPUTS_DIR.iterdir()) if INPUTS_DIR.is_dir() else []


def _expectation(spec: Path) -> dict[str, str]:
    head = spec.read_text().splitlines()[0]
    assert head.startswith("# expect: "), head
    keys = ("command", "exit", "file", "field", "message")
    out: dict[str, str] = {}
    rest = head.removeprefix("# expect: ")
    for i, k in enumerate(keys):
        assert rest.startswith(f"{k}="), (k, rest)
        rest = rest[len(k) + 1:]
        end = rest.find(f" {keys[i + 1]}=") if i + 1 < len(keys) else len(rest)
        out[k], rest = rest[:end], rest[end + 1:]
    return out


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if not p.is_symlink()}


def _invoke(argv: list[str]) -> tuple[int, str]:
    from typer.testing import CliRunner

    from cluster.cli import app

    res = CliRunner().invoke(app, argv)
    return res.exit_code, res.output


def test_corpus_has_more_than_100_files() -> None:
    files = [p for d in (BAD_DIR, INPUTS_DIR) for p in d.rglob("*") if p.is_file()]
    assert len(files) > 100, len(files)
    assert len(INPUT_CASES) >= 30


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_validate_refuses_bad_spec(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line, field, _ = EXPECTED[name]
    monkeypatch.chdir(tmp_path)
    code, out = _invoke(["validate", str(BAD_DIR / name)])
    assert code == 2, out
    assert "Traceback" not in out
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and name in errors[0] and (field or "<root>") in errors[0], out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", INPUT_CASES)
def test_bad_input_is_refused_before_any_server(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / case
    shutil.copytree(INPUTS_DIR / case, work, symlinks=True)
    materialise_tensor_specs(work)
    want = _expectation(work / "spec.yaml")
    before = _snapshot(tmp_path)
    monkeypatch.chdir(work)
    code, out = _invoke([want["command"], "spec.yaml"])
    assert code == int(want["exit"]), out
    assert "Traceback" not in out and "bug in sglbench" not in out, out
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, out
    for key in ("file", "field", "message"):
        assert want[key] in errors[0], (key, want[key], errors[0])
    assert _snapshot(tmp_path) == before, "the refused command wrote something"
