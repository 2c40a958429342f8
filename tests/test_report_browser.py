"""The HTML report checked as a person sees it: rendered by headless Chromium in a 1280 px
wide window, every figure must load, nothing may stick out sideways and the page must not
be blank. The other report tests read the written text; only a browser sees a figure that
does not decode or a table that pushes the page wider than the screen.

No browser driver is needed (none can be downloaded here): a copy of the page gets a small
script that, on `load`, measures the page and writes the result as JSON into the DOM, and
`chromium --dump-dom` prints that DOM. scripts/test.sh installs Debian's `chromium`."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlas.report import build_report
from dlas.report.experiments import load_experiment
from tests.test_report import make_db, report_db, row  # noqa: F401  (report_db: a fixture)
from tests.test_report_layouts import in_layout

CHROMIUM = Path("/usr/bin/chromium")
#: The width a reader's laptop screen gives the page; the report must fit it.
WIDTH = 1280

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"no Chromium at {CHROMIUM}: scripts/test.sh installs Debian's `chromium` "
           "package when run as root (apt-get install chromium)")

#: Runs once the page and its images have loaded; measures before it adds its own <pre>,
#: so the measurement does not include itself. An overflow is reported as the outermost
#: elements that stick out, with the heading of their section, so a failure says where.
_CHECK = """<script>
window.addEventListener('load', () => {
  const root = document.documentElement, limit = root.clientWidth;
  const sticksOut = el => { const r = el.getBoundingClientRect();
                            return r.right > limit + 0.5 || r.left < -0.5; };
  const section = el => {
    while (el.parentElement && el.parentElement !== document.body) el = el.parentElement;
    for (; el; el = el.previousElementSibling)
      if (/^H[1-6]$/.test(el.tagName)) return el.textContent;
    return '(top of the page)';
  };
  const wide = [...document.body.querySelectorAll('*')]
    .filter(el => sticksOut(el) && !(el.parentElement && sticksOut(el.parentElement)))
    .slice(0, 10)
    .map(el => ({tag: el.tagName.toLowerCase(), width: Math.round(el.getBoundingClientRect().width),
                 right: Math.round(el.getBoundingClientRect().right), section: section(el),
                 text: el.textContent.trim().slice(0, 100)}));
  const images = [...document.images].map(img => ({
    complete: img.complete, naturalWidth: img.naturalWidth,
    shownWidth: Math.round(img.getBoundingClientRect().width), alt: img.alt.slice(0, 80)}));
  const result = {innerWidth: window.innerWidth, clientWidth: limit,
                  scrollWidth: root.scrollWidth, wide: wide, images: images,
                  tables: document.querySelectorAll('table').length,
                  text: document.body.innerText.trim().length};
  const out = document.createElement('pre');
  out.id = 'dlas-check';
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


def browser_check(page: Path, tmp: Path, width: int = WIDTH) -> dict[str, Any]:
    """What Chromium measured on `page` in a `width` px wide window.

    The copy with the script sits beside the page, so anything the page links relatively
    still resolves. A fresh, empty profile and the background-networking flags keep
    Chromium from reaching out (the network may be closed) or reading a user's profile."""
    checked = page.with_name(f".{page.stem}-browser-check.html")
    checked.write_text(page.read_text().replace("</body>", _CHECK + "</body>", 1))
    profile = tmp / "chromium-profile"
    profile.mkdir(exist_ok=True)
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", f"--window-size={width},900",
           "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        checked.unlink()
    found = re.search(r'<pre id="dlas-check">(.*?)</pre>', done.stdout, re.S)
    assert found, (f"Chromium wrote no check result (exit {done.returncode}); its stderr "
                   f"ends:\n{done.stderr[-2000:]}")
    return json.loads(html.unescape(found.group(1)))


def assert_reads_well(result: dict[str, Any], width: int = WIDTH) -> None:
    """The three things a reader notices first: missing figures, a page wider than the
    screen, a blank page."""
    assert result["innerWidth"] == width, f"the window is not {width} px wide: {result}"
    broken = [img for img in result["images"]
              if not img["complete"] or img["naturalWidth"] <= 0 or img["shownWidth"] <= 0]
    assert not broken, f"figures that did not load or show: {broken}"
    assert result["scrollWidth"] <= result["clientWidth"], (
        f"the page is {result['scrollWidth']} px wide in a {result['clientWidth']} px "
        f"window; too wide: {json.dumps(result['wide'], indent=1, ensure_ascii=False)}")
    assert not result["wide"], f"elements stick out of the window: {result['wide']}"
    assert result["text"] > 2000, f"almost no visible text: {result['text']} characters"
    assert result["tables"] >= 1 and result["images"], (
        f"{result['tables']} tables and {len(result['images'])} figures: the page is empty")


def test_the_report_reads_well_in_a_1280_px_browser_window(report_db: Path,  # noqa: F811
                                                           tmp_path: Path) -> None:
    # Beside test_report.py's points (paper columns, every status, two figures): a point in
    # a blocked layout (the layout table) and a failure whose message carries a long
    # artifact path, as a failed build's does: one unbreakable word in a table cell.
    long_path = ("/home/someone/dlas-workspace/cache/artifacts/resnet18/weight_pruning-0.95/"
                 "gemm_csr-metaschedule-avx512/compiled-6f1d2a9c8e7b4a3f.so")
    make_db(report_db, [
        in_layout(row(model="vgg16", algorithm="direct", ms=15.0), "NCHW8c", block=8),
        row(model="resnet18", compression="weight_pruning", algorithm="spatial_pack_csr",
            sparsity=0.95, status="failed", ms=None,
            error=f"TVMError: cannot load the compiled library {long_path}: no such file"),
    ])
    files = build_report(report_db, tmp_path / "report", sweeps=["s"],
                         experiment=load_experiment("cifar10_cpu"), profile="quick")
    assert len(files.figures) == 2
    result = browser_check(files.html, tmp_path)
    assert len(result["images"]) == len(files.figures)
    assert_reads_well(result)


def test_the_check_sees_a_broken_figure_and_a_too_wide_table(tmp_path: Path) -> None:
    """The check itself: a page with both faults must fail it, naming the wide table."""
    page = tmp_path / "bad.html"
    cells = "".join(f"<td>{'x' * 40}</td>" for _ in range(12))
    page.write_text("<!DOCTYPE html><html><body><h2>Wide section</h2>"
                    f"<table><tr>{cells}</tr></table>"
                    "<img alt='gone' src='figures/missing.png'></body></html>")
    result = browser_check(page, tmp_path)
    assert [img["naturalWidth"] for img in result["images"]] == [0]
    assert result["scrollWidth"] > result["clientWidth"]
    assert result["wide"][0]["tag"] == "table"
    assert result["wide"][0]["section"] == "Wide section"
    with pytest.raises(AssertionError, match="figures that did not load"):
        assert_reads_well(result)

