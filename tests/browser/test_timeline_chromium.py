"""The report's per-request timeline in a real browser (headless Chromium): each timeline image loads, is laid out at
a readable size inside the 1280-px page, and carries its caption with the sampling said. Skipped where Chromium is
absent, a failure when SGLBENCH_REQUIRE_TIERS names `browser`. SGLBENCH_BROWSER_SHOTS=DIR keeps a screenshot of the
page scrolled to the first timeline there, for a person to look at."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from cluster.analysis.report import build_report
from cluster.analysis.results import Results
from tests.browser.test_report_chromium import CHROMIUM, MISSING, WIDTH_PX
from tests.conftest import tier_required
from tests.unit.analysis.test_comparison import build_dataset

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None and not tier_required("browser"), reason=MISSING)]

PROBE = """<script>
window.addEventListener("load", function () {
  var figs = Array.from(document.querySelectorAll("figure")).filter(function (f) {
    var i = f.querySelector("img"); return i && i.getAttribute("src").indexOf("timeline_") === 0;
  });
  var out = figs.map(function (f) {
    var i = f.querySelector("img"), r = i.getBoundingClientRect();
    return {src: i.getAttribute("src"), loaded: i.complete && i.naturalWidth > 0, natural: i.naturalWidth,
            width: r.width, height: r.height, left: r.left, right: r.right,
            caption: (f.querySelector("figcaption") || {}).textContent || ""};
  });
  if (figs.length) { figs[0].scrollIntoView(); }
  var pre = document.createElement("pre");
  pre.id = "timeline-probe";
  pre.textContent = JSON.stringify({figures: out, viewport: document.documentElement.clientWidth});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--window-size={WIDTH_PX},1400", "--virtual-time-budget=10000",
            f"--user-data-dir={tmp_path / ('prof' + str(len(args)))}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


def test_the_timeline_is_shown_in_headless_chromium(tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.fail(MISSING + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
    root = str(tmp_path / "results")
    # 210 requests a run, past MAX_BARS: each panel is a sample and the caption says so
    build_dataset(root, "timeline", steps=[2], conc=(4,), repeats=1, n_requests=210, out_tokens=16)
    page = build_report(Results.open(root, "timeline"), str(tmp_path / "report"), n_boot=200)
    probe = page.parent / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>", 1))
    dom = _chromium(tmp_path, "--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="timeline-probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    (fig,) = got["figures"]
    assert fig["src"] == "timeline_chat_concurrency_4.png" and fig["loaded"], fig
    assert fig["natural"] > 800 and fig["width"] > 600 and fig["height"] > 300, fig  # laid out readable, not a thumb
    assert 0 <= fig["left"] and fig["right"] <= got["viewport"], fig
    assert "200 of 210" in fig["caption"] and "default_rng(0)" in fig["caption"], fig["caption"]
    shots = os.environ.get("SGLBENCH_BROWSER_SHOTS")
    shot = Path(shots) / "timeline_in_report.png" if shots else tmp_path / "timeline_in_report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    text = page.read_text()  # the report's own head and its timeline figures alone, so the shot starts with them
    figures = re.findall(r"<figure><img src='timeline_.*?</figure>", text, re.S)
    view = page.parent / "timeline_view.html"
    view.write_text(text.split("<body>", 1)[0] + "<body>" + "".join(figures) + "</body></html>")
    _chromium(tmp_path, f"--screenshot={shot}", view.as_uri())
    assert shot.stat().st_size > 10_000
