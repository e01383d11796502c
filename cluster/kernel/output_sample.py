"""One sampled output of a measured run (the load generator keeps 1 in 32 of them, loadgen/output_sample.py) and the
rule that judges it: NaN, empty, undecodable or one token repeated (kernel/gate.py's degeneracy rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from cluster.kernel.gate import GateOutput, degeneracy


@dataclass(frozen=True)
class OutputSample:
    request_index: int
    output_ids: Optional[tuple[int, ...]]
    """None where the API streams no ids (OpenAI endpoints): the text is judged instead."""
    text: str
    error: Optional[str] = None

    def degenerate(self) -> Optional[str]:
        """Why this output is garbage (empty, NaN, undecodable, one token repeated), or None."""
        if self.error:
            return None  # a failed request is counted as an error by the run, not as garbage
        return degeneracy(GateOutput(text=self.text, token_ids=self.output_ids))
