"""Time `probe_checkpoint` on a Qwen3.5-shaped sharded checkpoint of about 1,500 tensors (target: well under 1 s)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from tests.checkpoints import qwen35_nvfp4  # noqa: E402

TARGET_S = 1.0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # 8 layers x 14 experts x 12 expert tensors + the rest + the MTP head ≈ 1,500 tensors in 8 shards
        d = qwen35_nvfp4(Path(tmp) / "qwen35", layers=8, experts=14, shards=8)
        times_s = []
        report = probe_checkpoint(str(d))
        for _ in range(7):
            t0 = time.perf_counter()
            report = probe_checkpoint(str(d))
            times_s.append(time.perf_counter() - t0)
        med = statistics.median(times_s)
        print(f"tensors {report.tensor_count}, shards {len(report.shards)}, header bytes {report.header_bytes}, "
              f"MTP verdict {report.mtp.verdict}")
        print(f"probe median {med * 1000:.1f} ms (min {min(times_s) * 1000:.1f} ms, 7 runs); "
              f"target {TARGET_S * 1000:.0f} ms; ratio target/median {TARGET_S / med:.0f}x")


if __name__ == "__main__":
    main()
