"""Issue 15 item 6: a back-end sweep on a checkpoint whose only NVFP4 modules are routed experts collapses the
--fp4-gemm-backend duplicates (the same server twice), says why, and keeps every other variant and its run keys."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.plan.model_rules import ModelFacts  # noqa: E402
from cluster.plan.runs import expand_variants, make_plan  # noqa: E402
from cluster.plan.sweep_collapse import collapse_fp4_duplicates, undecided_note  # noqa: E402
from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from cluster.config.loader import load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
STUDY = REPO / "experiments" / "qwen35-397b-nvfp4-sm120.yaml"


def test_routed_only_nvfp4_collapses_the_fp4_half_of_the_sweep(tmp_path: Path) -> None:
    spec = load_spec(STUDY)
    facts = {spec.model.path: ModelFacts.from_report(probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m"))))}
    variants = expand_variants(spec)
    kept, notes = collapse_fp4_duplicates(variants, facts)
    dropped = {v.name for v in variants} - {v.name for v in kept}
    assert dropped == {"sweep-fi_cutlass-fi_cutlass", "sweep-marlin-fi_cutlass"}
    assert len(notes) == 2 and all("only the routed experts" in n and "runs no GEMM" in n for n in notes)
    assert "same server as sweep-marlin-fi_cudnn" in next(n for n in notes if n.startswith("sweep-marlin"))
    full = {p.run_key: p for p in make_plan(spec)}
    kept_names = {v.name for v in kept}
    part = make_plan(spec, keep=lambda v: v.name in kept_names)
    assert len(part) == len(full) - 2 * 4 * 3  # two variants x four loads x three repeats
    assert all(p.run_key in full for p in part)  # the kept runs keep their keys (resumable)
    assert undecided_note(kept, facts) is None


def test_dense_nvfp4_or_no_probe_keeps_the_sweep() -> None:
    spec = load_spec(STUDY)
    variants = expand_variants(spec)
    dense = ModelFacts(hybrid=True, moe=True, nvfp4=True, routed_nvfp4=True,
                       dense_nvfp4_families=("model.language_model.layers.*.mlp.shared_expert.gate_proj",))
    assert collapse_fp4_duplicates(variants, {spec.model.path: dense}) == (variants, [])
    assert collapse_fp4_duplicates(variants, None) == (variants, [])
    note = undecided_note(variants, None)
    assert note is not None and "not probed here" in note
