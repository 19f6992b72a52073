"""Report links (``--report-url``), the HAPROOF_* variables of ``haproof audit`` and the hint
when no AWS credential is found."""

from __future__ import annotations

import os
import urllib.request
import uuid

import pytest

from contracts.errors import AuditInputError
from contracts.object_store import StoreSpec
from pipeline.links import link_maker, relink
from tests.support.haproof_cli import audit

KEY = "audits/r1/broker-a/report.html"


def test_store_and_base_url_links():
    spec = StoreSpec("s3://bkt/arch")
    assert link_maker(spec, None)(f"s3://bkt/arch/{KEY}") == f"s3://bkt/arch/{KEY}"
    base = link_maker(spec, "https://reports.example.com/arch/")
    assert base(f"s3://bkt/arch/{KEY}") == f"https://reports.example.com/arch/{KEY}"
    doc = relink(
        {
            "reports": {"broker-a": f"s3://bkt/arch/{KEY}"},
            "expectations": [{"brokerName": "broker-a", "reportUrl": "s3://bkt/arch/x/index.html"}],
        },
        base,
    )
    assert doc["reports"]["broker-a"].startswith("https://reports.example.com/arch/")
    assert doc["expectations"][0]["reportUrl"] == "https://reports.example.com/arch/x/index.html"
    with pytest.raises(AuditInputError, match="give store, presign or an http"):
        link_maker(spec, "ftp://x")
    with pytest.raises(AuditInputError, match="not under the archive root"):
        base("s3://other/x")


def test_presigned_link_opens_the_report_over_http(s3_server, monkeypatch):
    bucket = f"haproof-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    spec = StoreSpec(f"s3://{bucket}/arch", **s3_server.store_options())
    spec.open().put_mutable(KEY, b"<html>the report</html>")
    monkeypatch.setenv("HAPROOF_REPORT_URL_EXPIRES_S", "600")
    url = link_maker(spec, "presign")(f"s3://{bucket}/arch/{KEY}")
    assert url.startswith(f"{s3_server.endpoint_url}/{bucket}/arch/{KEY}?")
    assert "X-Amz-Expires=600" in url and "X-Amz-Signature=" in url, url  # SigV4
    with urllib.request.urlopen(url, timeout=30) as resp:  # no credentials: the link only
        assert resp.read() == b"<html>the report</html>"


def _clean_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HAPROOF_"))}
    return {
        **env,
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def test_no_credentials_is_one_line_with_the_hint_and_no_retries(tmp_path, s3_server):
    res, took_s = audit(
        "--root",
        "s3://bkt/arch",
        "--cluster",
        "c1",
        "--endpoint-url",
        s3_server.endpoint_url,
        env=_clean_env(tmp_path),
        inherit=False,
        timeout_s=120,
    )
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("haproof audit: cannot open archive root s3://bkt/arch: ")
    assert "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line
    assert took_s < 30, took_s  # not retried with backoff


def test_haproof_variables_stand_for_the_options(tmp_path):
    env = _clean_env(tmp_path)
    res, _ = audit(env=env, inherit=False, timeout_s=120)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "haproof audit: give --root (or $HAPROOF_ARCHIVE_ROOT) and --cluster (or $HAPROOF_CLUSTER)"
    ]
    root = f"file://{tmp_path}/arch"
    env_c9 = {**env, "HAPROOF_ARCHIVE_ROOT": root, "HAPROOF_CLUSTER": "c9"}
    res, _ = audit(env=env_c9, inherit=False, timeout_s=120)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"haproof audit: no cluster 'c9' under {root}: it holds none"
    ]
    env_url = {**env, "HAPROOF_REPORT_URL": "gopher://x"}
    res, _ = audit("--root", root, "--cluster", "c", env=env_url, inherit=False, timeout_s=120)
    assert res.returncode == 2 and "--report-url 'gopher://x'" in res.stderr
