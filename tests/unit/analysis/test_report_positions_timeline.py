"""The report's acceptance-per-position table and its per-request timelines, over a synthetic dataset whose per-
position acceptance is known (test_comparison.ACCEPT_PROBS: 0.8, then 0.65)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from cluster.analysis.acceptance_positions import READ_COLUMNS, acceptance_by_position
from cluster.analysis.report import build_report
from cluster.analysis.results import Results
from tests.unit.analysis.test_comparison import ACCEPT_PROBS, build_dataset


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("positions"))
    # 2 variants x 2 load points x 1 repeat; 240 requests a run, past MAX_BARS (200): the timelines are sampled
    build_dataset(out, "pos", steps=[2], conc=(1, 8), repeats=1, n_requests=240, out_tokens=24)
    return out


def test_the_measured_rates_hold_the_known_probabilities(root: str) -> None:
    res = Results.open(root, "pos")
    groups = acceptance_by_position(res.table("requests", READ_COLUMNS), res.runs())
    (g,) = groups  # nextn (depth 2) only: the baseline sends no histogram; no categories, so only the pooled row
    assert g.variant == "nextn" and g.depth == 2 and g.requests == g.spec_requests == 480 and g.mismatched == 0
    for p, prob in zip(g.positions, ACCEPT_PROBS):
        assert p.conditional.low is not None and p.conditional.high is not None
        assert p.conditional.low <= prob <= p.conditional.high, (p.position, p.conditional)


def test_the_report_shows_the_table_and_the_timelines(root: str, tmp_path: Path) -> None:
    page_path = build_report(Results.open(root, "pos"), str(tmp_path / "out"), n_boot=200, seed=5)
    page = html.unescape(page_path.read_text())
    assert "<h2>Acceptance per draft position</h2>" in page and "Wilson score 95 %" in page
    assert re.search(r"<td>nextn</td><td>\(all\)</td><td>1</td><td>0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]</td>", page)
    timelines = sorted(re.findall(r"<img src='(timeline_[^']+\.png)'", page))
    assert timelines == ["timeline_chat_concurrency_1.png", "timeline_chat_concurrency_8.png"]
    assert "200 of 240; numpy default_rng(5)" in page  # the caption says the sample and its seed
    for name in timelines:
        img = mpimg.imread(str(page_path.parent / name))
        assert img.shape[0] > 500 and img.shape[1] > 800, (name, img.shape)  # two panels, one per variant


def test_the_report_defines_the_position_figures(root: str, tmp_path: Path) -> None:
    page = html.unescape(build_report(Results.open(root, "pos"), str(tmp_path / "o"), n_boot=200).read_text())
    assert "<td>draft_accept_rate_k</td><td>P(draft k accepted | drafts 1..k-1 accepted)" in page
    assert "<td>draft_accept_cum_k</td>" in page
