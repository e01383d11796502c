"""Kernel profiles: the top kernels by time in torch-profiler chrome traces, grouped GEMM / MoE / attention / comm / other.

A trace is the JSON (or .json.gz) torch.profiler's export_chrome_trace writes, as SGLang's /start_profile saves it
(`<profile_id>-TP-<rank>.trace.json.gz`). Device kernels are its complete events (`ph: X`) with `cat: kernel`
(CUDA); a trace without any (the torch profiler on a CPU server) is summarised over its `cpu_op` events instead,
and says so in `level`. Durations are µs, summed over every trace file and rank. The category comes from the
kernel's name (CATEGORY_PATTERNS, first match wins).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow as pa

from cluster.kernel.profile_summary import KernelTime, ProfileSummary

CATEGORIES = ("moe", "gemm", "attention", "communication", "other")
CATEGORY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("moe", re.compile(r"moe|expert|topk|grouped_gemm|cutlass_moe|fused_experts", re.I)),
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|custom_ar|cross_device",
                                 re.I)),
    ("attention", re.compile(r"attn|attention|flash|fmha|paged|decode.*kv|prefill|mla|batchdecode|batchprefill",
                             re.I)),
    ("gemm", re.compile(r"gemm|matmul|mm_|_mm\b|^mm$|addmm|bmm|nvjet|cutlass|cublas|sm\d+_xmma|linear|fp4|fp8_.*mm",
                        re.I)),
)
"""MoE first (fused MoE kernels are GEMMs too), then communication, attention, GEMM; anything else is `other`."""
TOP_N = 20


def category(kernel: str) -> str:
    for name, pat in CATEGORY_PATTERNS:
        if pat.search(kernel):
            return name
    return "other"


def _load_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def trace_files(directory: Path) -> list[Path]:
    """Chrome traces under a profile directory (SGLang's names, or any *.json / *.json.gz)."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")
                  and (p.name.endswith(".json.gz") or p.name.endswith(".json")))


def summarize_traces(paths: Iterable[Path], top_n: int = TOP_N) -> ProfileSummary:
    per: dict[str, dict[str, list[float]]] = {"kernel": {}, "cpu_op": {}}
    files, simulated = [], False
    for p in paths:
        doc = _load_trace(p)
        files.append(p.name)
        simulated = simulated or bool((doc.get("otherData") or {}).get("sglbench_simulated"))
        for ev in doc.get("traceEvents") or []:
            if not isinstance(ev, dict) or ev.get("ph") != "X":
                continue
            cat = str(ev.get("cat") or "").lower()
            if cat in per:
                per[cat].setdefault(str(ev.get("name")), []).append(float(ev.get("dur") or 0.0))
    level = "kernel" if per["kernel"] else "cpu_op"
    times = {k: (len(v), sum(v)) for k, v in per[level].items()}
    total = sum(t for _, t in times.values())
    by_cat = {c: 0.0 for c in CATEGORIES}
    for k, (_, t) in times.items():
        by_cat[category(k)] += t
    ranked = sorted(times.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top_n]
    top = tuple(KernelTime(k, category(k), n, t, t / total if total else 0.0) for k, (n, t) in ranked)
    return ProfileSummary(level, top, by_cat, total, tuple(files), simulated)


def kernel_profile_rows(experiment: str, engine: str, steps: int, summary: ProfileSummary,
                        artifact: Optional[str]) -> pa.Table:
    """The `kernel_profile` rows of one variant's profile (records.KERNEL_PROFILE_SCHEMA), top kernel first."""
    from cluster.kernel.records import KERNEL_PROFILE_SCHEMA

    rows = [{"experiment": experiment, "engine": engine, "profile_steps": steps, "rank": i + 1, "kernel": k.kernel,
             "category": k.category, "calls": k.calls, "total_us": k.total_us, "share": k.share,
             "trace_file": ",".join(summary.files), "artifact": artifact, "simulated": summary.simulated,
             "level": summary.level} for i, k in enumerate(summary.top)]
    return pa.Table.from_pylist(rows, schema=KERNEL_PROFILE_SCHEMA)
