"""Issue 29's second pass on the experiment file: server-arg values outside ArgValue, values that render no usable
argv word, flags with a numeric domain, integer fields given floats, env keys sglbench sets itself, and the field a
YAML syntax error at a new key is reported under. Each failed before its fix (red-team findings F1-F10)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from pydantic import BaseModel, ValidationError

from cluster.engines.flag_domains import FLAG_DOMAINS, flag_domain_problem
from cluster.engines.server_env import SET_BY_TUNING, SET_FOR_EVERY_SERVER, set_by_sglbench
from cluster.config.fields import _integers_only
from cluster.config.loader import _models_in, parse_spec_text
from cluster.config.experiment import ExperimentSpec
from cluster.config.fields import SpecError
from tests.unit.config.test_bad_inputs import VALID

_TUNINGS = {"flashinfer_autotune": "{kind: flashinfer_autotune}", "triton_moe": "{kind: triton_moe}"}


def _refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "x.yaml")
    return info.value


def _with_args(value: str, where: str = "server") -> str:
    if where == "server":
        return VALID + f"server:\n  args:\n    kv-cache-dtype: {value}\n"
    return VALID.replace("  - name: baseline\n", f"  - name: baseline\n    args:\n      kv-cache-dtype: {value}\n")


@pytest.mark.parametrize("where", ["server", "variant"])
@pytest.mark.parametrize("value,kind", [("{a: b}", "a mapping"), ("[{a: b}]", "a mapping in the list"),
                                        ("[[1, 2]]", "a list in the list"), ("[true, x]", "a bool in the list"),
                                        ("[null]", "a NoneType in the list")])
def test_a_value_outside_argvalue_is_named_as_such_not_as_a_union_member(value: str, kind: str, where: str) -> None:
    err = _refused(_with_args(value, where))
    assert str(err.field).endswith(".kv-cache-dtype") and not str(err.field).endswith(("bool", "int", "float", "str", "list"))
    assert f"a flag value is a string, number, boolean or a list of strings and numbers, got {kind}" in err.message
    assert "more problem" not in err.message


@pytest.mark.parametrize("value,said", [('""', "empty string"), ('"   "', "empty string"), ("[]", "empty list"),
                                        ('[x, ""]', "empty string"), ('"--port"', "read it as a flag"),
                                        ('[a, "--tp"]', "read it as a flag")])
def test_a_value_that_renders_no_usable_word_is_refused_at_its_line(value: str, said: str) -> None:
    err = _refused(_with_args(value))
    assert (err.line, err.field) == (VALID.count("\n") + 3, "server.args.kv-cache-dtype") and said in err.message


@pytest.mark.parametrize("value", ["fp8_e4m3", "-1", "[1, 2]", "true", "0.5"])
def test_ordinary_values_still_pass(value: str) -> None:
    parse_spec_text(_with_args(value))


def _domain_values(flag: str) -> Iterator[tuple[Any, bool]]:
    d = FLAG_DOMAINS[flag]
    yield d.high, True
    yield d.low + (0.5 if not d.integer else 1), True
    yield d.low, not d.low_open
    yield d.low - 1, False
    yield d.high + 1, False
    yield str(d.high), False  # quoted: refused like every numeric field
    yield [d.high], False
    if d.integer:
        yield float(d.high), False


@pytest.mark.parametrize("flag", sorted(FLAG_DOMAINS))
def test_every_flag_domain_is_held_at_validate_in_either_spelling(flag: str) -> None:
    for value, ok in _domain_values(flag):
        for spelled in (flag, flag.replace("-", "_")):
            text = VALID + f"server:\n  args:\n    {spelled}: {value!r}\n".replace("'", '"')
            if ok:
                parse_spec_text(text)
                assert flag_domain_problem(spelled, value) is None
                continue
            err = _refused(text)
            assert (err.field, err.line) == (f"server.args.{spelled}", VALID.count("\n") + 3), (value, err)
            assert FLAG_DOMAINS[flag].expected() in err.message, (value, err.message)


def test_the_reported_cases_mem_fraction_7_mrr_0_and_quoted_mrr() -> None:
    assert "out of range" in _refused(VALID + "server:\n  args:\n    mem-fraction-static: 7\n").message
    assert "out of range" in _refused(VALID + "server:\n  args:\n    max-running-requests: 0\n").message
    assert "remove the quotes" in _refused(VALID + 'server:\n  args:\n    max-running-requests: "64"\n').message
    assert flag_domain_problem("max-running-requests", False) is None  # false leaves the flag out


def _models(root: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[type[BaseModel]]:
    if root in seen:
        return
    seen.add(root)
    yield root
    for f in root.model_fields.values():
        for m in _models_in(f.annotation):
            yield from _models(m, seen)


_INT_FIELDS = [(m, name) for m in _models(ExperimentSpec, set()) for name, f in m.model_fields.items()
               if _integers_only(f.annotation)]


def test_the_walk_finds_the_integer_fields() -> None:
    names = {f"{m.__name__}.{n}" for m, n in _INT_FIELDS}
    assert {"ModelSpec.tp", "ExperimentSpec.seed", "ExperimentSpec.repeats", "LoadSpec.concurrency"} <= names


@pytest.mark.parametrize("model,name", _INT_FIELDS, ids=[f"{m.__name__}.{n}" for m, n in _INT_FIELDS])
def test_no_integer_field_takes_an_integral_float(model: type[BaseModel], name: str) -> None:
    """pydantic's lax mode reads 2.0 as 2 and refuses 2.5: an integer field took a float only when integral."""
    many = "list" in str(model.model_fields[name].annotation)
    with pytest.raises(ValidationError) as info:
        model.model_validate({name: [2.0] if many else 2.0})
    assert any(e["loc"][:1] == (name,) for e in info.value.errors()), info.value.errors()


def test_tp_2_0_reads_as_the_error_seed_1_5_gets() -> None:
    assert "expected an integer" in _refused(VALID.replace("  tp: 4", "  tp: 4.0")).message
    assert "expected an integer" in _refused(VALID + "seed: 1.5\n").message


def _env(block: str, key: str, tuning: str = "") -> str:
    text = VALID.replace("  - name: nextn\n", f"  - name: nextn\n{tuning}")
    if block == "server":
        return text + f"server:\n  env:\n    {key}: x\n"
    return text.replace("  - name: nextn\n", f"  - name: nextn\n    env:\n      {key}: x\n")


@pytest.mark.parametrize("block", ["server", "variant"])
@pytest.mark.parametrize("key", sorted(SET_FOR_EVERY_SERVER))
def test_an_env_key_sglbench_sets_for_every_server_is_refused(block: str, key: str) -> None:
    err = _refused(_env(block, key))
    assert err.field == (f"server.env.{key}" if block == "server" else f"variants.1.env.{key}")
    assert f"{key} is set by {SET_FOR_EVERY_SERVER[key]}" in err.message and "remove it" in err.message


@pytest.mark.parametrize("kind,key", [(k, key) for k, keys in SET_BY_TUNING.items() for key in keys])
def test_an_env_key_a_tuning_kind_sets_is_refused_only_beside_that_tuning(kind: str, key: str) -> None:
    parse_spec_text(_env("server", key))  # no variant tunes: the variable is the user's
    tuning = f"    tuning: {_TUNINGS[kind]}\n"
    for block in ("server", "variant"):
        err = _refused(_env(block, key, tuning))
        assert key in str(err.field) and "tuning: block" in err.message
        if block == "server":
            assert "for variant 'nextn'" in err.message


def test_the_setters_set_no_key_outside_the_list() -> None:
    """The env each engine adapter and tuning stage adds is in set_by_sglbench: the list is complete."""
    from cluster.engines.registry import get_engine
    from cluster.plan.runs import expand_variants
    from cluster.tuning.stage import autotune_run_variant, tuning_env_and_args

    for kind, tuning in [(None, "")] + [(k, f"    tuning: {t}\n") for k, t in _TUNINGS.items()]:
        text = VALID.replace("  - name: nextn\n", f"  - name: nextn\n{tuning}")
        for engine in ("sim", "sglang", "vllm"):
            spec = parse_spec_text(text.replace("engine: sim", f"engine: {engine}"))
            for v in expand_variants(spec):
                added = set(get_engine(engine).server_env(v, "0.5.10")) | set(tuning_env_and_args(v, None)[0])
                added |= set(autotune_run_variant(v, "/tmp/c").env) if kind == "flashinfer_autotune" else set()
                vllm_own = {"VLLM_SERVER_DEV_MODE"}  # set only if absent: the user's value wins, nothing is lost
                assert added - vllm_own <= set(set_by_sglbench(kind)), (engine, kind, added)


@pytest.mark.parametrize("text,field", [
    ("model:\n  path: /m\n\tengine: sim\n", "model"),
    ("version: 1\n\tname: x\n", ""),
    ("load:\n  concurrency: [1]\n  search:\n    min: 1\n\tmax: 2\n", "load.search"),
])
def test_a_syntax_error_at_a_new_key_names_the_mapping_not_the_previous_key(text: str, field: str) -> None:
    err = _refused(text)
    assert err.field == field and "invalid YAML" in err.message


def test_a_syntax_error_inside_a_value_still_names_its_key() -> None:
    assert str(_refused("model:\n  path: [a, b\n").field).startswith("model.path")


def test_sim_time_scale_zero_is_kept_it_has_a_documented_meaning() -> None:
    """F3's decision: time_scale 0 is the simulator's documented "no sleeping at all" (its knob's description in
    the schema; the tuning-stage integration test runs on it), so it stays valid; below 0 is refused."""
    assert parse_spec_text(VALID + "sim:\n  time_scale: 0\n").sim.time_scale == 0
    assert "no sleeping" in str(ExperimentSpec.model_json_schema()["$defs"]["Knobs"]["properties"]["time_scale"])
    assert _refused(VALID + "sim:\n  time_scale: -0.5\n").field == "sim.time_scale"
