"""Which variants of an experiment ran SGLang's adaptive speculation: their recorded launch argv asked for it (the run
itself checked /server_info that it was on, cluster/engines/sglang_adaptive.py)."""

from __future__ import annotations

import json

import pandas as pd

ADAPTIVE_ARGV_WORD = "--speculative-adaptive"


def adaptive_variants(runs: pd.DataFrame) -> set[str]:
    """Variants whose recorded launch argv holds --speculative-adaptive."""
    out: set[str] = set()
    if runs.empty or "launch_argv_json" not in runs:
        return out
    for variant, text in zip(runs["variant"], runs["launch_argv_json"]):
        try:
            argv = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            continue
        if isinstance(argv, list) and ADAPTIVE_ARGV_WORD in argv:
            out.add(str(variant))
    return out
