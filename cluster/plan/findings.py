"""A fairness finding (level, variant, rule, message), the collector the rule modules share, and its one-line form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from cluster.engines.registry import is_simulated
from cluster.kernel.runs import ResolvedVariant

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    level: Level
    variant: str
    rule: str
    message: str


class FindingCollector:
    """Collects findings; on a simulator variant every error is downgraded to a warning."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def add(self, v: ResolvedVariant, level: Level, rule: str, message: str) -> None:
        if is_simulated(v.engine) and level == "error":
            level = "warning"
            message += " (simulated engine: warning only)"
        self.findings.append(Finding(level, v.name, rule, message))


def format_findings(findings: Sequence[Finding]) -> list[str]:
    """One line per finding: `error: nextn-2: max-running-requests: ...`."""
    return [f"{f.level}: {f.variant}: {f.rule}: {f.message}" for f in findings]
