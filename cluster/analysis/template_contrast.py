"""Acceptance per chat template setting: where a workload expanded over a template variable (`enable_thinking:
[true, false]`, cluster/config/template_settings.py) and a speculative variant ran two or more of its settings, one
line per variant contrasting the settings' accept length (tokens per verify step, mean over its ok runs at every
load point). The per-setting tables themselves are compare's and recommend's, one per expanded workload."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from cluster.analysis.results import Results
from cluster.config.experiment import ExperimentSpec
from cluster.config.template_settings import expand_workload
from cluster.errors import SglbenchError


@dataclass(frozen=True)
class SettingAcceptance:
    """One setting's accept length for one variant."""

    setting: str
    workload: str
    accept_length: float
    runs: int


@dataclass(frozen=True)
class SettingContrast:
    """A declared workload's settings side by side for one variant (two or more settings measured)."""

    declared: str
    variant: str
    settings: tuple[SettingAcceptance, ...]

    def line(self) -> str:
        first = self.settings[0]
        parts = ", ".join(f"{s.setting} {s.accept_length:.2f} ({s.runs} run{'s' if s.runs != 1 else ''})"
                          for s in self.settings)
        ratios = "; ".join(f"{s.setting}/{first.setting} ×{s.accept_length / first.accept_length:.3f}"
                           for s in self.settings[1:])
        return (f"acceptance by chat template setting, {self.declared} / {self.variant}: {parts} tokens per verify "
                f"step (mean over ok runs); {ratios}")


def setting_contrasts(results: Results) -> list[SettingContrast]:
    """Every (declared workload with a template axis, variant) with accept lengths for two or more settings."""
    try:
        spec = results.stored_spec(ExperimentSpec)
    except SglbenchError:  # an older dataset's spec that does not validate here: no line (compare's note says why)
        return []
    if spec is None:
        return []
    runs = results.runs()
    if runs.empty or "m_accept_length" not in runs.columns:
        return []
    ok = runs[runs["status"] == "ok"]
    out = []
    for w in spec.workloads:
        expanded = [x for x in expand_workload(w) if x.template_setting() is not None]
        if len(expanded) < 2:
            continue
        for variant in dict.fromkeys(ok["variant"].astype(str)):
            found = []
            for x in expanded:
                vals = pd.to_numeric(ok[(ok["variant"] == variant) & (ok["workload"] == x.name)]["m_accept_length"],
                                     errors="coerce").dropna()
                vals = vals[vals.map(math.isfinite)]
                if len(vals):
                    found.append(SettingAcceptance(str(x.template_setting()), x.name, float(vals.mean()), len(vals)))
            if len(found) >= 2:
                out.append(SettingContrast(w.name, variant, tuple(found)))
    return out


def contrast_lines(results: Results) -> list[str]:
    """The printed lines (compare and recommend close with them)."""
    return [c.line() for c in setting_contrasts(results)]
