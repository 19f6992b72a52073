"""The demo's archive and audit: every node's history in S3, the nightly audit DAG through
``airflow dags test``, and the verdict with what the offset audit judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tools.demo.base import (
    CLUSTER,
    GROUP,
    MASTER,
    REPO,
    SLAVE,
    Demo,
    DemoError,
    haproof,
    has_module,
)
from tools.demo.cluster import node_at, stop_nodes


def archive(d: Demo) -> None:
    d.step("archive: every node's commit log, snapshots and events in S3")
    if has_module("broker.archive.node_archiver"):
        wait_archived(d)
        stop_nodes(d)
        return
    d.skip("in-node archiving", "not built yet (issue #5): shipping each store once")
    stop_nodes(d)
    for node in (MASTER, SLAVE):
        if not any((d.workdir / f"store-{node}" / "commitlog").glob("0*")):
            d.say(f"  {node}: empty commit log, nothing to ship")
            continue
        res = haproof(
            d,
            "archive",
            "--store-dir",
            str(d.workdir / f"store-{node}"),
            "--root",
            d.root,
            "--cluster",
            CLUSTER,
            "--broker-name",
            GROUP,
            "--node",
            node,
            "--broker-id",
            str(d.roles[node][0]),
            "--role",
            d.roles[node][1],
            "--epoch",
            str(d.roles[node][2]),
            timeout_s=600,
        )
        if res.returncode != 0:
            raise DemoError(f"archiving {node} failed: {res.stderr.strip()}")
        d.say(f"  {node}: {res.stderr.strip().splitlines()[-1]}")


def wait_archived(d: Demo) -> None:
    from contracts.object_store import open_store

    store = open_store(d.root)
    deadline = time.monotonic() + 120
    want = {MASTER, SLAVE}
    while True:
        have = {
            o.key.split("/")[3]
            for o in store.list(f"v1/{CLUSTER}/{GROUP}/")
            if "/commitlog/" in o.key and o.key.endswith(".json")
        }
        if want <= have and len(elections_archived(store)) >= 2:
            break
        if time.monotonic() > deadline:
            raise DemoError(
                f"archive has chunks of {sorted(have)} and {len(elections_archived(store))} "
                "election record(s) only after 120 s"
            )
        time.sleep(0.2)
    d.say(f"  chunks archived for {', '.join(sorted(want))}; the controller's elections too")


def elections_archived(store) -> list[str]:
    """The controller's ``elected`` records of the group in the archive."""
    from contracts.controller_archive import controller_events_prefix

    prefix = controller_events_prefix(CLUSTER, GROUP)
    return [o.key for o in store.list(prefix) if "-elected-" in o.key.rsplit("/", 1)[-1]]


def run_dag(d: Demo, log_path: Path) -> int:
    """``airflow db migrate`` then ``airflow dags test haproof_nightly_audit``; the test's
    exit code (its output goes to ``log_path``)."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    env = {
        **os.environ,
        **d.env,
        "AIRFLOW_HOME": str(d.workdir / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "GX_ANALYTICS_ENABLED": "False",
    }
    with open(log_path, "wb") as log_file:
        for argv in (
            [airflow, "db", "migrate"],
            [
                airflow,
                "dags",
                "test",
                "haproof_nightly_audit",
                "-c",
                json.dumps({"root": d.root, "cluster": CLUSTER}),
            ],
        ):
            rc = subprocess.run(argv, env=env, stdout=log_file, stderr=log_file).returncode
            if rc != 0 and argv[1] == "db":
                raise DemoError(f"airflow db migrate failed; see {log_path}")
    return rc


def audit(d: Demo) -> int:
    d.step("nightly audit DAG: airflow dags test haproof_nightly_audit (Spark + GX)")
    log_path = d.workdir / "airflow.log"
    rc = run_dag(d, log_path)
    from contracts import archive_layout as layout
    from contracts.object_store import open_store

    store = open_store(d.root)
    reports = sorted(o.key for o in store.list("audits/") if o.key.endswith("dag_report.json"))
    if not reports:
        raise DemoError(f"the DAG wrote no report (exit {rc}); see {log_path}")
    report = json.loads(store.get(reports[-1]))
    local = d.workdir / "report"
    prefix = reports[-1].rsplit("/", 1)[0] + "/"
    for o in store.list(prefix):
        dest = local / o.key[len(prefix) :]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(store.get(o.key))
    d.step("verdict")
    across = print_verdict(d, report, offsets_judged(store, report["runId"]), local, prefix)
    verdict = json.loads(store.get(layout.audit_verdict_key(report["runId"])))
    blind_zero = print_offsets_and_delivery(d, verdict)
    print(f"  logs: {d.workdir}/*.log; Airflow: {log_path}")
    print(f"  acknowledged sends: {d.acked}")
    for note in d.notes:
        print(f"  note: {note}")
    passed = report["passed"] and across and blind_zero
    print("PASSED" if passed else "FAILED", flush=True)
    return 0 if passed else 1


def print_verdict(d: Demo, report: dict, judged: dict, local: Path, prefix: str) -> bool:
    """Each group's checks, the suites, where the reports are and what the offset audit
    judged; whether it judged offsets on both sides of the failover."""
    for g in report["audit"]["groups"]:
        print(f"  {CLUSTER}/{g['brokerName']} (master {g['master']}):")
        for c in g["checks"]:
            mark = "PASS" if c["passed"] else "FAIL"
            print(f"    {mark}  {c['name']:<26} findings {c['findings']}")
    for gx in report["expectations"]:
        mark = "PASS" if gx["success"] else "FAIL"
        print(f"    {mark}  GX suites                  failed {gx['failedSuites'] or 'none'}")
        print(f"  report: {local / gx['report'][len(prefix) :]}")
    print(
        f"  offsets judged: {judged['groups']} consumer group(s), {judged['queues']} "
        f"queue(s), {judged['points']} point(s); master points on epoch(s) "
        f"{', '.join(map(str, judged['epochs'])) or 'none'}"
    )
    across = len(judged["epochs"]) >= 2 or any("failover" in n for n in d.notes)
    if not across:
        print("  offsets were NOT judged on both sides of the failover")
    for name in report.get("reports", {}):  # the evidence page (verdict, witnesses, plots)
        print(f"  evidence report: {local / name / 'report.html'}")
    print(f"  archive: {d.root} (endpoint {d.s3.endpoint_url if d.s3 else '-'})")
    return across


def print_offsets_and_delivery(d: Demo, verdict: dict) -> bool:
    """verdict.json's ``offsets`` (the largest unobserved window: 0 when every commit is a
    record in the log), ``delivery`` counts and the elections the audit judged; whether the
    blind window is 0."""
    offsets = verdict.get("offsets") or {}
    blind = offsets.get("blindWindowMs")
    groups = offsets.get("groups") or {}
    evidence = ", ".join(f"{g}: {v['evidence']} ({v['points']})" for g, v in groups.items())
    print(
        f"  offsets.blindWindowMs: {blind} ({offsets.get('records', 0)} commit record(s); "
        f"{evidence or 'no group'})"
    )
    dl = verdict.get("delivery") or {}
    print(
        f"  delivery: enqueued {dl.get('enqueued')}, duplicated {dl.get('duplicated')}, "
        f"redelivered {dl.get('redelivered')}, lost {dl.get('lost')}"
    )
    for e in verdict.get("elections") or []:
        if e["kind"] == "elected":
            clean = "UNCLEAN" if e.get("unclean") else "from the SyncStateSet"
            who = node_at(d, e["node"])
            print(f"  election: {who} master under epoch {e['masterEpoch']} ({clean})")
    if blind != 0:
        print("  offsets were NOT all observed (blind window above 0)")
    return blind == 0


def offsets_judged(store, run_id: str) -> dict:
    """What the offset audit judged, from the run's ``offset_timeline`` table: consumer
    groups, (group, topic, queue) series, points, and the epochs with master points."""
    import io

    import pandas as pd

    from contracts import archive_layout as layout

    key = f"{layout.audit_run_prefix(run_id)}{GROUP}/offset_timeline.parquet"
    if not store.exists(key):
        return {"groups": 0, "queues": 0, "points": 0, "epochs": []}
    df = pd.read_parquet(io.BytesIO(store.get(key)))
    if df.empty:
        return {"groups": 0, "queues": 0, "points": 0, "epochs": []}
    masters = df[df["role"] != "SLAVE"]
    return {
        "groups": int(df["group_name"].nunique()),
        "queues": len(df[["group_name", "topic", "queue_id"]].drop_duplicates()),
        "points": len(df),
        "epochs": sorted(int(e) for e in masters["epoch"].unique()),
    }
