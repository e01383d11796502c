"""`sglbench run` in a real terminal (tmux): the live table is on screen while the run goes on, with its columns, and
each finished point shows its verdict (tests/unit/commands/test_live_view.py: a pipe gets no table). The CLI starts
its own local Ray cluster (like a user's first run); the experiment is one simulated variant, two short points.
Skipped without tmux, a failure instead when SGLBENCH_REQUIRE_TIERS names `tmux` (CI installs it)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cluster.commands.live_view import COLUMNS
from tests.conftest import tier_required

TMUX = shutil.which("tmux")
MISSING = "tmux is not installed (apt-get install tmux enables this test)"
pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(TMUX is None and not tier_required("tmux"), reason=MISSING)]
REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300.0

EXPERIMENT = """version: 1
name: live-tmux
model: {path: sim://qwen, engine: sim, tp: 1}
server:
  args: {max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}
sim: {time_scale: 0.2}
variants:
  - {name: baseline, baseline: true}
workloads:
  - {name: short, input_tokens: 32, output_tokens: 16, num_requests: 24}
load: {concurrency: [1, 4]}
repeats: 1
warmup_requests: 1
seed: 7
"""


def _tmux(sock: str, *args: str) -> str:
    assert TMUX is not None
    return subprocess.run([TMUX, "-L", sock, *args], capture_output=True, text=True, timeout=30).stdout


def test_live_table_in_a_real_terminal(tmp_path: Path) -> None:
    if TMUX is None:
        pytest.fail(MISSING + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
    exp = tmp_path / "live.yaml"
    exp.write_text(EXPERIMENT)
    cmd = (f"cd {shlex.quote(str(tmp_path))} && RAY_USAGE_STATS_ENABLED=0 {shlex.quote(sys.executable)} -m "
           f"cluster.cli run live.yaml --output out; echo EXIT=$?; sleep 600")
    sock = f"sglbench-{uuid.uuid4().hex[:8]}"
    # the pane is 160x50; a COLUMNS/LINES inherited from the caller (CI's environment) would override the size rich
    # reads from the terminal, and an 80-column table folds the point column over two lines
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")},
           "PYTHONPATH": str(REPO)}
    subprocess.run([TMUX, "-L", sock, "new-session", "-d", "-s", "live", "-x", "160", "-y", "50", cmd], env=env,
                   check=True, timeout=30)
    frames: list[str] = []
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            frame = _tmux(sock, "capture-pane", "-p", "-J", "-S", "-", "-t", "live")
            frames.append(frame)
            if "EXIT=" in frame:
                break
            time.sleep(0.5)
    finally:
        _tmux(sock, "kill-server")
    final = frames[-1]
    assert "EXIT=0" in final, final[-3000:]
    header = [ln for ln in final.splitlines() if all(c in ln for c in COLUMNS)]
    assert header, final[-3000:]
    # live: the table was on screen before the command ended, with a point still running in some frame
    during = [f for f in frames[:-1] if any(all(c in ln for c in COLUMNS) for ln in f.splitlines())]
    assert during, "the table never showed while the run was going on"
    for point in ("short c1 r0", "short c4 r0"):  # variant, server, point, done/total, tok/s, TTFT p50, accept, verdict
        cells = [re.split(r"\s{2,}", ln.strip()) for ln in final.splitlines() if point in ln and "24/24" in ln]
        assert any(len(c) == 8 and c[0] == "baseline" and c[-1] == "ok" and c[5].endswith(" ms") for c in cells), \
            final[-3000:]
