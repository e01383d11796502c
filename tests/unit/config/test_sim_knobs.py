"""The spec's `sim:` knobs are as strict as every other field: a quoted number is refused wherever it stands (a knob,
a list item, a mapping value), in the YAML and in the simulated server's SGLBENCH_SIM JSON alike."""

from __future__ import annotations

import pytest

from cluster.config.sim_knobs import KnobError, Knobs
from cluster.config.loader import parse_spec_text
from cluster.config.fields import SpecError
from tests.unit.config.test_bad_inputs import VALID


@pytest.mark.parametrize(("block", "field"), [
    ("  decode_base_ms: '12'\n", "sim.decode_base_ms"),
    ("  seed: '7'\n", "sim.seed"),
    ("  accept_probs: [0.9, '0.5']\n", "sim.accept_probs.1"),
    ("  category_accept_probs: {code: ['0.9']}\n", "sim.category_accept_probs.code.0"),
    ("  backend_speed_factors: {triton: '0.9'}\n", "sim.backend_speed_factors.triton"),
    ("  time_scale: 1.0e+9\n", "sim.time_scale"),
    ("  max_total_num_tokens: 4294967296\n", "sim.max_total_num_tokens"),
])
def test_a_quoted_or_out_of_domain_knob_is_refused(block: str, field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID + "sim:\n" + block, "x.yaml")
    assert (info.value.line, info.value.field) == (22, field)


def test_the_server_side_json_is_as_strict() -> None:
    with pytest.raises(KnobError) as info:
        Knobs.from_mapping({"decode_base_ms": "12"})
    assert info.value.field == "decode_base_ms"
    assert Knobs.from_mapping({"decode_base_ms": 12, "accept_probs": [1, 0.5]}).decode_base_ms == 12.0
