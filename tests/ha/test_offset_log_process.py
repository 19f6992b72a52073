"""Committed offsets through the commit log, with real processes (Jepsen's non-monotonic check
from the client side): a SYNC_MASTER answers commits, is killed -9 right after some of them at
random points, its slave is promoted (``haproof admin promote``), the old master rejoins as the
new master's slave; over 20 rounds QUERY_CONSUMER_OFFSET on each new master never answers less
than any answer given before. With ``offsetCommitThroughLog=false`` (RocketMQ's table copied
every slaveSyncIntervalMs) the same rounds show regressions."""

from __future__ import annotations

import asyncio
import functools
import json
import random
import subprocess
import sys
from pathlib import Path

from broker.admin import ha_status
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from tests.conftest import wait_until
from tests.ha.test_offsets_monotone import _fill_queues
from tests.support.cluster import conf_factory
from tests.support.haproof_cli import audit_json
from tools.localcluster import free_port, start_broker, start_namesrv

TOPIC, GROUP = "OffsetTopic", "CG"  # (_fill_queues sends to TOPIC)
_wait = functools.partial(wait_until, timeout_s=60.0)


async def _call(addr: str, code: RequestCode, fields: dict) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields), 5000)
    finally:
        await client.close()


def _commit(addr: str, queue_id: int, offset: int) -> bool:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    resp = asyncio.run(_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    return resp.code == ResponseCode.SUCCESS


def _query(addr: str, queue_id: int) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
    resp = asyncio.run(_call(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields))
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


def _promote(ns: str, node: str) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "admin",
            "promote",
            "--broker-name",
            "broker-a",
            "--node",
            node,
            "--namesrv",
            ns,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _rounds(tmp_path, through_log: bool, rounds: int, before_kill=None, **archive) -> list[tuple]:
    """The regressions seen: (round, queue, highest answered before, answer after).
    ``archive``: broker.conf keys added to every node (its in-broker archiving);
    ``before_kill(node, answered)``: called before each kill -9 of the master with the
    round's answers on it."""
    conf = conf_factory(
        slaveSyncIntervalMs=500,
        haSendHeartbeatInterval=500,
        offsetCommitThroughLog=str(through_log).lower(),
        **archive,
    )
    ns = start_namesrv(tmp_path)
    procs = [ns]
    ports = {n: (free_port(), free_port()) for n in ("a", "b")}
    rng = random.Random(29)
    try:
        master = start_broker(
            "a",
            conf(tmp_path, "a", 0, "SYNC_MASTER", *ports["a"], ns.addr),
            ports["a"][0],
            tmp_path,
        )
        slave = start_broker(
            "b",
            conf(
                tmp_path,
                "b",
                1,
                "SLAVE",
                *ports["b"],
                ns.addr,
                haMasterAddress=f"127.0.0.1:{ports['a'][1]}",
            ),
            ports["b"][0],
            tmp_path,
        )
        procs += [master, slave]
        _wait(lambda: asyncio.run(ha_status([master.addr]))[0].get("slaves"), what="b connected")
        asyncio.run(_fill_queues(ns.addr, master.addr, 200))
        highest = dict.fromkeys(range(4), 0)
        regressions = []
        for r in range(rounds):
            answered = {}  # this round's answers on this master
            for _ in range(rng.randint(1, 6)):
                q = rng.randrange(4)
                if _commit(master.addr, q, highest[q] + rng.randint(1, 3)):
                    answered[q] = _query(master.addr, q)
                    highest[q] = max(highest[q], answered[q])
            if before_kill is not None:
                before_kill(master.name, answered)
            master.kill()  # -9, right after the last commit was answered
            _promote(ns.addr, slave.name)
            for q in range(4):
                got = _query(slave.addr, q)
                if got < highest[q]:
                    regressions.append((r, q, highest[q], got))
                highest[q] = max(highest[q], got)
            old = master.name
            rejoined = start_broker(
                old,
                conf(
                    tmp_path,
                    old,
                    1,
                    "SLAVE",
                    *ports[old],
                    ns.addr,
                    haMasterAddress=f"127.0.0.1:{ports[slave.name][1]}",
                ),
                ports[old][0],
                tmp_path,
            )
            procs.append(rejoined)
            _wait(
                lambda s=slave: asyncio.run(ha_status([s.addr]))[0].get("slaves"),
                what=f"{old} rejoined",
            )
            master, slave = slave, rejoined
        return regressions
    finally:
        for p in procs:
            p.kill()


def test_query_never_answers_less_after_kill_and_promote(tmp_path) -> None:
    assert _rounds(tmp_path, through_log=True, rounds=20) == []


def test_without_the_log_the_same_rounds_regress(tmp_path) -> None:
    regressions = _rounds(tmp_path, through_log=False, rounds=4)
    assert regressions, "RocketMQ's copied table should have lost a commit at a kill -9"


def _snapshot_offsets(root: Path, node: str) -> dict[int, int]:
    """The newest archived snapshot of ``node``: its committed offsets of GROUP on TOPIC."""
    snaps = sorted((root / "v1" / "C" / "broker-a" / node / "snapshots").rglob("*.json"))
    if not snaps:
        return {}
    table = json.loads(snaps[-1].read_text()).get("consumerOffsets", {})
    return {int(q): o for q, o in table.get(f"{TOPIC}@{GROUP}", {}).items()}


def test_without_the_log_the_audit_finds_the_regressions_it_has_evidence_for(tmp_path) -> None:
    """The same rounds with the switch off, each node archiving (snapshots every 100 ms), the
    master killed once a snapshot holds its newest commits (before the slave's next copy, so
    some commits are lost): every queue the client saw go back is a finding of
    ``offset_monotonicity`` with its witness. (Killed sooner, no snapshot holds the commit: the
    audit cannot see it, and says how long its snapshots left unobserved.)"""
    root = tmp_path / "archive"
    archive = {
        "archiveEnable": "true",
        "archiveRoot": root.as_uri(),
        "archiveIntervalMs": 100,
        "snapshotIntervalMs": 100,
    }

    def archived(node: str, answered: dict[int, int]) -> None:
        def held() -> bool:
            got = _snapshot_offsets(root, node)
            return all(got.get(q, -1) >= o for q, o in answered.items())

        _wait(held, what=f"a snapshot of {node} holding {answered}")

    seen = _rounds(tmp_path, False, 6, archived, **archive)
    assert seen, "RocketMQ's copied table should have lost a commit at a kill -9"
    doc = audit_json("--root", root.as_uri(), "--cluster", "C", rc=1)
    (group,) = doc["groups"]
    check = next(c for c in group["checks"] if c["name"] == "offset_monotonicity")
    assert check["status"] == "fail", check
    verdict_path = root / "audits" / doc["runId"] / "broker-a" / "verdict.json"
    violations = json.loads(verdict_path.read_text())["findings"]["offset_violations"]
    print("SEEN", seen, "AUDIT", [(v["kind"], v["queue_id"], v["before"]) for v in violations])
    # every queue the client saw go back is a finding, with both sides' node and epoch
    assert {q for _r, q, _b, _a in seen} <= {v["queue_id"] for v in violations}
    assert len(violations) >= len({r for r, *_ in seen})  # at least one per failover seen
    for v in violations:
        assert v["kind"] in ("regression", "lost") and v["group_name"] == GROUP
        assert v["node_before"] and v["node_after"] and v["epoch_after"] > v["epoch_before"]
        assert v["after"] < v["before"]
