"""The window's /metrics scraper against a loopback server: samples are kept from a good answer; a trickled,
silent, oversized or malformed answer is one scrape error within the scrape's deadline, never a hang or a raise."""

from __future__ import annotations

import time

import pytest

import cluster.loadgen.server_metrics as server_metrics
from cluster.loadgen.server_metrics import MetricsScraper
from tests.fuzz.replay_server import ReplayServer, Script, http, whole

TEXT = (b"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3.0\n"
        b"sglang:gen_throughput{model_name=\"m\"} 12.5\nnot a sample line\n"
        b"sglang:token_usage{model_name=\"m\"} " + b"1" * 70_000 + b"\n")


def test_a_good_scrape_keeps_the_listed_samples_and_skips_junk_lines() -> None:
    with ReplayServer(lambda m, p: whole(http(b"200 OK", TEXT, ctype=b"text/plain"))) as srv:
        s = MetricsScraper(srv.url + "/metrics")
        s.scrape_once()
    assert s.errors == 0
    assert [(r[1], r[2], r[3]) for r in s.rows] == [("sglang:num_running_reqs", "model_name=m", 3.0),
                                                     ("sglang:gen_throughput", "model_name=m", 12.5)]


@pytest.mark.parametrize("script", [
    Script((b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsglang:num_running_reqs 1\n",), gap_s=0.05,
           then="trickle"),
    Script((b"HTTP/1.1 200 OK\r\n",), then="hang"),
    whole(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 100_000 + b"\r\n\r\n"),
    whole(b"SPDY/3 200 OK\r\n\r\n"),
    whole(http(b"500 Internal Server Error", b"boom")),
], ids=["trickle", "silent", "huge-header", "bad-status", "500"])
def test_a_bad_scrape_is_one_error_within_its_deadline(script: Script, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_metrics, "SCRAPE_TIMEOUT_S", 0.4)
    with ReplayServer(lambda m, p: script) as srv:
        s = MetricsScraper(srv.url + "/metrics")
        t0 = time.monotonic()
        s.scrape_once()
        assert time.monotonic() - t0 < 1.2  # a per-read timeout would never end the trickle
    assert s.errors == 1 and s.rows == []


HIST = (b'sglang:per_stage_req_latency_seconds_bucket{engine_type="prefill",le="0.001",stage="prefill_bootstrap"} 1\n'
        b'sglang:per_stage_req_latency_seconds_sum{engine_type="prefill",stage="prefill_bootstrap"} 0.25\n'
        b'sglang:per_stage_req_latency_seconds_count{engine_type="prefill",stage="prefill_bootstrap"} 2\n'
        b'sglang:per_stage_req_latency_seconds_created{engine_type="prefill",stage="prefill_bootstrap"} 1.7e9\n'
        b'sglang:kv_transfer_latency_ms_sum{engine_type="prefill"} 40\n'
        b'sglang:kv_transfer_latency_ms_count{engine_type="prefill"} 2\n')


def test_a_prefill_server_keeps_its_ttft_part_histograms_sum_and_count_not_their_buckets() -> None:
    with ReplayServer(lambda m, p: whole(http(b"200 OK", HIST, ctype=b"text/plain"))) as srv:
        s = MetricsScraper([("prefill-0", srv.url + "/metrics")])
        s.scrape_once()
    lab = "engine_type=prefill,process=prefill-0"
    assert [(r[1], r[2], r[3]) for r in s.rows] == [
        ("sglang:per_stage_req_latency_seconds_sum", lab + ",stage=prefill_bootstrap", 0.25),
        ("sglang:per_stage_req_latency_seconds_count", lab + ",stage=prefill_bootstrap", 2.0),
        ("sglang:kv_transfer_latency_ms_sum", lab, 40.0), ("sglang:kv_transfer_latency_ms_count", lab, 2.0)]
