"""Preflight's checkpoint rule: probe each checkpoint served and refuse NEXTN/MTP where it has no MTP weights.

The preflight that runs it, here and on the GPU node, is cluster/node/preflight.py.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from cluster.engines.registry import probes_checkpoint
from cluster.errors import PreflightError
from cluster.kernel.runs import ResolvedVariant
from cluster.probe.safetensors_header import CheckpointError
from cluster.probe.checkpoint import ProbeReport, probe_checkpoint
from cluster.config.experiment import ExperimentSpec

def _should_probe(v: ResolvedVariant, path: str) -> bool:
    if probes_checkpoint(v.engine):
        return True
    return os.path.isdir(path)


def check_speculative_support(
    spec: ExperimentSpec,
    variants: list[ResolvedVariant],
    probe: Callable[[str], ProbeReport] = probe_checkpoint,
) -> dict[str, ProbeReport]:
    """Probe each distinct model (and draft model) path once; raise PreflightError on the first unservable variant.

    Returns {path: report} for the provenance record. `spec` names the experiment in errors."""
    reports: dict[str, ProbeReport] = {}

    def get(path: str, v: ResolvedVariant, role: str) -> ProbeReport:
        if path not in reports:
            try:
                reports[path] = probe(path)
            except CheckpointError as e:
                raise PreflightError(
                    f"experiment {spec.name!r}, variant {v.name!r}: cannot probe {role} {path}: {e}",
                    file=e.file, field=e.field or role, expected=e.expected) from None
        return reports[path]

    for v in variants:
        if not _should_probe(v, v.model_path):
            continue
        report = get(v.model_path, v, "model path")
        sd = v.speculative
        if sd is not None and sd.draft_model_path and sd.algorithm != "NGRAM":
            if _should_probe(v, sd.draft_model_path):
                get(sd.draft_model_path, v, "draft_model_path")
        if sd is not None and sd.uses_builtin_mtp_head and not report.mtp.weights_present:
            raise PreflightError(_missing_head_message(spec, v, report))
        if sd is not None and sd.uses_builtin_mtp_head and report.mtp.layout_matches_architecture is False:
            raise PreflightError(
                f"experiment {spec.name!r}, variant {v.name!r}: {v.model_path} keeps its MTP weights under "
                f"{report.mtp.layout}, but SGLang loads {' or '.join(report.mtp.expected_layouts)} for "
                f"{', '.join(report.config.architectures)}: the draft would load no weights")
    return reports


def _missing_head_message(spec: ExperimentSpec, v: ResolvedVariant, report: ProbeReport) -> str:
    m = report.mtp
    algo = v.speculative.algorithm if v.speculative else "?"
    declared = (f"config.json declares {m.declared_layers} MTP layer(s) ({m.declared_in}) but "
                if m.declared else "config.json declares no MTP/NextN layers and ")
    n_layers: Optional[int] = report.config.num_hidden_layers
    wanted = [p.replace("{num_hidden_layers + i}", str(n_layers)) if n_layers is not None else p
              for p in m.expected_layouts]
    return (
        f"experiment {spec.name!r}, variant {v.name!r}: {algo} needs the checkpoint's MTP/NextN weights, but "
        f"{v.model_path} has none (verdict {m.verdict}): {declared}no {' or '.join(wanted)} tensors were found in "
        f"{'; '.join(m.looked_in[1:])}. Use a checkpoint that keeps the MTP head, or give draft_model_path "
        "with EAGLE/EAGLE3/STANDALONE."
    )
