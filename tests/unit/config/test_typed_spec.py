"""Typed spec boundaries: one options model per tuning kind, one knob model shared by the spec and the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.engines.registry import get_engine
from cluster.plan.runs import expand_variants, make_plan
from cluster.config.sim_knobs import Knobs, KnobError
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec
from cluster.config.variants import VariantSpec
from cluster.config.fields import SpecError
from cluster.config.tuning import BackendSweepTuning, FlashinferAutotuneTuning, TritonMoeTuning

BASE = """\
version: 1
name: typed
model: {path: /m, engine: sim, tp: 1}
sim: {time_scale: 0, seed: 3}
variants:
  - {name: base, sim: {seed: 4}}
  - {name: at, tuning: {kind: flashinfer_autotune, options: {extend: true, warmup_requests: 1}}}
  - {name: moe, tuning: {kind: triton_moe, options: {model_config: /cfg, batch_sizes: [1, 2], ep: 1}}}
  - {name: sw, tuning: {kind: backend_sweep, options: {moe_runner_backend: marlin}}}
  - {name: untuned, tuning: {kind: none}}
workloads: [{name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}]
load: {concurrency: [1]}
"""


def test_each_tuning_kind_has_its_own_options_model() -> None:
    spec = parse_spec_text(BASE)
    at, moe, sw = (spec.variants[i].tuning for i in (1, 2, 3))
    assert isinstance(at, FlashinferAutotuneTuning) and at.options.extend and at.options.warmup_requests == 1
    assert isinstance(moe, TritonMoeTuning) and moe.options.model_config_path == "/cfg"
    assert moe.options.batch_sizes == [1, 2]
    assert isinstance(sw, BackendSweepTuning) and sw.options.moe_runner_backend == ["marlin"]
    names = [v.name for v in expand_variants(spec)]
    assert names == ["base", "at", "moe", "sw-marlin", "untuned"]
    assert expand_variants(spec)[-1].tuning is None  # kind none resolves to no tuning


@pytest.mark.parametrize("text, field", [
    ("options: {extend: true, warmup_requets: 1}", "variants.1.tuning.options.warmup_requets"),
    ("options: {extend: maybe}", "variants.1.tuning.options.extend"),
    ("options: {batch_sizes: [1]}", "variants.1.tuning.options.batch_sizes"),  # a triton_moe option on autotune
])
def test_a_bad_tuning_option_names_its_line_and_field(text: str, field: str) -> None:
    bad = BASE.replace("options: {extend: true, warmup_requests: 1}", text)
    with pytest.raises(SpecError) as ei:
        parse_spec_text(bad, "t.yaml")
    assert (ei.value.line, ei.value.field) == (7, field)


def test_spec_and_simulator_share_one_knob_model() -> None:
    assert ExperimentSpec.model_fields["sim"].annotation is Knobs
    assert VariantSpec.model_fields["sim"].annotation is Knobs
    spec = parse_spec_text(BASE)
    base = expand_variants(spec)[0]
    assert base.sim.wire() == {"time_scale": 0.0, "seed": 4}  # the variant's knob over the experiment's
    env = get_engine("sim").server_env(base, None)
    assert Knobs.from_mapping(json.loads(env["SGLBENCH_SIM"])) == base.sim  # the server reads what the spec said


def test_a_knob_the_spec_refuses_the_server_refuses_too() -> None:
    with pytest.raises(SpecError) as ei:
        parse_spec_text(BASE.replace("sim: {time_scale: 0, seed: 3}", "sim: {time_scale: 0, sed: 3}"), "k.yaml")
    assert (ei.value.line, ei.value.field) == (4, "sim.sed")
    with pytest.raises(KnobError, match="unknown knob"):
        Knobs.from_mapping({"sed": 3})
    with pytest.raises(SpecError, match="got a boolean"):
        parse_spec_text(BASE.replace("time_scale: 0", "time_scale: yes"))


def test_run_keys_keep_declared_options_and_knobs_only() -> None:
    spec = parse_spec_text(BASE)
    ident = expand_variants(spec)[1].identity()
    assert ident["tuning"] == {"kind": "flashinfer_autotune", "options": {"extend": True, "warmup_requests": 1}}
    assert ident["sim"] == {"time_scale": 0.0, "seed": 3}
    assert len({r.run_key for r in make_plan(spec)}) == len(make_plan(spec))


def test_a_dumped_spec_keeps_the_experiments_sim_knobs() -> None:
    """model_dump → model_validate must not turn a variant's unset knobs into overrides of the experiment's."""
    from cluster.plan.runs import expand_variants
    from cluster.config.loader import load_spec

    spec = load_spec(Path(__file__).resolve().parents[3] / "experiments" / "demo-sim.yaml")
    data = spec.model_dump(mode="json")
    data["sim"]["time_scale"] = 0.05
    again = ExperimentSpec.model_validate(data)
    assert {v.name: v.sim.time_scale for v in expand_variants(again)} == \
        {v.name: 0.05 for v in expand_variants(spec)}
    # what a variant does set survives the round trip
    data["variants"][1]["sim"] = {"accept_probs": [0.5]}
    nextn = [v for v in expand_variants(ExperimentSpec.model_validate(data)) if v.name.startswith("nextn")]
    assert all(v.sim.accept_probs == (0.5,) or list(v.sim.accept_probs) == [0.5] for v in nextn)
    assert all(v.sim.time_scale == 0.05 for v in nextn)
