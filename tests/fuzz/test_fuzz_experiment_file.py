"""Fuzz the experiment-file boundary: every shipped experiments/*.yaml (and a few bad_specs) mutated in its bytes,
its structure (keys dropped, duplicated, re-typed; deep nesting; anchors and merge keys), its numbers (huge,
negative, float, quoted, NaN, inf, 5000 digits) and its encoding (BOM, CRLF, NUL, U+2028, non-UTF-8).

`load_spec` either returns a spec, whose plan then builds or is refused with a UserError, or raises this project's
SpecError naming the file; never anything else, and within a deadline. The same document read with a BOM, with CRLF
line ends and as written is the same spec.
"""

from __future__ import annotations

import pathlib
import re
import time
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.dataset.store import safe_name
from cluster.engines.flag_domains import flag_domain_problem
from cluster.engines.server_env import set_by_sglbench
from cluster.errors import UserError
from cluster.plan.inputs import fixed_port
from cluster.plan.runs import expand_variants, make_plan
from cluster.kernel.runs import ResolvedVariant
from cluster.config.loader import load_spec
from cluster.config.repeats import planned_repeats
from cluster.config.locations import DATASET_SCHEMES, control_character
from cluster.config.experiment import ExperimentSpec
from cluster.config.fields import SpecError
from cluster.config.server import arg_flag
from tests.fuzz.fuzzing import FUZZ, budget

REPO = pathlib.Path(__file__).resolve().parents[2]
SEEDS = sorted((REPO / "experiments").glob("*.yaml")) + [
    REPO / "tests" / "data" / "bad_specs" / n for n in (
        "packed_variants_same_port.yaml", "baseline_expands_into_several.yaml", "flag_two_spellings.yaml",
        "expanded_name_collides.yaml", "backend_sweep_all_excluded.yaml")]
TEXTS = [p.read_text() for p in SEEDS]
# Budgets (CI, SGLBENCH_FUZZ_EXAMPLES=150): 400 examples each for bytes and structure, 300 for numbers (a load is a few ms),
# 40 for the encodings (seven kinds); scripts/fuzz.sh scales them all.
DEADLINE_S = 5.0
"""Loading one fuzzed file (a few KB) past this is a finding: a hang or a super-linear path."""
MAX_PLANNED_RUNS = 2000
"""An accepted spec is also planned when its plan is at most this many runs (each run key is a hash)."""

NUMBERS = st.sampled_from([
    "0", "-1", "-0", "1e999", "-1e999", ".nan", ".inf", "-.inf", "NaN", "1.5", "8000.0", "'8'", '"3"', "'1e3'",
    "1_000", "0x7fffffffffffffff", "0o17", "0b101", "1:30:00", "9" * 5000, "0x" + "f" * 5000, "1" + "0" * 12,
    "-" + "9" * 20, "2e308", "4.9e-324", "65536", "65535", "70000", "true", "null", "~", "[]", "{}", "yes"])
SCALARS = NUMBERS | st.sampled_from([
    '"a\\0b"', '"x\\ny"', '"\\u2028"', "'..'", "a..b", "s4://bucket/x", "s3:/bucket", "file:///tmp/r", "hf://m",
    "'false'", "'true'", "'on'", "2024-01-01", "!!binary aGk=", "!!set {a, b}", "!!python/none ''", "&a 1", "*a",
    "{<<: {a: 1}}", "{a: {b: {c: 1}}}", '""', "' '", "'--port'", "[]", "[a, '']", "7", "2.0", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"])
KEYS = st.sampled_from(["<<", "yes", "null", "1", "port", "mem_fraction_static", "mem-fraction-static", "name",
                        "baseline", "args", "num_steps", "concurrency", "? [a]", "'<<'", "enable-metrics", "sim",
                        "decode_base_ms", "output", "env", "NCCL_DEBUG", "max-running-requests", "kv-cache-dtype",
                        "CUDA_VISIBLE_DEVICES", "SGLBENCH_SIM", "SGLANG_CACHE_DIR"])
SPECIAL = st.sampled_from(["\x00", "\ufeff", "\u2028", "\u2029", "\x85", "\r", "\r\n", "\t", "\x1b", "\ud7ff", "é"])
_NUMBER_RE = re.compile(r"(?<![\w.-])-?\d[\d_.eE+-]*(?![\w.-])")


def _check(path: pathlib.Path, data: bytes) -> None:
    path.write_bytes(data)
    start = time.monotonic()
    try:
        spec = load_spec(path)
    except SpecError as e:
        assert e.file == str(path) and str(e).startswith(str(path)), e
        assert "\n" not in str(e), repr(str(e))
    except UserError as e:  # noqa: PT017 - any other boundary error must still name the file
        assert str(path) in str(e), e
    else:
        assert time.monotonic() - start < DEADLINE_S
        assert isinstance(spec, ExperimentSpec)
        try:
            variants = expand_variants(spec)
            runs = len(variants) * len(spec.workloads) * planned_repeats(spec.repeats) * (
                len(spec.load.concurrency) + len(spec.load.request_rate) + 1)
            if runs <= MAX_PLANNED_RUNS:  # a legal 1000-repeat plan of 40,000 runs takes seconds to key
                make_plan(spec)
        except UserError:
            pass
        else:
            _accepted_is_usable(spec, variants)
        return
    assert time.monotonic() - start < DEADLINE_S


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "chat_template_kwargs":
                yield from _strings(k, f"{where}.{k}")
                yield from _strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}.{i}")


def _accepted_is_usable(spec: ExperimentSpec, variants: list[ResolvedVariant]) -> None:
    """What validate accepts, the plan can use as given (the silent accepts of issue 29, as properties)."""
    for where, text in _strings(spec.model_dump(mode="json"), ""):
        assert control_character(text) is None, (where, text)
    names = [v.name for v in variants]
    assert len({n.casefold() for n in names}) == len(names), names
    assert sum(v.is_baseline for v in variants) == 1, [(v.name, v.is_baseline) for v in variants]
    for name in names + [spec.name] + [w.name for w in spec.workloads]:
        safe_name(name, "name")
    ports = []
    for v in variants:
        flags = [k.replace("_", "-") for k in v.args]
        assert len(set(flags)) == len(flags), v.args
        for key, value in v.args.items():
            assert not (isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off")), key
            words = value if isinstance(value, list) else [value]
            assert words, (key, value)  # an empty list renders the flag with no value
            for w in words:  # every value renders one usable argv word (or a bare/omitted flag)
                assert not isinstance(w, (dict, list)) and not (isinstance(value, list) and isinstance(w, bool)), key
                assert not (isinstance(w, str) and (not w.strip() or w.startswith("--"))), (key, w)
            assert flag_domain_problem(key, value) is None, (key, value)
        owned = set_by_sglbench(v.tuning.kind if v.tuning is not None else None)
        assert not set(v.env) & set(owned), v.env
        port = fixed_port(v)
        if arg_flag(v.args, "port") is not None:
            assert port is not None and 1 <= port <= 65535, v.args
            ports.append(port)
    if spec.isolation == "gpus":
        assert len(set(ports)) == len(ports), ports
    if "://" in spec.output:
        assert spec.output.split("://")[0] in DATASET_SCHEMES, spec.output


def _lines(draw: st.DrawFn) -> tuple[int, list[str]]:
    i = draw(st.integers(0, len(TEXTS) - 1))
    return i, TEXTS[i].splitlines(keepends=True)


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    data = bytearray(TEXTS[draw(st.integers(0, len(TEXTS) - 1))].encode())
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "special"]))
        if kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif kind == "replace" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        else:
            data[pos:pos] = draw(SPECIAL).encode("utf-8", "surrogatepass")
    return bytes(data)


@st.composite
def structure_mutations(draw: st.DrawFn) -> bytes:
    _, lines = _lines(draw)
    for _ in range(draw(st.integers(1, 3))):
        body = [j for j, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")]
        j = draw(st.sampled_from(body))
        line = lines[j]
        indent = line[: len(line) - len(line.lstrip())]
        kind = draw(st.sampled_from(["drop", "duplicate", "retype", "new_key", "nest", "anchor"]))
        if kind == "drop":
            del lines[j]
        elif kind == "duplicate":
            lines.insert(j, line)
        elif kind == "retype" and ":" in line:
            lines[j] = line.split(":", 1)[0] + ": " + draw(SCALARS) + "\n"
        elif kind == "new_key":
            lines.insert(j, f"{indent}{draw(KEYS)}: {draw(SCALARS)}\n")
        elif kind == "nest":
            depth = draw(st.integers(1, 80))
            lines.insert(j, indent + "x: " + "[" * depth + "1" + "]" * depth + "\n")
        else:
            lines.insert(j, f"{indent}anchored: &a {{k: 1}}\n{indent}again: *a\n")
    return "".join(lines).encode("utf-8", "surrogatepass")


@st.composite
def number_mutations(draw: st.DrawFn) -> bytes:
    i = draw(st.integers(0, len(TEXTS) - 1))
    text = TEXTS[i]
    spans = [m.span() for m in _NUMBER_RE.finditer(text)]
    for _ in range(draw(st.integers(1, 3))):
        if not spans:
            break
        a, b = draw(st.sampled_from(spans))
        text = text[:a] + draw(NUMBERS) + text[b:]
        spans = [m.span() for m in _NUMBER_RE.finditer(text)]
    return text.encode()


@st.composite
def encodings(draw: st.DrawFn) -> bytes:
    text = TEXTS[draw(st.integers(0, len(TEXTS) - 1))]
    how = draw(st.sampled_from(["bom", "crlf", "utf16", "latin1", "nul", "u2028", "cr"]))
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if how == "crlf":
        return text.replace("\n", "\r\n").encode()
    if how == "utf16":
        return text.encode("utf-16")
    if how == "latin1":
        return (text + "# café\n").encode("latin-1")
    if how == "cr":
        return text.replace("\n", "\r").encode()
    pos = draw(st.integers(0, len(text)))
    return (text[:pos] + ("\x00" if how == "nul" else "\u2028") + text[pos:]).encode()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("fuzz") / "experiment.yaml"


@settings(FUZZ, max_examples=budget(400))
@given(data=byte_mutations())
def test_mutated_bytes_end_in_a_spec_or_a_spec_error(target: pathlib.Path, data: bytes) -> None:
    _check(target, data)


@settings(FUZZ, max_examples=budget(400))
@given(data=structure_mutations())
def test_mutated_structure_ends_in_a_spec_or_a_spec_error(target: pathlib.Path, data: bytes) -> None:
    _check(target, data)


@settings(FUZZ, max_examples=budget(300))
@given(data=number_mutations())
def test_mutated_numbers_end_in_a_spec_or_a_spec_error(target: pathlib.Path, data: bytes) -> None:
    _check(target, data)


@settings(FUZZ, max_examples=budget(40))
@given(data=encodings())
def test_other_encodings_end_in_a_spec_or_a_spec_error(target: pathlib.Path, data: bytes) -> None:
    _check(target, data)


@pytest.mark.parametrize("path", SEEDS[:7], ids=[p.name for p in SEEDS[:7]])
def test_bom_and_crlf_give_the_same_spec(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    text = path.read_text()
    specs: list[Any] = []
    for name, data in (("plain", text.encode()), ("bom", b"\xef\xbb\xbf" + text.encode()),
                       ("crlf", text.replace("\n", "\r\n").encode())):
        p = tmp_path / f"{name}.yaml"
        p.write_bytes(data)
        specs.append(load_spec(p))
    assert specs[0] == specs[1] == specs[2]
    assert yaml.safe_load(text) is not None
