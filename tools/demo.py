"""``haproof demo``: the main job end to end on one machine, with embedded defaults.

1. an S3 API server (moto's, on 127.0.0.1) and a bucket for the archive;
2. a name server, a SYNC_MASTER and its SLAVE as real processes;
3. traffic: a producer sends, a consumer group consumes part of it and commits offsets; the
   demo waits until the slave holds them (SlaveSynchronize) and an archived master snapshot
   carries them;
4. a failover: the master is killed (-9), the slave is promoted, traffic goes on, the group
   consumes from the new master and commits again (until its archived snapshot carries them),
   the old master rejoins as a slave;
5. every node's commit log, snapshots and events in the archive;
6. the nightly audit DAG through ``airflow dags test`` (Spark local mode + GX suites);
7. the verdict, how many consumer groups, queues and offset points the audit judged (and on
   which epochs), and where the HTML data-quality report is.

Everything lives in ``--workdir`` (default ``./haproof-demo``); a non-empty directory is replaced
only when it holds the demo's marker file (``.haproof-demo``): anything else is refused (exit 2).
Processes are stopped at the end, also on failure or Ctrl-C. Exit 0 when the audit passed and
judged offsets on both sides of the failover, 1 otherwise, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from contracts.errors import HaproofError
from tools.localcluster import (
    LocalProcess,
    free_port,
    start_broker,
    start_namesrv,
    write_broker_conf,
)
from tools.s3server import DUMMY_CREDENTIALS, S3Server

CLUSTER = "DemoCluster"
GROUP = "broker-a"
TOPIC = "DemoTopic"
CONSUMER_GROUP = "demo-consumer"
BUCKET = "haproof-demo"
#: written first into a --workdir the demo made; only such a directory is ever deleted
MARKER = ".haproof-demo"
OFFSETS_KEY = f"{TOPIC}@{CONSUMER_GROUP}"
REPO = Path(__file__).resolve().parents[1]


class DemoError(HaproofError):
    """A demo step failed; the message says which and where its logs are."""


def _covers(have: dict, want: dict[int, int]) -> bool:
    """Whether an offset table entry (queue id keys, str or int) holds at least ``want``."""
    table = {int(q): int(o) for q, o in have.items()}
    return all(table.get(q, -1) >= o for q, o in want.items())


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        self.steps = 7
        self.step_no = 0
        self.t0 = time.monotonic()
        self.procs: dict[str, LocalProcess] = {}
        self.s3: S3Server | None = None
        self.root = f"s3://{BUCKET}/archive"
        self.env: dict[str, str] = {}
        self.acked = 0
        self.committed: dict[int, int] = {}  # the group's offsets committed before the failover
        self.notes: list[str] = []
        # node -> (brokerId, role, epoch) at the end, for one-shot shipping
        self.roles = {"broker-a-0": (0, "SYNC_MASTER", 1), "broker-a-1": (1, "SLAVE", 1)}

    # -- output ---------------------------------------------------------------------------------

    def step(self, what: str) -> None:
        self.step_no += 1
        self.say(f"step {self.step_no}/{self.steps}: {what}")

    def say(self, msg: str) -> None:
        print(f"[demo {time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def skip(self, what: str, why: str) -> None:
        self.notes.append(f"{what}: {why}")
        self.say(f"  skipped {what}: {why}")

    # -- steps ----------------------------------------------------------------------------------

    def prepare(self) -> None:
        if self.workdir.exists() and not self.workdir.is_dir():
            raise DemoError(f"--workdir {self.workdir} exists and is not a directory")
        if self.workdir.exists() and any(self.workdir.iterdir()):
            if not (self.workdir / MARKER).is_file():
                raise DemoError(
                    f"--workdir {self.workdir} is not empty and was not made by haproof demo "
                    f"(no {MARKER} file): refusing to delete it; give a new or empty directory"
                )
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / MARKER).write_text("made by haproof demo: replaced by its next run\n")
        self.step(f"embedded S3 server and bucket {BUCKET} (workdir {self.workdir})")
        self.s3 = S3Server.start()
        self.s3.create_bucket(BUCKET)
        self.env = {**DUMMY_CREDENTIALS, "HAPROOF_S3_ENDPOINT": self.s3.endpoint_url}
        os.environ.update(self.env)
        self.say(f"  S3 endpoint {self.s3.endpoint_url}, archive root {self.root}")

    def _conf(self, node: str, broker_id: int, role: str, port: int, ha_port: int, **extra):
        props = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerId": broker_id,
            "brokerRole": role,
            "flushDiskType": "ASYNC_FLUSH",
            "storePathRootDir": self.workdir / f"store-{node}",
            "listenPort": port,
            "haListenPort": ha_port,
            "namesrvAddr": self.procs["namesrv"].addr,
            "nodeName": node,
            "mappedFileSizeCommitLog": 1024 * 1024,
            "flushConsumerOffsetInterval": 1000,
            "slaveSyncIntervalMs": 1000,
            "archiveEnable": "true",
            "archiveRoot": self.root,
            "archiveChunkMaxBytes": 256 * 1024,
            "archiveIntervalMs": 500,
            "snapshotIntervalMs": 1000,
            **extra,
        }
        return write_broker_conf(self.workdir / f"{node}.conf", props)

    def start_group(self) -> None:
        self.step("name server, SYNC_MASTER broker-a-0 and SLAVE broker-a-1")
        self.procs["namesrv"] = start_namesrv(self.workdir, self.env)
        self.ports = {n: (free_port(), free_port()) for n in ("broker-a-0", "broker-a-1")}
        m_port, m_ha = self.ports["broker-a-0"]
        s_port, s_ha = self.ports["broker-a-1"]
        conf = self._conf("broker-a-0", 0, "SYNC_MASTER", m_port, m_ha)
        self.procs["broker-a-0"] = start_broker("broker-a-0", conf, m_port, self.workdir, self.env)
        conf = self._conf(
            "broker-a-1", 1, "SLAVE", s_port, s_ha, haMasterAddress=f"127.0.0.1:{m_ha}"
        )
        self.procs["broker-a-1"] = start_broker("broker-a-1", conf, s_port, self.workdir, self.env)
        for name in ("namesrv", "broker-a-0", "broker-a-1"):
            self.say(f"  {name} on {self.procs[name].addr} (log {self.procs[name].log_path})")
        self._wait_slave(self.procs["broker-a-0"].addr)

    async def _traffic(self, n: int, label: str) -> None:
        from broker.client.producer import Producer, SendStatus

        producer = Producer("demo-producer", [self.procs["namesrv"].addr])
        statuses: dict[str, int] = {}
        try:
            for i in range(n):
                body = f"{label} message {i} ".encode() * 8
                res = await producer.send(TOPIC, body, tags=f"tag{i % 4}", keys=f"{label}-{i}")
                statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
                if res.status is SendStatus.SEND_OK:
                    self.acked += 1
        finally:
            await producer.close()
        self.say(f"  sent {n} ({label}): " + ", ".join(f"{k} {v}" for k, v in statuses.items()))

    async def _consume(self, want: int) -> tuple[int, dict[int, int]]:
        """Consume ``want`` messages as the group and commit; returns how many and the
        committed offset of each queue."""
        from broker.client.consumer import Consumer

        consumer = Consumer(CONSUMER_GROUP, [self.procs["namesrv"].addr], TOPIC)
        got = 0
        deadline = time.monotonic() + 60
        try:
            while got < want and time.monotonic() < deadline:
                got += len(await consumer.poll())
            await consumer.persist()
            committed = {
                mq.queue_id: int(off)
                for mq, off in consumer.offsets.offsets.items()
                if mq.topic == TOPIC
            }
        finally:
            await consumer.close()
        return got, committed

    def traffic(self) -> None:
        self.step(f"traffic: {self.args.messages} messages to {TOPIC}, then consume and commit")
        asyncio.run(self._traffic(self.args.messages, "before-failover"))
        got, committed = asyncio.run(self._consume(self.args.messages // 2))
        self.say(
            f"  consumer group {CONSUMER_GROUP} consumed {got} and committed "
            f"{sum(committed.values())} over {len(committed)} queue(s)"
        )
        if not committed:
            raise DemoError(f"consumer group {CONSUMER_GROUP} committed no offset")
        self.committed = committed
        # before the kill -9: the commit is on the slave (SlaveSynchronize) and in an archived
        # snapshot of the master, so the audit has offsets to judge on the first epoch
        self._wait_slave_offsets("broker-a-1", committed)
        self._wait_snapshot_offsets("broker-a-0", committed)

    def failover(self) -> None:
        self.step("failover: kill -9 the master, promote the slave, old master rejoins")
        if not _has("broker.ha.failover"):
            self.skip("failover", "promotion is not built yet (issue #4)")
            return
        self.procs["broker-a-0"].kill()
        self.say("  broker-a-0 killed (-9)")
        res = subprocess.run(
            [sys.executable, "-m", "broker.cli", "admin", "promote", "--broker-name", GROUP,
             "--node", "broker-a-1", "--namesrv", self.procs["namesrv"].addr],
            capture_output=True, text=True, timeout=120, env={**os.environ, **self.env},
        )  # fmt: skip
        if res.returncode != 0:
            raise DemoError(f"promote failed: {res.stderr.strip() or res.stdout.strip()}")
        self.say(f"  {res.stdout.strip() or 'broker-a-1 promoted'}")
        m_port, m_ha = self.ports["broker-a-0"]
        _s_port, s_ha = self.ports["broker-a-1"]
        conf = self._conf(
            "broker-a-0", 1, "SLAVE", m_port, m_ha, haMasterAddress=f"127.0.0.1:{s_ha}"
        )
        self.procs["broker-a-0"] = start_broker("broker-a-0", conf, m_port, self.workdir, self.env)
        self.say("  broker-a-0 restarted as a slave of broker-a-1 (it truncates what it alone had)")
        self._wait_slave(self.procs["broker-a-1"].addr)
        self.roles = {"broker-a-0": (1, "SLAVE", 2), "broker-a-1": (0, "SYNC_MASTER", 2)}
        asyncio.run(self._traffic(self.args.messages // 2, "after-failover"))
        got, committed = asyncio.run(self._consume(self.args.messages // 2))
        self.say(
            f"  consumer group {CONSUMER_GROUP} consumed {got} from the new master and "
            f"committed {sum(committed.values())} (before the failover: "
            f"{sum(self.committed.values())})"
        )
        self._wait_snapshot_offsets("broker-a-1", committed)

    def _wait_slave(self, master_addr: str, timeout_s: float = 60.0) -> None:
        """Until the master sees a slave: a SYNC_MASTER answers SLAVE_NOT_AVAILABLE before."""
        from broker.admin import ha_status

        deadline = time.monotonic() + timeout_s
        while not asyncio.run(ha_status([master_addr]))[0].get("slaves"):
            if time.monotonic() > deadline:
                raise DemoError(f"no slave connected to {master_addr} within {timeout_s:.0f} s")
            time.sleep(0.1)
        self.say(f"  {master_addr} replicates to its slave again")

    def _wait_slave_offsets(self, node: str, want: dict[int, int], timeout_s=60.0) -> None:
        """Until ``node``'s ``consumerOffset.json`` holds the group's offsets (at least
        ``want`` on every queue): SlaveSynchronize copied and persisted them."""
        path = self.workdir / f"store-{node}" / "config" / "consumerOffset.json"

        def synced() -> bool:
            try:
                table = json.loads(path.read_text()).get("offsetTable", {})
            except (OSError, ValueError):  # not written yet, or being replaced
                return False
            return _covers(table.get(OFFSETS_KEY, {}), want)

        self._poll(synced, timeout_s, f"{node}'s {path.name} to carry {OFFSETS_KEY} {want}")
        self.say(f"  {node} holds the committed offsets ({path})")

    def _wait_snapshot_offsets(self, node: str, want: dict[int, int], timeout_s=60.0) -> None:
        """Until the latest archived snapshot of ``node`` was taken as master and carries the
        group's offsets (at least ``want`` on every queue): a point for the offset audit."""
        from contracts import archive_layout as layout
        from contracts.object_store import open_store

        if not _has("broker.archive.node_archiver"):
            self.skip(f"snapshot offsets of {node}", "in-node archiving is not built")
            return
        store = open_store(self.root)
        prefix = layout.node_prefix(CLUSTER, GROUP, node) + "snapshots/"
        seen = {}

        def archived() -> bool:
            keys = sorted(o.key for o in store.list(prefix))
            if not keys:
                return False
            doc = json.loads(store.get(keys[-1]))
            seen.update(epoch=doc.get("epoch"), key=keys[-1])
            have = doc.get("consumerOffsets", {}).get(OFFSETS_KEY, {})
            return doc.get("role") != "SLAVE" and _covers(have, want)

        self._poll(archived, timeout_s, f"a master snapshot of {node} carrying {want}")
        self.say(f"  {node} (epoch {seen['epoch']}): {seen['key'].rsplit('/', 1)[1]} "
                 "carries the committed offsets")  # fmt: skip

    def _poll(self, cond, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > deadline:
                raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(0.2)

    def archive(self) -> None:
        self.step("archive: every node's commit log, snapshots and events in S3")
        if _has("broker.archive.node_archiver"):
            self._wait_archived()
            self._stop_nodes()
            return
        self.skip("in-node archiving", "not built yet (issue #5): shipping each store once")
        self._stop_nodes()
        for node in ("broker-a-0", "broker-a-1"):
            if not any((self.workdir / f"store-{node}" / "commitlog").glob("0*")):
                self.say(f"  {node}: empty commit log, nothing to ship")
                continue
            res = subprocess.run(
                [sys.executable, "-m", "broker.cli", "archive",
                 "--store-dir", str(self.workdir / f"store-{node}"), "--root", self.root,
                 "--cluster", CLUSTER, "--broker-name", GROUP, "--node", node,
                 "--broker-id", str(self.roles[node][0]), "--role", self.roles[node][1],
                 "--epoch", str(self.roles[node][2])],
                capture_output=True, text=True, timeout=600, env={**os.environ, **self.env},
            )  # fmt: skip
            if res.returncode != 0:
                raise DemoError(f"archiving {node} failed: {res.stderr.strip()}")
            self.say(f"  {node}: {res.stderr.strip().splitlines()[-1]}")

    def _wait_archived(self) -> None:
        from contracts.object_store import open_store

        store = open_store(self.root)
        deadline = time.monotonic() + 120
        want = {"broker-a-0", "broker-a-1"}
        while True:
            have = {
                o.key.split("/")[3]
                for o in store.list(f"v1/{CLUSTER}/{GROUP}/")
                if "/commitlog/" in o.key and o.key.endswith(".json")
            }
            if want <= have:
                break
            if time.monotonic() > deadline:
                raise DemoError(f"archive has chunks of {sorted(have)} only after 120 s")
            time.sleep(0.2)
        self.say(f"  chunks archived for {', '.join(sorted(want))}")

    def _stop_nodes(self) -> None:
        for name in ("broker-a-1", "broker-a-0", "namesrv"):
            p = self.procs.get(name)
            if p is not None and p.alive():
                p.stop()
        self.say("  nodes stopped cleanly (SIGTERM: flushed and persisted)")

    def audit(self) -> int:
        self.step("nightly audit DAG: airflow dags test haproof_nightly_audit (Spark + GX)")
        airflow = str(Path(sys.executable).with_name("airflow"))
        home = self.workdir / "airflow"
        env = {
            **os.environ,
            **self.env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "GX_ANALYTICS_ENABLED": "False",
        }
        log_path = self.workdir / "airflow.log"
        with open(log_path, "wb") as log_file:
            for argv in (
                [airflow, "db", "migrate"],
                [airflow, "dags", "test", "haproof_nightly_audit", "-c",
                 json.dumps({"root": self.root, "cluster": CLUSTER})],
            ):  # fmt: skip
                rc = subprocess.run(argv, env=env, stdout=log_file, stderr=log_file).returncode
                if rc != 0 and argv[1] == "db":
                    raise DemoError(f"airflow db migrate failed; see {log_path}")
        from contracts.object_store import open_store

        store = open_store(self.root)
        reports = sorted(o.key for o in store.list("audits/") if o.key.endswith("dag_report.json"))
        if not reports:
            raise DemoError(f"the DAG wrote no report (exit {rc}); see {log_path}")
        report = json.loads(store.get(reports[-1]))
        local = self.workdir / "report"
        prefix = reports[-1].rsplit("/", 1)[0] + "/"
        for o in store.list(prefix):
            dest = local / o.key[len(prefix) :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(store.get(o.key))
        self.step("verdict")
        for g in report["audit"]["groups"]:
            print(f"  {CLUSTER}/{g['brokerName']} (master {g['master']}):")
            for c in g["checks"]:
                mark = "PASS" if c["passed"] else "FAIL"
                print(f"    {mark}  {c['name']:<26} findings {c['findings']}")
        for gx in report["expectations"]:
            mark = "PASS" if gx["success"] else "FAIL"
            print(f"    {mark}  GX suites                  failed {gx['failedSuites'] or 'none'}")
            print(f"  report: {local / gx['report'][len(prefix) :]}")
        judged = self._offsets_judged(store, report["runId"])
        print(
            f"  offsets judged: {judged['groups']} consumer group(s), {judged['queues']} "
            f"queue(s), {judged['points']} point(s); master points on epoch(s) "
            f"{', '.join(map(str, judged['epochs'])) or 'none'}"
        )
        across = len(judged["epochs"]) >= 2 or any("failover" in n for n in self.notes)
        if not across:
            print("  offsets were NOT judged on both sides of the failover")
        for name in report.get("reports", {}):  # the evidence page (verdict, witnesses, plots)
            print(f"  evidence report: {local / name / 'report.html'}")
        print(f"  archive: {self.root} (endpoint {self.s3.endpoint_url if self.s3 else '-'})")
        print(f"  logs: {self.workdir}/*.log; Airflow: {log_path}")
        print(f"  acknowledged sends: {self.acked}")
        for note in self.notes:
            print(f"  note: {note}")
        passed = report["passed"] and across
        print("PASSED" if passed else "FAILED", flush=True)
        return 0 if passed else 1

    @staticmethod
    def _offsets_judged(store, run_id: str) -> dict:
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

    def cleanup(self) -> None:
        for p in self.procs.values():
            p.kill()
        if self.s3 is not None:
            self.s3.stop()

    def run(self) -> int:
        for module in ("moto", "airflow"):  # the tools and dags extras: say so before step 1
            if not _has(module):
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        try:
            self.prepare()
            self.start_group()
            self.traffic()
            self.failover()
            self.archive()
            return self.audit()
        finally:
            self.cleanup()


def run(args: argparse.Namespace) -> int:
    try:
        return Demo(args).run()
    except DemoError as exc:
        print(f"haproof demo: {exc}", file=sys.stderr)
        return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="the main job end to end on embedded defaults")
    p.add_argument(
        "--workdir",
        default="haproof-demo",
        help="everything goes here (replaced only if an earlier demo made it)",
    )
    p.add_argument("--messages", type=int, default=2000, help="messages before the failover")
    p.set_defaults(func=run)
