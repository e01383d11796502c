"""Minimal Prometheus text-format parser (enough for counters and gauges scraped from engines)."""

from __future__ import annotations

import math
import re
from typing import Optional

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]
MAX_LINE_CHARS = 64 * 1024
"""A sample line past this is skipped unread: the label regex would spend time quadratic in a hostile line."""


def parse_prometheus(text: str) -> list[Sample]:
    """(name, labels, value) for every sample line; comments and malformed lines are skipped."""
    out: list[Sample] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or line.startswith("#") or len(line) > MAX_LINE_CHARS:
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.append((m.group(1), labels, value))
    return out


def sum_metric(samples: list[Sample], name: str, **match: str) -> Optional[float]:
    """Sum of a metric's samples whose labels match; None if the metric is absent."""
    vals = [v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in match.items())]
    vals = [v for v in vals if not math.isnan(v)]
    return sum(vals) if vals else None
