"""The line contrasting acceptance per chat template setting (cluster/analysis/template_contrast.py): one per
speculative variant that ran two or more settings of one declared workload, from the ok runs only; none without an
axis, for a variant without acceptance, or where the stored spec cannot be read (an older dataset)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cluster.analysis.results import Results
from cluster.analysis.template_contrast import contrast_lines, setting_contrasts
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.kernel.run_row import RunRow
from cluster.plan.runs import make_plan

SPEC = """
version: 1
name: tc
model: {path: sim://m, engine: sim}
variants:
  - {name: base, baseline: true}
  - {name: nextn, speculative: {num_steps: 2}}
workloads:
  - name: chat
    input_tokens: dataset
    output_tokens: 4
    num_requests: 4
    prompts: {source: sharegpt, path: d.json, tokenizer: tok, chat_template: true, chat_template_kwargs: KWARGS}
load: {concurrency: [1, 4]}
repeats: 2
"""
ACCEPT = {"chat-thinking": 2.0, "chat-no-thinking": 2.5, "chat": 2.2}


def _write(tmp_path: Path, kwargs: str, meta: Optional[dict[str, object]] = None) -> Results:
    spec = parse_spec_text(SPEC.replace("KWARGS", kwargs))
    store = DatasetStore(str(tmp_path), "tc")
    store.write_experiment_meta(meta if meta is not None else {"spec": spec.model_dump(mode="json")})
    for p in make_plan(spec):
        accept = ACCEPT[p.workload.name] + 0.1 * p.repeat if p.variant.speculative else None
        bad = p.variant.speculative is not None and p.repeat == 1 and p.load.value == 4
        store.write_run(p, RunRow(status="invalid" if bad else "ok", duration_s=1.0,
                                  metrics={"accept_length": 9.0 if bad else accept}))
    return Results.open(str(tmp_path), "tc")


def test_one_line_per_speculative_variant_over_the_settings_ok_runs(tmp_path: Path) -> None:
    results = _write(tmp_path, "{enable_thinking: [true, false]}")
    (c,) = setting_contrasts(results)
    assert (c.declared, c.variant) == ("chat", "nextn")
    # 3 ok runs per setting (c1 x 2 repeats, c4 repeat 0; c4 repeat 1 is invalid and its 9.0 left out)
    assert [(s.setting, s.workload, s.runs) for s in c.settings] == [("thinking", "chat-thinking", 3),
                                                                       ("no-thinking", "chat-no-thinking", 3)]
    assert [round(s.accept_length, 4) for s in c.settings] == [round(2.0 + 0.1 / 3, 4), round(2.5 + 0.1 / 3, 4)]
    assert contrast_lines(results) == [
        "acceptance by chat template setting, chat / nextn: thinking 2.03 (3 runs), no-thinking 2.53 (3 runs) "
        "tokens per verify step (mean over ok runs); no-thinking/thinking ×1.246"]


def test_no_line_without_an_axis_or_without_a_readable_spec(tmp_path: Path) -> None:
    assert contrast_lines(_write(tmp_path / "plain", "{enable_thinking: false}")) == []
    # an older dataset whose stored spec does not validate here: no line, not an error after compare's tables
    assert contrast_lines(_write(tmp_path / "old", "{enable_thinking: [true, false]}",
                                 {"spec": {"version": 1, "name": "tc", "no_such_field": 1}})) == []
