"""A partitioned old master stops taking writes when its lease ends, with real processes on
127.0.0.1 (issue #30): a SYNC_MASTER group of three in controller mode; the master's links to
the controller go silent (its proxy forwards nothing, the connections stay open) while producers
and its slaves still reach it. Its sends are refused within ``controllerLeaseMills`` of the cut;
the controller elects another master only after the old one's lease had ended (the election's
time from the controller's journal, the lease's last contact from the old master's
``lease_lost`` event), and no send was acknowledged by the old master after that election.
Healed, the old master follows the new one: one master per epoch, every acknowledged message on
the new master."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from broker.client.producer import Producer, SendStatus
from broker.client.routes import MessageQueue
from contracts.errors import RemotingError
from tests.support.controller_cluster import BROKER_NAME, BROKER_TIMING, ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "LeaseTopic"
LEASE_MS = BROKER_TIMING["controllerLeaseMills"]
CHECK_SLACK_MS = 800  # scheduling on 2 busy cores; still before the 3 s heartbeat timeout


@pytest.mark.parametrize("cut", ["silent", "closed"])
def test_partitioned_master_refuses_writes_when_its_lease_ends(tmp_path, cut):
    """``silent``: the links stay open and carry nothing; ``closed``: they are closed too (a
    middlebox's reset, a peer's timeout), and new ones carry nothing."""
    asyncio.run(_partition(tmp_path, cut))


async def _send_to(producer: Producer, addr: str, label: str, sent: list):
    """One send to ``addr`` itself (queue 0); appended to ``sent`` when acknowledged."""
    body = f"{label}-".encode() * 20
    mq = MessageQueue(TOPIC, BROKER_NAME, 0)
    try:
        res = await producer._send_once(addr, mq, body, {"UNIQ_KEY": label, "KEYS": label}, 0)
    except RemotingError as exc:
        return str(exc)
    if res.status is SendStatus.SEND_OK:
        sent.append((time.time() * 1000, res, body))
    return None


async def _partition(tmp_path, cut: str) -> None:
    cluster = await ControllerCluster.start(tmp_path, syncFlushTimeout=1000)
    producer = Producer("PG", [cluster.ns.addr], retry_times=2)
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        acked: list = []
        for i in range(20):
            assert await _send_to(producer, first, f"before-{i}", acked) is None
        old = cluster.node_at(first)
        cut_ms = time.monotonic() * 1000
        for proxy in old.to_controllers:
            proxy.blackhole(True)
            if cut == "closed":
                proxy.drop()

        async def refused():
            return await _send_to(producer, first, f"during-{len(acked)}", acked)

        why = await wait_for(refused, 10_000, what="the old master refusing sends", every_ms=20)
        refused_after_ms = time.monotonic() * 1000 - cut_ms
        refused_wall_ms = time.time() * 1000
        assert "lease" in why, why
        assert refused_after_ms <= LEASE_MS + CHECK_SLACK_MS, (
            f"the old master took sends {refused_after_ms:.0f} ms after losing the controller "
            f"(lease {LEASE_MS} ms)"
        )
        second, epoch2 = await cluster.wait_master(epoch, 30_000)
        assert second != first
        election = cluster.elections()[-1]
        last_contact = _lease_lost(old.proc.log_path.read_text(), epoch)
        assert election.at >= last_contact + LEASE_MS, (
            f"elected at {election.at}, before the old master's lease ended "
            f"({last_contact} + {LEASE_MS})"
        )
        assert refused_wall_ms <= election.at
        print(
            f"lease ({cut}): sends refused {refused_after_ms:.0f} ms after the cut, elected "
            f"{election.at - last_contact} ms after the last contact"
        )
        late = [t for t, _, _ in acked if t > election.at]
        assert not late, f"{len(late)} sends acknowledged by the old master after the election"

        for proxy in old.to_controllers:  # heal
            proxy.blackhole(False)
            proxy.drop()

        async def one_master():
            docs = [await cluster.status(n.addr) for n in cluster.nodes.values()]
            if any(d is None for d in docs):
                return None
            masters = [d for d in docs if d["brokerRole"] != "SLAVE"]
            by_addr = {d["brokerAddr"]: d for d in docs}
            ok = (
                len(masters) == 1
                and masters[0]["brokerAddr"] == second
                and by_addr[first]["epoch"] == epoch2
                and by_addr[first]["maxOffset"] == by_addr[second]["maxOffset"]
            )
            return ok

        await wait_for(one_master, 30_000, what="the old master following the new one")
        epochs = [(e.newMasterBrokerId, i) for i, e in enumerate(cluster.elections())]
        assert len(epochs) == epoch2, f"one master per epoch: {epochs}"
        for _, res, body in acked:
            rec = await cluster.pull(second, TOPIC, res.queue.queue_id, res.queue_offset)
            assert rec.body == body, (res.queue, res.queue_offset)
    finally:
        await producer.close()
        await cluster.close()


def _lease_lost(log: str, epoch: int) -> int:
    """``lastContactAt`` of the old master's ``lease_lost`` event under ``epoch``."""
    pattern = rf"lease_lost: {{'epoch': {epoch}, 'lastContactAt': (\d+)}}"
    found = re.findall(pattern, log)
    assert found, f"no lease_lost event under epoch {epoch} in the old master's log"
    return int(found[0])
