"""Acceptance health: each speculative variant's per-position acceptance held against a reference curve, the
`acceptance-collapsed` verdict (one predicate, `position_collapsed`), the checkpoint probe's evidence about the MTP
tensors, and what to try. Shown by `results show`, `compare`, `recommend` and the HTML report (docs/acceptance-health.md).

The reference is, in this order: the experiment's `acceptance_reference:` (declared positions, another experiment's
measured curve in the same results root, or a named family), else the shipped figures of the family the checkpoint
probe's architectures belong to (cluster/config/mtp_acceptance_reference.json, each figure with its source), else
none (the variant is `not judged`, and says why)."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional, Sequence

from cluster.analysis.acceptance_positions import (ALL_CATEGORIES, READ_COLUMNS, GroupAcceptance, PositionAcceptance,
                                                   acceptance_by_position)
from cluster.analysis.accuracy import Share
from cluster.analysis.correctness import only_acceptance_floor
from cluster.analysis.results import Results
from cluster.config.acceptance import (DEFAULT_MARGIN, FAMILIES, AcceptanceReferenceSpec, FamilyFigures,
                                      ReferencePoint, family_of)
from cluster.config.model import ModelSpec
from cluster.dataset.store import ExperimentNotFound
from cluster.input_files import JsonObject

COLLAPSED = "acceptance-collapsed"
HEALTHY = "acceptance-healthy"
NOT_JUDGED = "acceptance-not-judged"

ADVICE = ("keep the MTP layers in BF16: add the MTP module (e.g. 'mtp*' for Qwen3.5's mtp.* tensors, the NextN "
          "layer's name for DeepSeek-style heads) to the quantization's exclude/ignore list and re-export, or serve "
          "the unquantized checkpoint's head")
"""What to try when the head is there but its drafts are rejected (the MTP head damaged by quantization)."""


@dataclass(frozen=True)
class ReferenceCurve:
    label: str
    points: tuple[ReferencePoint, ...]
    margin: float


def position_collapsed(measured: Share, reference_rate: float, margin: float) -> bool:
    """THE definition: draft position k is collapsed when its conditional acceptance's whole 95 % interval lies
    below the reference by more than the margin, i.e. its upper bound < reference - margin (no trials: never)."""
    return measured.high is not None and measured.counted > 0 and measured.high < reference_rate - margin


@dataclass(frozen=True)
class PositionJudgement:
    position: int
    measured: Share
    reference: ReferencePoint
    collapsed: bool


@dataclass(frozen=True)
class ProbeEvidence:
    """What experiment.json's checkpoint probe says about the MTP head (probe/tensors.py MtpEvidence's keys)."""

    verdict: str
    header_tensors: int
    weight_format: Optional[str]
    dtypes: dict[str, int]
    excluded: bool
    exclude_pattern: Optional[str]
    exclude_modules: tuple[str, ...]
    quant_algo: Optional[str]
    architectures: tuple[str, ...]

    def line(self) -> str:
        dtypes = ", ".join(f"{d} ×{n}" for d, n in self.dtypes.items()) or "none"
        if self.excluded:
            state = (f"excluded from quantization by pattern {self.exclude_pattern!r}" if self.exclude_pattern
                     else "excluded from quantization")
        elif self.quant_algo:
            listed = ", ".join(self.exclude_modules) or "nothing"
            state = f"NOT excluded from {self.quant_algo} quantization (no exclude pattern covers mtp.*; it lists {listed})"
        else:
            state = "no quantization config"
        return (f"probe: MTP head {self.verdict}, {self.header_tensors} tensors, weight format "
                f"{self.weight_format or '-'} (dtypes {dtypes}), {state}")

    @property
    def quantized(self) -> bool:
        return not self.excluded and self.weight_format not in (None, "BF16", "F16", "F32")


@dataclass(frozen=True)
class AcceptanceHealth:
    """One (workload, speculative variant): its verdict against the reference and the evidence for it."""

    workload: str
    variant: str
    verdict: str
    reference: Optional[ReferenceCurve]
    judged: tuple[PositionJudgement, ...]
    why_not_judged: str
    probe: Optional[ProbeEvidence]
    floor_invalid_runs: int = 0
    """Runs judged here that are invalid by the gate's acceptance floor alone (in no comparison)."""

    def summary(self) -> str:
        """One line: the verdict, and for a collapsed variant each collapsed position with its arithmetic."""
        where = f"{self.workload} {self.variant}" + (
            f" ({self.floor_invalid_runs} run{'s' if self.floor_invalid_runs > 1 else ''} invalid: the gate's "
            "acceptance floor; judged, never compared)"
            if self.floor_invalid_runs else "")
        if self.verdict == NOT_JUDGED or self.reference is None:
            return f"{where}: {NOT_JUDGED} ({self.why_not_judged})"
        ref = self.reference
        bad = [j for j in self.judged if j.collapsed]
        if not bad:
            pos = ", ".join(f"k{j.position} {_rate(j.measured)}" for j in self.judged)
            return f"{where}: {HEALTHY} against {ref.label} (margin {ref.margin:g}): {pos}"
        parts = [f"position {j.position} accepts {_rate(j.measured)}, wholly below {j.reference.accept_rate:.3f} - "
                 f"margin {ref.margin:g} = {j.reference.accept_rate - ref.margin:.3f}" for j in bad]
        return f"{where}: {COLLAPSED} against {ref.label}: " + "; ".join(parts)

    def lines(self) -> list[str]:
        """summary, then for a collapsed variant the probe's evidence, what it suggests and what to try."""
        out = [self.summary()]
        if self.verdict != COLLAPSED:
            return out
        if self.probe is None:
            out.append("  probe: no checkpoint probe recorded with the experiment (a simulated or unprobed model): "
                       "whether the MTP tensors are quantized is not known")
        else:
            out.append("  " + self.probe.line())
            if self.probe.quantized:
                out.append("  the head is present but quantized: the quantization likely damaged it")
            elif self.probe.header_tensors > 0:
                out.append(f"  the head's weights are {self.probe.weight_format or '-'}, not quantized: quantization "
                           "does not explain it; check that they are this model's trained head (compare with the "
                           "original checkpoint's MTP tensors)")
                return out
        out.append(f"  try: {ADVICE}")
        return out


def _rate(s: Share) -> str:
    return f"{s.rate:.3f} [{s.low:.3f}, {s.high:.3f}]" if s.rate is not None and s.low is not None and \
        s.high is not None else "-"


def judge(measured: Sequence[PositionAcceptance], reference: ReferenceCurve) -> tuple[PositionJudgement, ...]:
    """Each measured position that the reference covers, judged by position_collapsed."""
    ref = {p.position: p for p in reference.points}
    return tuple(PositionJudgement(m.position, m.conditional, ref[m.position],
                                   position_collapsed(m.conditional, ref[m.position].accept_rate, reference.margin))
                 for m in measured if m.position in ref and m.conditional.counted > 0)


# free-form JSON stored as given: experiment.json's probe report, read through Results.meta
def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# free-form JSON stored as given: experiment.json's probe report, read through Results.meta
def probe_evidence(meta: Optional[dict[str, Any]], model_path: Optional[str]) -> Optional[ProbeEvidence]:
    """The MTP evidence of the probe report stored for `model_path` (the only report when the path is not among
    them); None without one. A level of another type reads as absent (display only)."""
    pre = (meta or {}).get("preflight")
    if not isinstance(pre, dict) or not pre:
        return None
    report = pre.get(model_path) if model_path in pre else (next(iter(pre.values())) if len(pre) == 1 else None)
    mtp = report.get("mtp") if isinstance(report, dict) else None
    if not isinstance(report, dict) or not isinstance(mtp, dict):
        return None
    quant, config, dtypes = (_object(report.get("quantization")), _object(report.get("config")),
                             _object(mtp.get("dtypes")))
    pattern = mtp.get("exclude_pattern")
    return ProbeEvidence(
        verdict=str(mtp.get("verdict", "?")), header_tensors=int(mtp.get("header_tensors") or 0),
        weight_format=mtp.get("weight_format") if isinstance(mtp.get("weight_format"), str) else None,
        dtypes={str(k): int(v) for k, v in dtypes.items() if isinstance(v, int)},
        excluded=bool(mtp.get("excluded_in_quant_config")),
        exclude_pattern=pattern if isinstance(pattern, str) else None,
        exclude_modules=tuple(str(x) for x in quant.get("exclude_modules") or () if isinstance(x, str)),
        quant_algo=quant.get("quant_algo") if isinstance(quant.get("quant_algo"), str) else None,
        architectures=tuple(str(x) for x in config.get("architectures") or () if isinstance(x, str)))


def family_curve(family: FamilyFigures, margin: float) -> ReferenceCurve:
    return ReferenceCurve(f"{family.family} published figures", family.positions, margin)


def _measured_curve(results: Results, spec: AcceptanceReferenceSpec, workload: str, variant: str,
                    ) -> tuple[Optional[ReferenceCurve], str]:
    """The reference experiment's measured curve for `variant` (spec.variant when given) on `workload` (else its
    only workload), as its intervals' lower bounds; (None, why) where it has none."""
    assert spec.experiment is not None
    try:
        other = Results.open(results.root, spec.experiment)
    except ExperimentNotFound:
        return None, f"reference experiment {spec.experiment!r} not found under {results.root!r}"
    name = spec.variant or variant
    groups = [g for g in acceptance_by_position(other.table("requests", READ_COLUMNS), other.runs())
              if g.category == ALL_CATEGORIES and g.variant == name]
    pick = [g for g in groups if g.workload == workload] or (groups if len({g.workload for g in groups}) == 1 else [])
    if not pick:
        return None, f"reference experiment {spec.experiment!r} has no per-position acceptance for variant {name!r}"
    g = pick[0]
    points = tuple(ReferencePoint(p.position, p.conditional.low, f"{spec.experiment} {g.variant} measured "
                                  f"{_rate(p.conditional)} over {p.steps_reaching} verify steps (lower bound used)")
                   for p in g.positions if p.conditional.low is not None and p.conditional.counted > 0)
    return ReferenceCurve(f"experiment {spec.experiment} {g.variant} (measured, 95 % lower bound)", points,
                          spec.margin), ""


def reference_for(results: Results, spec: Optional[AcceptanceReferenceSpec], probe: Optional[ProbeEvidence],
                  workload: str, variant: str) -> tuple[Optional[ReferenceCurve], str]:
    """The curve `variant` is held against, or (None, why there is none)."""
    if spec is not None and spec.positions is not None:
        return ReferenceCurve("the declared reference", tuple(
            ReferencePoint(k, r, "acceptance_reference.positions") for k, r in enumerate(spec.positions, 1)),
            spec.margin), ""
    if spec is not None and spec.family is not None:
        return family_curve(FAMILIES[spec.family], spec.margin), ""
    if spec is not None and spec.experiment is not None:
        return _measured_curve(results, spec, workload, variant)
    family = family_of(list(probe.architectures)) if probe is not None else None
    if family is not None:
        return family_curve(family, DEFAULT_MARGIN), ""
    return None, ("no reference: declare acceptance_reference (positions, experiment or family), or probe a "
                  "checkpoint of a family with shipped figures (" + ", ".join(sorted(FAMILIES)) + ")")


def acceptance_health(results: Results) -> list[AcceptanceHealth]:
    """Per workload and speculative variant (all categories pooled), its verdict against the reference."""
    runs = results.runs()
    groups = [g for g in acceptance_by_position(results.table("requests", READ_COLUMNS), runs, with_floor_invalid=True)
              if g.category == ALL_CATEGORIES]
    if not groups:
        return []
    spec = results.stored_spec(AcceptanceReferenceSpec, "acceptance_reference")
    model = results.stored_spec(ModelSpec, "model")
    probe = probe_evidence(results.meta(), model.path if model is not None else None)
    floor = runs.loc[(runs["status"] == "invalid") & runs["invalid_reasons"].map(only_acceptance_floor).astype(bool)]
    counts = floor.groupby(["workload", "variant"]).size().to_dict() if len(floor) else {}
    return [replace(_health(results, spec, probe, g), floor_invalid_runs=int(counts.get((g.workload, g.variant), 0)))
            for g in groups]


def _health(results: Results, spec: Optional[AcceptanceReferenceSpec], probe: Optional[ProbeEvidence],
            g: GroupAcceptance) -> AcceptanceHealth:
    curve, why = reference_for(results, spec, probe, g.workload, g.variant)
    if curve is None:
        return AcceptanceHealth(g.workload, g.variant, NOT_JUDGED, None, (), why, probe)
    judged = judge(g.positions, curve)
    if not judged:
        return AcceptanceHealth(g.workload, g.variant, NOT_JUDGED, curve, (), f"{curve.label} covers no measured "
                                "position", probe)
    verdict = COLLAPSED if any(j.collapsed for j in judged) else HEALTHY
    return AcceptanceHealth(g.workload, g.variant, verdict, curve, judged, "", probe)


def health_lines(healths: Sequence[AcceptanceHealth]) -> list[str]:
    """Every judged variant's lines, prefixed `acceptance health` (for show, compare and recommend); the variants not
    judged for one reason share one line (every speculative variant of an experiment without a reference would
    otherwise repeat the same sentence)."""
    out: list[str] = []
    unjudged: dict[str, list[str]] = {}
    for h in healths:
        if h.verdict == NOT_JUDGED or h.reference is None:
            unjudged.setdefault(h.why_not_judged, []).append(f"{h.workload} {h.variant}")
            continue
        out += [f"acceptance health {line}" if not line.startswith("  ") else line for line in h.lines()]
    out += [f"acceptance health {', '.join(names)}: {NOT_JUDGED} ({why})" for why, names in unjudged.items()]
    return out


def health_json(h: AcceptanceHealth) -> JsonObject:
    """One variant's verdict as `--format json` carries it: the verdict, each judged position (measured rate and
    interval, reference), the reference curve, why not judged, the probe's evidence, and (collapsed) the lines after
    the summary: the evidence again in words and what to try."""
    return {"workload": h.workload, "variant": h.variant, "verdict": h.verdict, "summary": h.summary(),
            "floor_invalid_runs": h.floor_invalid_runs, "why_not_judged": h.why_not_judged or None,
            "reference": None if h.reference is None else {
                "label": h.reference.label, "margin": h.reference.margin,
                "points": [asdict(p) for p in h.reference.points]},
            "positions": [{"position": j.position, "accepted": j.measured.correct, "steps": j.measured.counted,
                           "rate": j.measured.rate, "low": j.measured.low, "high": j.measured.high,
                           "reference_rate": j.reference.accept_rate, "collapsed": j.collapsed} for j in h.judged],
            "probe": None if h.probe is None else {**asdict(h.probe), "quantized": h.probe.quantized,
                                                   "line": h.probe.line()},
            "detail": [x.strip() for x in h.lines()[1:]]}


def health_html(healths: Sequence[AcceptanceHealth]) -> str:
    """The report's section: each variant's lines, collapsed ones marked, with the reference's sources."""
    if not healths:
        return ""
    e = html.escape
    items = "".join(f"<li class='{'bad' if h.verdict == COLLAPSED else 'ok'}'><b>{e(h.verdict)}</b> "
                    + "<br>".join(e(x.strip()) for x in h.lines()) + "</li>" for h in healths)
    sources = {f"{p.source} {p.derivation}".strip() for h in healths if h.reference is not None
               for p in h.reference.points}
    src = "".join(f"<li>{e(s)}</li>" for s in sorted(sources))
    return (f"<h2>Acceptance health</h2><p>A draft position is <code>{COLLAPSED}</code> when the upper bound of its "
            "95 % interval of P(accept k | 1..k-1) is below the reference minus the margin "
            "(docs/acceptance-health.md).</p>"
            f"<ul>{items}</ul><p>Reference figures:</p><ul>{src}</ul>")


__all__ = ["ADVICE", "COLLAPSED", "HEALTHY", "NOT_JUDGED", "AcceptanceHealth", "PositionJudgement", "ProbeEvidence",
           "ReferenceCurve", "ReferencePoint", "acceptance_health", "family_curve", "health_html", "health_json", "health_lines",
           "judge", "position_collapsed", "probe_evidence", "reference_for"]
