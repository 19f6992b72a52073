"""The audit's verdict on generated fault archives equals the generator's truth.

Each Hypothesis example builds every fault class of :data:`tests.faults.cases.FAULTS` as its
own broker group in ONE ``file://`` archive root and audits them all in one ``run_audit`` call
(one Spark session). For every group it asserts, against ``contracts.audit_tables``:

* the run status (PASSED / FAILED / NO_EVIDENCE) and each check's status (pass / fail /
  no_evidence, the latter with a reason) equal the truth: no false pass, no false fail;
* every witness row is in the group's tables (exact key, range, offset, values) and no
  forbidden row is; every table has exactly the contract's columns;
* nothing raises; and the Great Expectations suites fail exactly when the audit fails.

Run alone with ``pytest -m faults tests/faults``; ``HAPROOF_FAULT_EXAMPLES`` (default 2) sets
how many examples (each about 25 groups) Hypothesis builds; ``HAPROOF_FAULT_CLASSES=a,b`` builds
only those classes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from contracts import audit_tables as at
from contracts.object_store import StoreSpec
from tests.faults.cases import FAULTS, build_all
from tests.faults.generator import MAX_LAG_BYTES, scratch_dir
from tests.faults.judge import judge
from tests.spark_jobs.builder import CLUSTER

# each example: ~26 groups built, one audit run, then the GX suites per group (~4-5 min on 2
# cores, most of it GX); the default 2 examples take ~10 min, above the suite's 600 s timeout
pytestmark = [pytest.mark.faults, pytest.mark.timeout(60 * 40)]

EXAMPLES = int(os.environ.get("HAPROOF_FAULT_EXAMPLES", "2"))
#: a comma-separated subset of fault classes (default: all), to look at a few at a time
SELECTED = tuple(
    f.strip() for f in os.environ.get("HAPROOF_FAULT_CLASSES", ",".join(FAULTS)).split(",")
)
RUNS = {"examples": 0, "cases": 0}

SPARK_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example is a Spark run
    database=None,
)


@SPARK_SETTINGS
@given(data=st.data())
def test_the_audit_judges_every_fault_class_as_its_truth_says(spark, data) -> None:
    from expectations import run_suites
    from spark_jobs.audit import AuditOptions, run_audit

    with tempfile.TemporaryDirectory(prefix="haproof-faults-", dir=scratch_dir()) as tmp:
        root = Path(tmp) / "archive"
        built = build_all(root, Path(tmp) / "work", data.draw, SELECTED)
        spec = StoreSpec(f"file://{root}")
        run_id = f"faults-{RUNS['examples']}"
        opts = AuditOptions(spec=spec, cluster=CLUSTER, run_id=run_id, max_lag_bytes=MAX_LAG_BYTES)
        try:
            run_audit(spark, opts)
        except Exception as exc:  # the contract: a fault is a finding, never a crash
            pytest.fail(f"the audit raised on {len(built)} fault archives: {exc!r}")
        store = spec.open()
        problems = []
        for _b, case in built:
            problems += judge(store, run_id, case)
            report = run_suites(store, run_id, case.group, {"max_lag_bytes": MAX_LAG_BYTES})
            failed = [s.suite for s in report.suites if not s.success]
            audit_status = _status(store, run_id, case.group)
            for whose, status in (("truth", case.expected_run), ("audit", audit_status)):
                if report.success != at.run_passed(status, require_evidence=False):
                    problems.append(
                        f"{case.describe()}: GX success={report.success} "
                        f"({failed}) but the {whose} says {status}"
                    )
        RUNS["examples"] += 1
        RUNS["cases"] += len(built)
        print(
            f"fault archives: {RUNS['cases']} cases in {RUNS['examples']} audit run(s), "
            f"{len(FAULTS)} fault classes"
        )
        assert not problems, f"{len(problems)} mismatch(es):\n" + "\n".join(problems)


def _status(store, run_id: str, group: str) -> str | None:
    key = f"audits/{run_id}/{group}/verdict.json"
    return json.loads(store.get(key)).get("status") if store.exists(key) else None


@settings(SPARK_SETTINGS, max_examples=1)
@given(data=st.data())
def test_the_cli_reports_faults_and_missing_evidence_with_exit_codes(data) -> None:
    """Through ``haproof audit`` as a user runs it: a fault exits 1 with no traceback, a group
    with nothing to judge exits 0, or 1 under ``--require-evidence``; a clean group exits 0."""
    faults = ("clean", "single-node-no-offsets", "log-missing", "sha256-flip-single-node")
    with tempfile.TemporaryDirectory(prefix="haproof-faults-", dir=scratch_dir()) as tmp:
        root = Path(tmp) / "archive"
        built = {c.fault: c for _b, c in build_all(root, Path(tmp) / "work", data.draw, faults)}

        def audit(fault: str, *extra: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "broker.cli",
                    "audit",
                    "--root",
                    f"file://{root}",
                    "--cluster",
                    CLUSTER,
                    "--broker-name",
                    built[fault].group,
                    "--spark-master",
                    "local[1]",
                    "--no-expectations",
                    *extra,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )

        for fault, extra, want in (
            ("clean", (), 0),
            ("log-missing", (), 1),
            ("sha256-flip-single-node", (), 1),  # a flip outside any body, no replica to tell
            ("single-node-no-offsets", (), 0),
            ("single-node-no-offsets", ("--require-evidence",), 1),
        ):
            res = audit(fault, *extra)
            out = res.stdout + res.stderr
            assert res.returncode == want, f"{fault} {extra}: exit {res.returncode}\n{out[-3000:]}"
            assert "Traceback" not in out, out[-3000:]
            assert res.stdout.rstrip().endswith(built[fault].expected_run), res.stdout[-2000:]
