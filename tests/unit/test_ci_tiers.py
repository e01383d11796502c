"""Every tier runs in CI: .ci/run requires each optional tier the tests know (so none of their skips can pass CI),
and a misspelt tier name in SGLBENCH_REQUIRE_TIERS is refused rather than silently requiring nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import KNOWN_TIERS

REPO = Path(__file__).resolve().parents[2]


def test_ci_requires_every_known_tier() -> None:
    m = re.search(r"^export SGLBENCH_REQUIRE_TIERS=(\S+)$", (REPO / ".ci" / "run").read_text(), re.M)
    assert m, ".ci/run sets no SGLBENCH_REQUIRE_TIERS"
    assert sorted(m.group(1).split(",")) == sorted(KNOWN_TIERS)


def test_ci_installs_what_the_browser_and_terminal_tiers_need() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"apt-get install -y -qq --no-install-recommends \"\$\{missing\[@\]\}\"", ci)
    assert "missing+=(chromium)" in ci and "missing+=(tmux)" in ci


def test_an_unknown_required_tier_is_a_usage_error() -> None:
    env = {**os.environ, "SGLBENCH_REQUIRE_TIERS": "vllm,browsr"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "--collect-only",
                          "-q", "tests/unit/test_ci_tiers.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "unknown tier(s) browsr" in res.stderr
