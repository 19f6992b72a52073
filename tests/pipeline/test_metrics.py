"""The audit's metrics: pushed to a Pushgateway over HTTP (a real server on 127.0.0.1), written
for node_exporter's textfile collector, and a Pushgateway that is down is one warning line."""

from __future__ import annotations

import http.server
import threading

import pytest

from pipeline.audit_json import audit_document
from pipeline.metrics import publish, registry_of
from tests.pipeline.test_audit_json import _run, _verdict


@pytest.fixture
def doc():
    return audit_document(*_run([_verdict("broker-0", False), _verdict("broker-1", True)], True))


def _text(reg) -> str:
    from prometheus_client import generate_latest

    return generate_latest(reg).decode()


def test_the_run_as_metrics(doc):
    text = _text(registry_of(doc, 12.5))
    for line in (
        'haproof_audit_passed{cluster="c1"} 0.0',
        'haproof_audit_status{cluster="c1",status="FAILED"} 1.0',
        'haproof_audit_status{cluster="c1",status="PASSED"} 0.0',
        'haproof_audit_check_passed{check="replica_consistency",cluster="c1",group="broker-1"} 0.0',
        'haproof_audit_findings{check="replica_consistency",cluster="c1",group="broker-1"} 1.0',
        'haproof_audit_check_passed{check="log_integrity",cluster="c1",group="broker-0"} 1.0',
        'haproof_audit_bytes_verified{cluster="c1",group="broker-0"} 2048.0',
        'haproof_audit_differing_bytes{cluster="c1",group="broker-1"} 1.0',
        'haproof_audit_duration_seconds{cluster="c1"} 12.5',
    ):
        assert line in text.splitlines(), line


class _Gateway(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_PUT(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Gateway.got.append((self.command, self.path, body.decode()))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_pushed_over_http_and_written_as_a_textfile(doc, tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        publish(doc, 3.0, url, str(tmp_path / "haproof.prom"))
    finally:
        server.shutdown()
        server.server_close()
    ((method, path, body),) = _Gateway.got
    assert (method, path) == ("PUT", "/metrics/job/haproof_audit/cluster/c1")
    assert 'haproof_audit_passed{cluster="c1"} 0.0' in body
    assert 'haproof_audit_passed{cluster="c1"} 0.0' in (tmp_path / "haproof.prom").read_text()


def test_a_gateway_that_is_down_is_one_warning(doc, capsys):
    with socket_closed() as url:
        publish(doc, 1.0, url, None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"haproof audit: warning: metrics not pushed to {url}"
    )


class socket_closed:  # noqa: N801 (a context manager used as a phrase)
    """The URL of a port nothing listens on (bound, then closed)."""

    def __enter__(self) -> str:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        return None


def test_the_grafana_dashboard_queries_only_metrics_the_audit_exports(doc):
    import json
    import re
    from pathlib import Path

    board = json.loads(
        (
            Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "haproof-audit.json"
        ).read_text()
    )
    exported = {m.name for m in registry_of(doc, 1.0).collect()}
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bhaproof_\w+", e)}
    assert used and used <= exported, used - exported
    assert {"haproof_audit_passed", "haproof_audit_findings"} <= used
