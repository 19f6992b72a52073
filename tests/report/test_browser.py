"""The report as a person sees it: opened from disk in headless Debian Chromium, offline.

Each page is judged on what renders: the headline, the witness offset, plots that carry marks
and ink, and that no request other than the page itself was attempted.
"""

from __future__ import annotations

import pytest

from contracts.object_store import open_store
from expectations.evidence import build_and_publish_report
from tests.report import runs
from tests.report.browser import browser_context, ink, open_page, screenshot

SCENARIOS = ("passing", "failing", "missing_object", "incomplete")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("reports")
    store = open_store(f"file://{path}")
    runs.write_archive(store)
    for scenario in SCENARIOS:
        runs.write_run(store, f"run-{scenario}", scenario)
        build_and_publish_report(store, f"run-{scenario}", runs.GROUP)
    return path


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    pw, context = browser_context(tmp_path_factory)
    yield context
    context.close()
    pw.stop()


def _open(ctx, root, scenario):
    url = (root / "audits" / f"run-{scenario}" / runs.GROUP / "report.html").as_uri()
    page, visit = open_page(ctx, url)
    # the page and nothing else: no stylesheet, script, font or image from anywhere
    assert visit.requests == [url]
    assert not visit.failed and not visit.console_errors, (visit.failed, visit.console_errors)
    return page


def _plot_marks(page) -> dict[str, int]:
    """Drawn marks per plot kind (lines with points, range bars, event lines), as rendered."""
    return page.evaluate(
        """() => {
        const out = {};
        for (const svg of document.querySelectorAll('svg.plot')) {
            const marks = [...svg.querySelectorAll('polyline, rect.range, g.event line, circle')]
                .filter(e => { const b = e.getBoundingClientRect(); return b.width + b.height > 0; });
            out[svg.dataset.plot] = (out[svg.dataset.plot] || 0) + marks.length;
        }
        return out;
    }"""
    )


def _assert_plots_drawn(page, name: str) -> None:
    marks = _plot_marks(page)
    assert marks.get("lag", 0) > 10 and marks.get("offsets", 0) > 10 and marks.get("ranges", 0) >= 2
    for kind in ("lag", "ranges"):
        shot = screenshot(page, f"{name}-{kind}", page.locator(f'svg[data-plot="{kind}"]').first)
        assert ink(shot) > 0.01, f"{kind} plot rendered blank"


def test_passing_report(ctx, root):
    page = _open(ctx, root, "passing")
    screenshot(page, "passing")
    assert page.inner_text("#verdict") == "PASSED"
    assert "Every check passed." in page.inner_text("#why")
    # the failover is on the lag plot, the epochs on the offsets plot
    lag = page.locator('svg[data-plot="lag"]')
    assert "SLAVE \u2192 SYNC_MASTER (epoch 2)" in lag.text_content()
    assert "epoch 2 (broker-a-1)" in page.locator('svg[data-plot="offsets"]').first.text_content()
    _assert_plots_drawn(page, "passing")
    # check 4's coverage cell: a row per consumer group, on screen and inside the page's width
    coverage = page.locator("#offset-coverage table.coverage")
    assert coverage.is_visible()
    g1 = coverage.locator("tbody tr", has_text="g1")
    assert g1.locator("td").nth(1).inner_text() == "every commit record"
    assert g1.locator("td").last.inner_text() == "0 ms"
    assert page.inner_text("#offset-coverage strong.blind") == "1 min"
    box = page.locator("#offset-coverage").bounding_box()
    assert box and box["x"] + box["width"] <= page.viewport_size["width"]
    delivery = page.locator("#check-delivery table.delivery")
    assert delivery.is_visible() and "39" in delivery.inner_text()


def test_failing_report_shows_the_witnesses(ctx, root):
    page = _open(ctx, root, "failing")
    screenshot(page, "failing")
    assert page.inner_text("#verdict") == "FAILED"
    why = page.inner_text("#why")
    assert f"first differing byte at offset {runs.DIVERGE_AT}" in why
    assert f"acknowledged bytes [{runs.LOST[0]}, {runs.LOST[1]})" in why
    assert "went from 159 to 120" in why
    witness = page.locator(".witness.divergence")
    assert witness.locator("strong.offset").inner_text() == str(runs.DIVERGE_AT)
    assert witness.locator("tr.differs").count() == 3  # body length, CRC, record size
    assert witness.is_visible()
    # the regression's marker is drawn on its queue's plot
    assert page.locator('svg[data-plot="offsets"] g.violation path').first.bounding_box()
    _assert_plots_drawn(page, "failing")


def test_missing_object_report(ctx, root):
    page = _open(ctx, root, "missing_object")
    screenshot(page, "missing-object")
    assert page.inner_text("#verdict") == "FAILED"
    section = page.inner_text("#check-archive_integrity")
    assert "log_missing" in section and "00000000000001048576-00000000000002097152-1.log" in section


def test_incomplete_run_report(ctx, root):
    page = _open(ctx, root, "incomplete")
    screenshot(page, "incomplete")
    assert page.inner_text("#verdict") == "INCOMPLETE RUN"
    banner = page.inner_text("#incomplete")
    assert "verdict.json is missing" in banner
    assert "offset_violations.parquet is missing" in banner


def test_the_harness_sees_an_off_disk_request_and_a_blank_plot(ctx, tmp_path):
    """The checks above can fail: a page that fetches something is caught, a blank SVG has no ink."""
    page_file = tmp_path / "leaky.html"
    page_file.write_text(
        '<!doctype html><link rel="stylesheet" href="http://127.0.0.1:9/x.css">'
        '<svg data-plot="blank" width="300" height="100"></svg>'
    )
    page, visit = open_page(ctx, page_file.as_uri())
    assert "http://127.0.0.1:9/x.css" in visit.requests
    shot = screenshot(page, "harness-blank", page.locator("svg"))
    assert ink(shot) == 0.0


LAYOUT = r"""() => {
    const doc = document.documentElement;
    const broken = [];
    for (const td of document.querySelectorAll('td.num')) {
        const r = document.createRange();
        r.selectNodeContents(td);
        const lines = new Set([...r.getClientRects()].map(b => Math.round(b.top)));
        if (lines.size > 1) broken.push(td.textContent);
    }
    const words = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const td = n.parentElement.closest('td');
        const text = n.textContent.trim();
        if (!td || td.matches('.key') || !text || /\s/.test(text)) continue;
        const r = document.createRange();
        r.selectNodeContents(n);
        const lines = new Set([...r.getClientRects()].map(b => Math.round(b.top)));
        if (lines.size > 1) words.push(text);
    }
    const overflowing = [...document.querySelectorAll('section')]
        .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.id);
    return {page: doc.scrollWidth - window.innerWidth, broken, words, overflowing};
}"""


@pytest.mark.parametrize("width", [1000, 1600])
def test_failing_report_shows_the_bytes_and_fits(ctx, root, width):
    page = _open(ctx, root, "failing")
    page.set_viewport_size({"width": width, "height": 900})
    witness = page.locator(".witness.divergence")
    screenshot(page, f"failing-{width}px")
    screenshot(page, f"failing-{width}px-witness", witness)
    # the differing bytes counted (not the range's 1 MiB), and in words beside the counts
    assert f"{runs.DIFFERING_BYTES} differing byte(s) in the range" in witness.inner_text()
    assert f"{runs.DIFFERING_BYTES:,} byte(s) differ inside the divergent ranges" in (
        page.inner_text("#check-replica_consistency")
    )
    # both replicas' bytes around the first difference, the differing ones marked: hex and
    # ASCII, on the master's line and the slave's, the first one loudest
    dump = witness.locator("table.hexdump")
    assert dump.locator("tbody tr").count() == 2 * 128 // 16
    assert dump.locator("mark").count() == runs.DIFFERING_BYTES * 2 * 2
    first = dump.locator("mark.first")
    assert first.count() == 4 and first.first.inner_text() == f"{runs._M_WINDOW[64]:02x}"
    assert str(runs.DIVERGE_AT - 64) in dump.locator("tbody tr").first.inner_text()
    # no raw JSON in the ranges table: the detail says where the witness is
    ranges_text = page.inner_text("#check-replica_consistency table.witnesses")
    assert "firstDifferingOffset" not in ranges_text and "witness below" in ranges_text
    # fits: no horizontal scrolling of the page or a section, no number or word broken over
    # lines (only long object keys and ids may break)
    layout = page.evaluate(LAYOUT)
    assert layout == {"page": 0, "broken": [], "words": [], "overflowing": []}, layout
