"""Data Docs that render offline: the CDN assets come from the locked npm copy beside the site."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.object_store import open_store
from expectations import run_suites
from expectations.datadocs import (
    ASSETS,
    make_offline,
    node_modules,
    offsite_resources,
    rewrite_page,
)
from expectations.evidence import build_and_publish_report
from tests.report import runs
from tests.report.browser import browser_context, open_page, screenshot

GX_TEMPLATES = (
    Path(__import__("great_expectations").__file__).parent / "render" / "view" / "templates"
)


def test_every_cdn_reference_in_gx_templates_is_mapped():
    """Each remote stylesheet/script the installed GX's templates name has a local copy."""
    for name in ("page.j2", "index_page.j2", "js_script_imports.j2", "page_minimal.j2"):
        text = (GX_TEMPLATES / name).read_text()
        assert offsite_resources(text), f"{name}: expected CDN references to rewrite"
        left = offsite_resources(rewrite_page(text, "../"))
        assert left == [], f"{name}: still off-site after rewriting: {left}"
    for _, rel in ASSETS:
        assert (node_modules() / rel).is_file(), f"{rel} not installed (scripts/bootstrap: npm ci)"


def test_offsite_resources_sees_remote_tags_and_css_urls():
    page = '<img src="//cdn.example/x.png"><a href="https://example.org">doc</a>'
    css = "a{background:url('https://example.org/a.png')}"
    assert len(offsite_resources(page)) == 1  # the image; a link is not a fetch
    assert len(offsite_resources(css)) == 1


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("gx-offline")
    store = open_store(f"file://{root}")
    runs.write_archive(store)
    runs.write_run(store, "run-docs", "failing")
    run_suites(store, "run-docs", runs.GROUP)
    build_and_publish_report(store, "run-docs", runs.GROUP)
    return root / "audits" / "run-docs" / runs.GROUP


def test_published_site_points_nowhere_off_site(site):
    docs = site / "report"
    pages = sorted(docs.rglob("*.html"))
    assert len(pages) >= 5
    for page in pages + sorted((docs / "static" / "styles").glob("*.css")):
        assert offsite_resources(page.read_text()) == [], page
    assert (docs / "static" / "vendor" / "jquery" / "dist" / "jquery.min.js").is_file()
    assert make_offline(docs) == []  # idempotent on an already rewritten site


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    pw, context = browser_context(tmp_path_factory)
    yield context
    context.close()
    pw.stop()


def test_data_docs_render_offline_in_chromium(ctx, site):
    docs = site / "report"
    base = docs.as_uri() + "/"
    validation = next(docs.glob("validations/haproof_ranges/*/*/*.html"))
    for name, path in (("datadocs-index", docs / "index.html"), ("datadocs-ranges", validation)):
        page, visit = open_page(ctx, path.as_uri())
        screenshot(page, name)
        assert [u for u in visit.requests if not u.startswith(base)] == []
        assert not visit.failed and not visit.console_errors, (visit.failed, visit.console_errors)
        loaded = page.evaluate(
            "() => [!!window.jQuery && !!jQuery.fn.bootstrapTable, typeof vegaEmbed,"
            " getComputedStyle(document.querySelector('.navbar')).display]"
        )
        assert loaded == [True, "function", "flex"], loaded  # scripts ran, Bootstrap styled it
    # the index lists the run's validations (bootstrap-table fills it from script)
    page, _ = open_page(ctx, (docs / "index.html").as_uri())
    assert page.locator("table tbody tr").count() >= 4
    assert (
        page.locator("i.fas, i.fa")
        .first.evaluate("e => getComputedStyle(e, '::before').fontFamily")
        .find("Font Awesome")
        >= 0
    )


def test_report_links_the_data_docs(ctx, site):
    page, visit = open_page(ctx, (site / "report.html").as_uri())
    assert visit.requests == [(site / "report.html").as_uri()]
    link = page.locator("a#data-docs")
    assert link.get_attribute("href") == "report/index.html"
    link.click()
    page.wait_for_load_state("load")
    assert page.url == (site / "report" / "index.html").as_uri()
