"""The per-request timeline: bars from send to last token on a hand-built requests table, decode segments coloured by
per-token ITL (the chunk gap over the later chunk's tokens), the seeded sample past MAX_BARS, and the PNG."""

from __future__ import annotations

import io

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from cluster.analysis.timeline import MAX_BARS, build_timeline, caption_sampling, sample_indices, timeline_plot

MS = 1_000_000


def _hand_built() -> tuple[pd.DataFrame, pd.DataFrame]:
    # request 0: sent at 0, first token at 50 ms, then chunks at 60 ms (1 token) and 100 ms (2 tokens)
    #   -> gaps 10 ms / 1 token = 10 ms and 40 ms / 2 tokens = 20 ms per token
    # request 1: sent at 20 ms, one chunk at 70 ms: a TTFT bar and no decode segment
    # request 2: sent at 5 ms, failed (an error, no chunk): a red mark at its send
    # request 3: sent at 10 ms, a token-less chunk at 30 ms (dropped), tokens at 40 and 55 ms (3 tokens): 15/3 = 5 ms
    requests = pd.DataFrame({
        "request_index": [0, 1, 2, 3], "actual_send_ns": [0, 20 * MS, 5 * MS, 10 * MS],
        "first_chunk_ns": [50 * MS, 70 * MS, None, 40 * MS], "last_chunk_ns": [100 * MS, 70 * MS, None, 55 * MS],
        "error": [None, None, "timeout after 1 s", None]})
    chunks = pd.DataFrame({
        "request_index": [0, 0, 0, 1, 3, 3, 3], "chunk_index": [0, 1, 2, 0, 0, 1, 2],
        "arrival_ns": [50 * MS, 60 * MS, 100 * MS, 70 * MS, 30 * MS, 40 * MS, 55 * MS],
        "tokens": [1, 1, 2, 1, 0, 1, 3]})
    return requests, chunks


def test_bars_and_segments_land_where_the_records_say() -> None:
    req, ch = _hand_built()
    t = build_timeline("nextn-3", req, ch, total_requests=4)
    # rows in send order: request 0 (0 ms), 2 (5 ms), 3 (10 ms), 1 (20 ms)
    assert list(t.send_ns) == [0, 5 * MS, 10 * MS, 20 * MS]
    assert list(t.first_ns) == [50 * MS, -1, 40 * MS, 70 * MS] and list(t.last_ns) == [100 * MS, -1, 55 * MS, 70 * MS]
    assert list(t.failed) == [False, True, False, False]
    # request 0 (row 0): two segments, 50->60 ms at 10 ms/token and 60->100 ms at 20 ms/token;
    # request 3 (row 2): one segment, 40->55 ms at 15/3 = 5 ms/token (its token-less chunk is not a gap)
    assert list(t.seg_row) == [0, 0, 2]
    assert list(t.seg_start_ns) == [50 * MS, 60 * MS, 40 * MS] and list(t.seg_end_ns) == [60 * MS, 100 * MS, 55 * MS]
    assert t.seg_itl_token_ms.tolist() == [10.0, 20.0, 5.0]
    assert caption_sampling([t], seed=0) == "every request of each run is drawn"


def test_past_max_bars_a_seeded_uniform_sample_is_drawn() -> None:
    idx = np.arange(1000)
    a, b = sample_indices(idx, seed=3), sample_indices(idx[::-1], seed=3)
    assert a.size == MAX_BARS == len(set(a.tolist())) and list(a) == sorted(a)
    assert list(a) == list(b)  # the same requests whatever order the table came in
    assert list(a) != list(sample_indices(idx, seed=4))
    assert list(sample_indices(np.arange(MAX_BARS), seed=3)) == list(range(MAX_BARS))  # at most MAX_BARS: all
    # a sample of a uniform draw: its mean index sits near the middle (499.5 ± 3 standard errors of 288/sqrt(200))
    assert abs(a.mean() - 499.5) < 3 * 288.7 / np.sqrt(MAX_BARS)


def test_a_sampled_run_says_so_in_the_caption() -> None:
    n = 450
    req = pd.DataFrame({"request_index": range(n), "actual_send_ns": [i * MS for i in range(n)],
                        "first_chunk_ns": [i * MS + 5 * MS for i in range(n)],
                        "last_chunk_ns": [i * MS + 9 * MS for i in range(n)], "error": [None] * n})
    ch = pd.DataFrame({"request_index": np.repeat(np.arange(n), 2), "chunk_index": np.tile([0, 1], n),
                       "arrival_ns": np.ravel([[i * MS + 5 * MS, i * MS + 9 * MS] for i in range(n)]),
                       "tokens": np.ones(2 * n, dtype=int)})
    drawn = sample_indices(req["request_index"], seed=0)
    t = build_timeline("base", req[req["request_index"].isin(drawn)], ch, total_requests=n)
    assert t.drawn == MAX_BARS and t.seg_row.size == MAX_BARS  # one 4 ms gap per drawn request
    assert "200 of 450" in caption_sampling([t], seed=0) and "default_rng(0)" in caption_sampling([t], seed=0)


@pytest.mark.parametrize("with_error", [True, False])
def test_the_plot_is_a_png_with_the_red_bar_only_where_a_request_failed(with_error: bool) -> None:
    req, ch = _hand_built()
    if not with_error:
        req, ch = req[req["error"].isna()], ch
    data = timeline_plot([build_timeline("a", req, ch, len(req)), build_timeline("b", req, ch, len(req))], "t")
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(io.BytesIO(data))[..., :3]
    red = (img[..., 0] > 0.75) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)  # tab:red is (0.84, 0.15, 0.16)
    assert bool(red.any()) is with_error
