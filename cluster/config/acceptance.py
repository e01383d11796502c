"""The experiment's `acceptance_reference:` (the curve speculative acceptance is held against, per draft position)
and the model families' published figures shipped beside it (mtp_acceptance_reference.json, each with its source)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

from pydantic import Field, field_validator, model_validator

from cluster.config.fields import FieldProblem, FrozenModel, check_name

FIGURES_FILE = Path(__file__).with_name("mtp_acceptance_reference.json")
"""Per model family: the architectures it covers and, per draft position, a published lower figure with its source."""

DEFAULT_MARGIN = 0.1
"""How far (absolute acceptance) a position's whole interval must lie below the reference to count as collapsed."""


@dataclass(frozen=True)
class ReferencePoint:
    """Draft position k of a reference curve: the acceptance P(draft k accepted | drafts 1..k-1 accepted) it is held
    to (a published figure, a declared one, or a measured curve's 95 % lower bound) and where it is from."""

    position: int
    accept_rate: float
    source: str
    derivation: str = ""
    """The arithmetic from the source's figure to this one (published figures)."""


@dataclass(frozen=True)
class FamilyFigures:
    family: str
    architectures: tuple[str, ...]
    positions: tuple[ReferencePoint, ...]


def _read_families() -> dict[str, FamilyFigures]:
    doc = json.loads(FIGURES_FILE.read_text(encoding="utf-8"))
    return {name: FamilyFigures(name, tuple(f["architectures"]), tuple(
        ReferencePoint(int(p["position"]), float(p["accept_rate"]), str(p["source"]), str(p["derivation"]))
        for p in f["positions"])) for name, f in doc["families"].items()}


FAMILIES = _read_families()
"""The shipped families by name (read once; tests/unit/analysis/test_acceptance_health.py checks the file)."""


def family_of(architectures: list[str]) -> Optional[FamilyFigures]:
    """The shipped family whose architectures include one of the checkpoint's (None when none does)."""
    return next((f for f in FAMILIES.values() if set(f.architectures) & set(architectures)), None)


_Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class AcceptanceReferenceSpec(FrozenModel):
    """What each speculative variant's per-position acceptance is held against: exactly one of `positions`,
    `experiment` or `family`. Without this block the model family's shipped figures are used where the checkpoint
    probe names a known architecture (docs/acceptance-health.md)."""

    positions: Optional[list[_Rate]] = Field(default=None, min_length=1, max_length=16)
    """Declared reference: P(draft k accepted | drafts 1..k-1 accepted) for k = 1, 2, ... (positions past the
    list are not judged)."""
    experiment: Optional[str] = None
    """Another experiment in the same results root whose measured per-position acceptance is the reference (e.g.
    the unquantized checkpoint's); its 95 % interval's lower bound is used."""
    variant: Optional[str] = None
    """With `experiment`: its variant to compare with (default: the variant of the same name)."""
    family: Optional[str] = None
    """A model family's published figures shipped with sglbench (cluster/config/mtp_acceptance_reference.json):
    qwen3.5-mtp or deepseek-v3-mtp."""
    margin: _Rate = DEFAULT_MARGIN
    """A position is collapsed when its whole 95 % interval lies more than this below the reference."""

    _names = field_validator("experiment", "variant")(
        classmethod(lambda cls, v: v if v is None else check_name(v, "acceptance_reference name")))

    @field_validator("family")
    @classmethod
    def _family(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in FAMILIES:
            raise ValueError(f"unknown family {v!r}: expected one of {', '.join(sorted(FAMILIES))} "
                             f"(the figures shipped in {FIGURES_FILE.name})")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> "AcceptanceReferenceSpec":
        given = [k for k in ("positions", "experiment", "family") if getattr(self, k) is not None]
        if len(given) != 1:
            raise FieldProblem((), "give exactly one reference: positions (a declared curve), experiment (another "
                               f"experiment's measured curve) or family (shipped figures); got {given or 'none'}")
        if self.variant is not None and self.experiment is None:
            raise FieldProblem(("variant",), "variant names a variant of the reference experiment: give experiment")
        return self
