"""Issue 15 item 9: the per-version launch notes table (code and docs agree) and the plan warning."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cluster.plan.fairness import check_fairness
from cluster.plan.launch_notes import LAUNCH_NOTES
from cluster.plan.model_rules import ModelFacts
from cluster.kernel.runs import ResolvedVariant

DOC = Path(__file__).resolve().parents[3] / "docs" / "launch-notes.md"
BASE = {"max-running-requests": 64, "kv-cache-dtype": "bf16"}


def v(args: dict[str, Any], tp: int = 8) -> ResolvedVariant:
    return ResolvedVariant(name="b", engine="sglang", tp=tp, model_path="/m", args=args, env={}, speculative=None,
                           is_baseline=True)  # type: ignore[arg-type]


def test_docs_table_lists_every_note_with_its_boundary() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `--")]
    assert len(rows) == len(LAUNCH_NOTES)
    for note, row in zip(LAUNCH_NOTES, rows):
        want = f"--{note.flag}" + (f" {note.value}" if note.value else "")
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == f"`{want}`"
        assert cells[1] == ".".join(map(str, note.fixed_in))
        assert cells[2] == ("confirmed" if note.confirmed else "unconfirmed")
        assert re.search(r"\w", cells[5])  # a source on every row


def test_an_older_release_on_sm120_warns_for_each_missing_note() -> None:
    facts = {"/m": ModelFacts(hybrid=False, moe=True, nvfp4=True)}
    f = check_fairness([v(BASE)], facts=facts, gpu_sm=120, version="0.5.10")
    notes = [x for x in f if x.rule == "launch-notes"]
    assert len(notes) == 3 and all(x.level == "warning" for x in notes)
    assert any("--attention-backend triton" in x.message for x in notes)
    done = {**BASE, "attention-backend": "triton", "disable-shared-experts-fusion": True,
            "disable-custom-all-reduce": True}
    assert [x for x in check_fairness([v(done)], facts=facts, gpu_sm=120, version="0.5.10")
            if x.rule == "launch-notes"] == []
    # the release checked here needs none; another GPU needs none; a single GPU has no all-reduce
    assert not [x for x in check_fairness([v(BASE)], facts=facts, gpu_sm=120, version="0.5.23")
                if x.rule == "launch-notes"]
    assert not [x for x in check_fairness([v(BASE)], facts=facts, gpu_sm=90, version="0.5.10")
                if x.rule == "launch-notes"]
    one = [x for x in check_fairness([v(BASE, tp=1)], facts=facts, gpu_sm=120, version="0.5.10")
           if x.rule == "launch-notes"]
    assert not any("custom-all-reduce" in x.message for x in one)
