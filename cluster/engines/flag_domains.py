"""The value domains of server flags whose range the engines' own parsers do not check (argparse's `type=int`
takes 0 and `type=float` takes 7): a leaf module, so the spec validates them at their line (cluster/config/server.py).

Each domain is SGLang 0.5.23's (sglang/srt/server_args.py, /work/shared/reference/sglang-0.5.23.md) and holds for
vLLM's spelling of the same flag where it has one. A flag listed here takes a YAML number, never a quoted one: the
spec refuses "3" for every numeric field, and a quoted flag value would reach the parser as the same word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from cluster.config import bounds as B

FlagScalar = Union[bool, int, float, str, list[Union[int, float, str]], None]


@dataclass(frozen=True)
class FlagDomain:
    """A numeric flag's domain: integer or real, its bounds (`low_open`: the lower bound itself is excluded), and
    the fact that sets them."""

    integer: bool
    low: float
    high: float
    why: str
    low_open: bool = False

    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        return f"{kind} {low} and <= {self.high:g} ({self.why})"


_TOKENS = FlagDomain(True, 1, B.MAX_TOKENS, "a token count; 0 leaves no room for one request")
_BATCH = FlagDomain(True, 1, B.MAX_CONCURRENCY, "a batch of requests; 0 would admit none")
FLAG_DOMAINS: dict[str, FlagDomain] = {
    "mem-fraction-static": FlagDomain(False, 0, 1, "the fraction of GPU memory for weights and KV cache",
                                      low_open=True),
    "max-running-requests": _BATCH,
    "max-num-seqs": _BATCH,  # vLLM's name for the same cap
    "cuda-graph-max-bs": _BATCH, "cuda-graph-max-bs-decode": _BATCH, "cuda-graph-max-bs-prefill": _BATCH,
    "max-total-tokens": _TOKENS, "max-prefill-tokens": _TOKENS, "context-length": _TOKENS,
    "page-size": FlagDomain(True, 1, B.MAX_TOKENS, "tokens per KV-cache page"),
    "gpu-memory-utilization": FlagDomain(False, 0, 1, "vLLM's fraction of GPU memory", low_open=True),
}
"""Flag (full name, dashes) -> its domain. Not here: flags whose negative or zero value has a meaning in SGLang
(chunked-prefill-size -1 turns chunking off), and vLLM's max-model-len, which also takes words ("32k", "auto")."""


def flag_domain_problem(flag: str, value: FlagScalar) -> Optional[str]:
    """Why `value` is outside the domain of server flag `flag` (dashes or underscores), or None (also for a flag
    without a known domain, and for false/null, which leave the flag out)."""
    domain = FLAG_DOMAINS.get(flag.replace("_", "-"))
    if domain is None or value is None or value is False:
        return None
    name = flag.replace("_", "-")
    if isinstance(value, str):
        return f"--{name} is given the string {value!r}: expected {domain.expected()}, written as a YAML number " \
               "(remove the quotes)"
    if isinstance(value, bool) or isinstance(value, list) or (domain.integer and not isinstance(value, int)):
        return f"--{name} is {value!r}: expected {domain.expected()}"
    low_ok = value > domain.low if domain.low_open else value >= domain.low
    if not low_ok or value > domain.high:
        return f"--{name} {value!r} is out of range: expected {domain.expected()}"
    return None
