"""Against a real SGLang 0.5.23 NEXTN server on the CPU: the adapter reads the speculative cap of 48 with its source,
and a burst of 64 concurrent requests really runs 48 at a time with the rest queued (scraped gauges)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from sglang_cpu_server import PROMPTS, SGLangCPUServer, nextn_args

from cluster.dataset.run_rows import _peak_per_scrape, _series
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.server_metrics import MetricsScraper

OFFERED = 64


def test_real_nextn_server_caps_running_requests_at_48(sglang_cpu_python: Path, mimo_models: Path,
                                                       tmp_path: Path) -> None:
    server = SGLangCPUServer(python=sglang_cpu_python, model=mimo_models / "echo", extra_args=nextn_args(1),
                             log_path=tmp_path / "echo_nextn1_cap.log")
    engine = SGLangEngine()
    try:
        server.start()
        status, body = server.request("/server_info")
        assert status == 200
        cap = engine.concurrency_cap({"server_info": json.loads(body)})
        scraper = MetricsScraper(server.url + "/metrics", interval_s=0.1).start()
        t0 = time.time()
        codes: list[int] = []

        def one(i: int) -> None:
            codes.append(server.generate(PROMPTS[i % len(PROMPTS)] + f" {i}", max_new_tokens=64)[0])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(OFFERED)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
        duration_s = time.time() - t0
        scraper.halt()
    finally:
        server.stop()
    assert cap is not None and cap.value == 48 and cap.declared == 48
    assert cap.source == "server_info.internal_states[0].effective_max_running_requests_per_dp"
    assert codes == [200] * OFFERED
    batch = scraper.batch(t0)
    running = _peak_per_scrape(batch, engine.running_gauge, duration_s)
    queued = _peak_per_scrape(batch, engine.queue_gauge, duration_s)
    queue = _series(batch, engine.queue_gauge, duration_s)
    share = sum(1 for x in queue.values() if x > 0) / max(1, len(queue))
    print(f"[sglang_cpu] NEXTN-1 burst of {OFFERED} in {duration_s:.1f} s: scraped max running {running}, "
          f"max queued {queued} (non-empty on {share:.0%} of {len(queue)} scrapes)")
    assert running is not None and queued is not None
    assert running <= 48 < OFFERED and queued > 0
