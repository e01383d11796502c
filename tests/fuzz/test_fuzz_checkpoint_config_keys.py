"""Fuzz the keys of config.json and hf_quant_config.json the probe reads: any JSON value in any of them is either
used as given (the report holds exactly that value) or refused with a CheckpointError that names the key; never
read as absent, never another exception. (A wrong type read as absent was the class: model_type 7, layer_types 5,
quant_algo 4, group_size "16" passed as if missing.)"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402
from tests.fuzz.fuzzing import FUZZ, budget  # noqa: E402

from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from cluster.probe.safetensors_header import CheckpointError  # noqa: E402

KEYS = {  # (file, scope, key) -> where the report holds the value it used
    ("config.json", "", "model_type"): ("config", "model_type"),
    ("config.json", "text_config", "model_type"): ("config", "text_model_type"),
    ("config.json", "text_config", "hidden_size"): ("config", "hidden_size"),
    ("config.json", "text_config", "num_hidden_layers"): ("config", "num_hidden_layers"),
    ("config.json", "text_config", "vocab_size"): ("config", "vocab_size"),
    ("config.json", "text_config", "max_position_embeddings"): ("config", "max_position_embeddings"),
    ("config.json", "text_config", "layer_types"): ("config", "layer_types"),
    ("config.json", "text_config", "mtp_use_dedicated_embeddings"): ("config", "mtp_use_dedicated_embeddings"),
    ("hf_quant_config.json", "quantization", "quant_algo"): ("quant", "quant_algo"),
    ("hf_quant_config.json", "quantization", "kv_cache_quant_algo"): ("quant", "kv_cache_quant_algo"),
    ("hf_quant_config.json", "quantization", "group_size"): ("quant", "group_size"),
}

with tempfile.TemporaryDirectory() as _tmp:
    _model = ck.qwen35_nvfp4(Path(_tmp) / "m")
    BASE = {p.name: p.read_bytes() for p in _model.iterdir()}

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**64), st.floats(allow_nan=False),
                     st.text(max_size=8), st.sampled_from(["4", "16", "linear_attention", "full_attention"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3),
                                                                                             inner, max_size=3),
                       max_leaves=8)


def _used_as_given(got: Any, value: Any, key: str) -> bool:
    if value is None:  # null is absent in HF configs
        return True
    if key == "layer_types":
        return isinstance(value, list) and got == dict(Counter(value))
    return bool(got == value and type(got) is type(value))


@settings(FUZZ, max_examples=budget(150))
@given(where=st.sampled_from(sorted(KEYS)), value=_values)
def test_fuzz_a_read_key_is_used_as_given_or_refused_naming_it(where: tuple[str, str, str], value: Any) -> None:
    file, scope, key = where
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, data in BASE.items():
            (d / name).write_bytes(data)
        doc = json.loads(BASE[file])
        (doc[scope] if scope else doc)[key] = value
        (d / file).write_text(json.dumps(doc))
        try:
            report = probe_checkpoint(str(d))
        except CheckpointError as e:
            assert f"{scope + '.' if scope else ''}{key}" in str(e) and file in str(e), (where, value, str(e))
            return
    part, attr = KEYS[where]
    got = getattr(getattr(report, part), attr)
    assert _used_as_given(got, value, key), (where, value, got)
