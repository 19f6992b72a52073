"""The audit's metrics for Prometheus, one set per run: pushed to a Pushgateway
(``--metrics-pushgateway URL``, ``$HAPROOF_METRICS_PUSHGATEWAY``) and/or written for
node_exporter's textfile collector (``--metrics-textfile PATH``, ``$HAPROOF_METRICS_TEXTFILE``;
written to a temporary name and renamed by prometheus_client).

Per run (labels ``cluster``; per group ``group``; per check ``check``):

- ``haproof_audit_passed`` 1 when the run passed, else 0; ``haproof_audit_status`` 1 on the
  series whose ``status`` label is the run's (PASSED, FAILED, NO_EVIDENCE);
- ``haproof_audit_check_passed`` and ``haproof_audit_findings`` per check;
- ``haproof_audit_check_evidence`` what each check judged (bytes, records, points);
- ``haproof_audit_bytes_verified`` bytes read on both sides and found identical (``match``);
- ``haproof_audit_differing_bytes`` bytes that differ inside divergent and conflict ranges;
- ``haproof_audit_duration_seconds`` from the command's start, and
  ``haproof_audit_last_run_timestamp_seconds``.

Pushing is best effort: a Pushgateway that cannot be reached is one warning line, never a
changed verdict or exit status.
"""

from __future__ import annotations

import sys
import time
from typing import Any

JOB = "haproof_audit"
STATUSES = ("PASSED", "FAILED", "NO_EVIDENCE")


def registry_of(doc: dict[str, Any], duration_s: float):
    """A prometheus_client registry holding the run's metrics (``doc``: the ``--json``
    document, pipeline/audit_json.py)."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    cluster = doc["cluster"]

    def gauge(name: str, what: str, labels: tuple[str, ...]) -> Gauge:
        return Gauge(name, what, ("cluster", *labels), registry=reg)

    gauge("haproof_audit_passed", "1 when the audit run passed", ()).labels(cluster).set(
        1 if doc["passed"] else 0
    )
    status = gauge("haproof_audit_status", "1 on the run's status", ("status",))
    for s in STATUSES:
        status.labels(cluster, s).set(1 if doc["status"] == s else 0)
    passed = gauge("haproof_audit_check_passed", "1 when the check passed", ("group", "check"))
    findings = gauge("haproof_audit_findings", "findings of the check", ("group", "check"))
    evidence = gauge("haproof_audit_check_evidence", "what the check judged", ("group", "check"))
    verified = gauge("haproof_audit_bytes_verified", "bytes identical on both sides", ("group",))
    differ = gauge("haproof_audit_differing_bytes", "bytes that differ", ("group",))
    for g in doc["groups"]:
        for c in g["checks"]:
            passed.labels(cluster, g["name"], c["name"]).set(1 if c["status"] == "pass" else 0)
            findings.labels(cluster, g["name"], c["name"]).set(c["findings"])
            evidence.labels(cluster, g["name"], c["name"]).set(c["evidence"])
        verified.labels(cluster, g["name"]).set(g["ranges"].get("match", {}).get("bytes", 0))
        differ.labels(cluster, g["name"]).set(
            sum(r.get("differingBytes", 0) for r in g["ranges"].values())
        )
    gauge("haproof_audit_duration_seconds", "the run's wall time", ()).labels(cluster).set(
        duration_s
    )
    gauge("haproof_audit_last_run_timestamp_seconds", "when the run ended", ()).labels(cluster).set(
        time.time()
    )
    return reg


def publish(
    doc: dict[str, Any], duration_s: float, pushgateway: str | None, textfile: str | None
) -> None:
    """Push and/or write the run's metrics; a failure is one line on stderr."""
    if not pushgateway and not textfile:
        return
    from prometheus_client import push_to_gateway, write_to_textfile

    reg = registry_of(doc, duration_s)
    if pushgateway:
        try:
            push_to_gateway(
                pushgateway,
                job=JOB,
                grouping_key={"cluster": doc["cluster"]},
                registry=reg,
                timeout=10,
            )
        except OSError as exc:
            print(
                f"haproof audit: warning: metrics not pushed to {pushgateway}: {exc}",
                file=sys.stderr,
            )
    if textfile:
        try:
            write_to_textfile(textfile, reg)
        except OSError as exc:
            print(
                f"haproof audit: warning: metrics not written to {textfile}: {exc}", file=sys.stderr
            )
