"""results recommend states the GPUs of what it serves, its throughput per GPU beside the total, and notes a point
whose deployments hold different GPU counts (hand-built evidence: the arithmetic in the comments)."""

from __future__ import annotations

import json
import math

from cluster.analysis.recommend import STEADY, Evidence, Recommendations, recommend_point
from cluster.analysis.recommend_view import recommend_json, recommend_view
from cluster.kernel.stats import VERDICT_FASTER, VERDICT_SLOWER

NAN = math.nan


def ev(variant: str, speedup: float, lo: float, hi: float, verdict: str, gpus: int | None, tok_s: float) -> Evidence:
    per = tok_s / gpus if gpus else NAN
    return Evidence("chat", "concurrency", 8.0, variant, variant == "tp8", None, 3, speedup, lo, hi, verdict, None,
                    "", (), STEADY, gpus=gpus, tok_s=tok_s, tok_s_per_gpu=per)


def test_the_choice_names_its_gpus_and_the_point_notes_different_counts() -> None:
    rows = [
        ev("tp8", 1.0, NAN, NAN, "baseline", 8, 1000.0),  # 1000 tok/s on 8 GPUs: 125 per GPU
        # 2xtp4: 1500 / 1000 = 1.5x the baseline, [1.4, 1.6] above 1: faster; on 8 GPUs: 1500 / 8 = 187.5 per GPU
        ev("2xtp4", 1.5, 1.4, 1.6, VERDICT_FASTER, 8, 1500.0),
        # ep: 900 / 1000 = 0.9x, slower in total, but on 4 GPUs: 900 / 4 = 225 per GPU, more than either
        ev("ep", 0.9, 0.85, 0.95, VERDICT_SLOWER, 4, 900.0),
    ]
    r = recommend_point(rows)
    assert r.serve == "2xtp4" and r.gpus == 8 and r.tok_s == 1500.0 and r.tok_s_per_gpu == 187.5
    assert r.because.endswith("; 2xtp4 holds 8 GPUs: 187.5 steady-state output tok/s per GPU")
    note = "deployments hold different GPU counts: tp8 8, 2xtp4 8, ep 4: compare per-GPU figures"
    assert r.gpus_note == note and note in r.notes
    rec = Recommendations((r,), (), "tp8", "")
    view = recommend_view(rec)
    assert view[["serve", "GPUs", "tok/s", "tok/s/GPU"]].values.tolist() == [["2xtp4", "8", "1500.0", "187.50"]]
    point = json.loads(recommend_json(rec))["points"][0]
    assert (point["gpus"], point["tok_s"], point["tok_s_per_gpu"], point["gpus_note"]) == (8, 1500.0, 187.5, note)


def test_same_gpu_counts_need_no_note_and_an_unknown_count_is_never_divided() -> None:
    same = recommend_point([ev("tp8", 1.0, NAN, NAN, "baseline", 8, 1000.0),
                            ev("2xtp4", 1.5, 1.4, 1.6, VERDICT_FASTER, 8, 1500.0)])
    assert same.gpus_note == "" and not any("GPU counts" in n for n in same.notes)
    ext = recommend_point([ev("tp8", 1.0, NAN, NAN, "baseline", 8, 1000.0),
                           ev("ext", 1.5, 1.4, 1.6, VERDICT_FASTER, None, 1500.0)])
    assert ext.serve == "ext" and ext.gpus is None and math.isnan(ext.tok_s_per_gpu)
    assert "holds" not in ext.because and ext.gpus_note.startswith("deployments' GPU counts not all known")
    assert recommend_view(Recommendations((ext,), (), "tp8", ""))["tok/s/GPU"].tolist() == ["-"]
