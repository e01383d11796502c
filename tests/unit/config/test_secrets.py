"""The one secret predicate and its mask: names, argv forms, scrubbing by value, the spec dump, run keys."""

from __future__ import annotations

import pytest

from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.config.fields import SpecError
from cluster.config.secrets import (fingerprint, is_secret_name, mask, masked_spec_json, redact_argv, redact_env,
                                  scrub, secret_values)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HF_TOKEN", "hf_token", "db_password", "AWS_SECRET_ACCESS_KEY",
                                  "GCP_CREDENTIALS", "api-key", "--admin-api-key", "ssl-keyfile-password", "APIKEY"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max-prefill-tokens", "max-total-tokens", "TOKENIZERS_PARALLELISM",
                                  "tokenizer-path", "NCCL_DEBUG", "kv-cache-dtype", "speculative-num-draft-tokens"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_is_a_stable_fingerprint() -> None:
    assert fingerprint("abc") == "sha256:ba7816bf"
    assert mask("abc") == "<secret sha256:ba7816bf>" and mask("abd") != mask("abc")


def test_redact_argv_both_forms() -> None:
    argv = ["python", "-m", "x", "--api-key", "sk-1234", "--admin-api-key=adm-5678", "--port", "30000"]
    out = redact_argv(argv)
    assert out[4] == mask("sk-1234") and out[5] == "--admin-api-key=" + mask("adm-5678")
    assert out[6:] == ["--port", "30000"] and "sk-1234" not in " ".join(out)
    assert redact_env({"HF_TOKEN": "hf_x", "A": "1"}) == {"HF_TOKEN": mask("hf_x"), "A": "1"}


def test_scrub_by_value_reaches_keys_lists_and_text() -> None:
    vals = secret_values({"HF_TOKEN": "hf_secret_value"}, {"api-key": "sk-abcdef"}, ["--api-key", "sk-launch"])
    assert vals == {"hf_secret_value", "sk-abcdef", "sk-launch"}
    doc = {"api_key": "sk-abcdef", "cmd": ["x --api-key sk-launch"], "hf_secret_value": 1}
    out = scrub(doc, vals)
    assert "sk-" not in str(out) and "hf_secret_value" not in str(out)
    assert secret_values({"KEY": "ab"}) == frozenset()  # too short to search for in server output


SPEC = """\
version: 1
name: demo
model: {path: /m, engine: sim}
engines:
  sim: {launcher: [python, -m, cluster.sim.server, --api-key, sk-launcher-1]}
server:
  args: {api-key: sk-arg-2, max-running-requests: 8}
  env: {HF_TOKEN: hf_env_3, PLAIN: visible}
variants:
  - name: baseline
    env: {MY_SECRET: var-secret-4}
workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}]
load: {concurrency: [1]}
"""


def test_masked_spec_json_hides_every_declared_secret() -> None:
    spec = parse_spec_text(SPEC)
    dump = masked_spec_json(spec.model_dump(mode="json"))
    text = str(dump)
    for secret in ("sk-launcher-1", "sk-arg-2", "hf_env_3", "var-secret-4"):
        assert secret not in text
    assert "visible" in text and mask("hf_env_3") in text


def test_run_key_uses_the_fingerprint_and_is_unchanged_without_secrets() -> None:
    spec = parse_spec_text(SPEC)
    other = parse_spec_text(SPEC.replace("hf_env_3", "hf_env_rotated"))
    assert make_plan(spec)[0].run_key != make_plan(other)[0].run_key  # a rotated key is a different run
    plain = parse_spec_text(SPEC.replace("HF_TOKEN", "HF_HOME"))
    ident = make_plan(plain)[0].variant.identity()
    assert ident["env"]["HF_HOME"] == "hf_env_3"  # nothing masked where nothing is secret


def test_loader_never_echoes_a_secret_value() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(SPEC.replace("HF_TOKEN: hf_env_3", "HF_TOKEN: 918273645"))
    assert "918273645" not in str(info.value) and "sha256:" in str(info.value)
