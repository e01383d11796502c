"""Issue 15 item 7: KV-cache quantization from hf_quant_config.json beside config.json's block, exclude-list coverage,
the checkpoint fingerprint and hub revision; fixtures use Qwen3.5's own tensor names."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.plan.fairness import check_fairness  # noqa: E402
from cluster.plan.model_rules import ModelFacts  # noqa: E402
from cluster.kernel.runs import ResolvedVariant
from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402


def _edit(path: Path, fn) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def test_fixture_has_qwen35_names_not_qwen3_next() -> None:
    names = set(ck.qwen35_tensors(layers=4))
    p = "model.language_model.layers.0.linear_attn"
    assert {f"{p}.in_proj_qkv.weight", f"{p}.in_proj_z.weight", f"{p}.in_proj_b.weight",
            f"{p}.in_proj_a.weight"} <= names
    assert not any("in_proj_qkvz" in n or "in_proj_ba" in n for n in names)
    q = ck.qwen35_tensors(layers=4, hidden=64)["model.language_model.layers.3.self_attn.q_proj.weight"]
    assert q == ("BF16", [128, 64])  # gated attention: query and gate


def test_kv_cache_quant_only_in_hf_quant_config_is_found(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m", quant_in_config=True)
    _edit(d / "config.json", lambda c: c["quantization_config"].pop("kv_cache_scheme"))
    r = probe_checkpoint(str(d))
    assert r.quant.source == "config.json quantization_config"
    assert (r.quant.kv_cache_quant_algo, r.quant.kv_cache_quant_source) == ("FP8", "hf_quant_config.json")
    # so the fairness rule sees it: an unpinned KV cache would silently turn FP8 (before: probe said None)
    v = ResolvedVariant(name="b", engine="sglang", tp=1, model_path=str(d), args={"max-running-requests": 8},
                        env={}, speculative=None, is_baseline=True)
    f = check_fairness([v], {str(d): r.quant.kv_cache_quant_algo})
    assert any(x.rule == "kv-cache-dtype" and x.level == "error" for x in f)


def test_exclude_list_missing_the_router_and_mtp_fc_warns_with_module_names(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m")
    assert probe_checkpoint(str(d)).uncovered_plain_weights == {}
    _edit(d / "hf_quant_config.json", lambda c: c["quantization"].update(exclude_modules=[
        "lm_head", "model.visual*", "*shared_expert*", "*self_attn*", "*linear_attn*", "mtp.layers*"]))
    r = probe_checkpoint(str(d))
    assert r.uncovered_plain_weights == {"model.language_model.layers.*.mlp.gate": 4, "mtp.fc": 1}
    (w,) = [w.message for w in r.warnings if "not covered" in w.message]
    assert "model.language_model.layers.*.mlp.gate" in w and "mtp.fc" in w and "35156" in w


def test_fingerprint_follows_the_headers_and_the_hub_revision_is_read_not_guessed(tmp_path: Path) -> None:
    a = ck.qwen35_nvfp4(tmp_path / "a")
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = tmp_path / "hub" / "models--nvidia--Qwen3.5" / "snapshots" / rev
    shutil.copytree(a, snap)
    ra, rs = probe_checkpoint(str(a)), probe_checkpoint(str(snap))
    assert len(ra.fingerprint) == 64 and ra.fingerprint == rs.fingerprint  # same files, same fingerprint
    assert ra.hub_revision is None and rs.hub_revision == rev
    meta = a / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text(f"{'f' * 40}\nabc-etag\n1700000000.0\n")
    assert probe_checkpoint(str(a)).hub_revision == "f" * 40
    # the republished checkpoint: same names, one shared expert quantized differently → a different fingerprint
    b = ck.qwen35_nvfp4(tmp_path / "b", shared_inter=16)
    assert probe_checkpoint(str(b)).fingerprint != ra.fingerprint
    assert probe_checkpoint(str(a)).to_json()["identity"] == {"fingerprint": ra.fingerprint,
                                                              "hub_revision": "f" * 40}


def test_model_facts_from_the_qwen35_probe(tmp_path: Path) -> None:
    facts = ModelFacts.from_report(probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m"))))
    assert (facts.hybrid, facts.moe, facts.nvfp4, facts.routed_nvfp4) == (True, True, True, True)
    assert facts.dense_nvfp4_families == () and facts.routed_only_nvfp4
