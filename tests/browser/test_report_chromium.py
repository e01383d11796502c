"""The HTML report in a real browser (headless Chromium, Debian's `chromium` package): every image loads, no
console or page error appears, and nothing is wider than a 1280-px page. Skipped where Chromium is absent, and a
failure instead when SGLBENCH_REQUIRE_TIERS names `browser` (CI: .ci/run installs Debian's chromium package)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster.analysis.report import build_report
from cluster.analysis.results import Results
from tests.conftest import tier_required
from tests.unit.analysis.test_comparison import build_dataset

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISSING = "chromium is not installed (apt-get install chromium enables this tier)"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None and not tier_required("browser"), reason=MISSING)]
WIDTH_PX = 1280

PROBE = """<script>
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push("error: " + (e.message || (e.target && (e.target.src || e.target.href)) || "unknown"));
  }, true);
  var origError = console.error;
  console.error = function () { errors.push("console.error: " + Array.from(arguments).join(" ")); origError.apply(console, arguments); };
  window.addEventListener("load", function () {
    var imgs = Array.from(document.images).map(function (i) {
      return {src: i.getAttribute("src"), ok: i.complete && i.naturalWidth > 0};
    });
    var vw = document.documentElement.clientWidth;
    var tables = Array.from(document.querySelectorAll("table")).map(function (t) {
      return Math.ceil(t.getBoundingClientRect().right);
    });
    var out = {images: imgs, errors: errors, viewport: vw, table_right: tables,
               scroll_width: document.documentElement.scrollWidth};
    var pre = document.createElement("pre");
    pre.id = "sglbench-probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();
</script>"""


def test_report_in_headless_chromium(tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.fail(MISSING + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
    root = str(tmp_path / "results")
    build_dataset(root, "browser", steps=[1, 2], conc=(1, 4, 8), repeats=2, n_requests=16, out_tokens=16,
                  invalid=("nextn-2", 4, 1))
    page = build_report(Results.open(root, "browser"), str(tmp_path / "report"), n_boot=200, bytes_per_token=10.83e9)
    probe = page.parent / "probe.html"  # the report plus the probe script; the report itself is not touched
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>", 1))
    shot = tmp_path / "report.png"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--window-size={WIDTH_PX},1600", "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / 'prof'}",
            "--dump-dom", probe.as_uri()]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    m = re.search(r'<pre id="sglbench-probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert got["images"] and all(i["ok"] for i in got["images"]), got["images"]
    assert got["errors"] == []
    assert got["viewport"] <= WIDTH_PX and got["scroll_width"] <= got["viewport"], got
    assert all(right <= got["viewport"] for right in got["table_right"]), got
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    f"--window-size={WIDTH_PX},4000", f"--user-data-dir={tmp_path / 'prof2'}",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
