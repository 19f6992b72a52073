"""The report opened straight from object storage: the embedded S3 server on 127.0.0.1 serves
report.html (through a presigned URL) as a page (text/html), and the page asks for nothing else."""

from __future__ import annotations

import urllib.request

import pytest

from contracts.object_store import open_store
from expectations.evidence import build_and_publish_report
from tests.report import runs
from tests.report.browser import browser_context, open_page, screenshot
from tools.s3server import S3Server


@pytest.fixture(scope="module")
def s3():
    with S3Server.start() as server:
        server.create_bucket("reports")
        yield server


def test_report_opens_from_the_bucket(s3, tmp_path_factory):
    store = open_store("s3://reports/arch", **s3.store_options())
    runs.write_archive(store)
    runs.write_run(store, "run-s3", "failing")
    key = build_and_publish_report(store, "run-s3", runs.GROUP)
    # a private bucket: the link a reviewer is handed is a presigned GET
    url = s3.client().generate_presigned_url(
        "get_object", Params={"Bucket": "reports", "Key": f"arch/{key}"}, ExpiresIn=600
    )
    with urllib.request.urlopen(url, timeout=10) as res:
        assert res.headers["Content-Type"].startswith("text/html")

    pw, ctx = browser_context(tmp_path_factory, offline=False)
    try:
        others: list[str] = []

        def only_the_page(route):
            if route.request.url == url:
                return route.continue_()
            others.append(route.request.url)
            return route.abort()

        ctx.route("**/*", only_the_page)
        page, visit = open_page(ctx, url)
        screenshot(page, "s3-failing")
        assert others == [] and visit.requests == [url]
        assert page.inner_text("#verdict") == "FAILED"
        assert str(runs.DIVERGE_AT) in page.inner_text(".witness.divergence")
        assert page.locator('svg[data-plot="lag"] polyline').count() == 2
    finally:
        ctx.close()
        pw.stop()
