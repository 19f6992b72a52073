"""The old master rejoins as a slave, with real processes on 127.0.0.1 (issue #30): a SYNC_MASTER
group of three in controller mode; the master's HA links go silent (it sends its slaves nothing),
so what it writes next reaches no slave and is never acknowledged; kill -9 it; the controller
elects a slave; restart the old master: it becomes a slave and cuts exactly its unreplicated
tail. Its first restart dies (exit 9) inside the cut: once its epoch file was cut and its log
not yet, or once its log was zeroed and its consume queues not yet; the next start finishes the
cut, and its log then equals the new master's, every acknowledged message in it."""

from __future__ import annotations

import asyncio

import pytest

from broker.client.producer import Producer, SendFailedError, SendStatus
from tests.support.controller_cluster import ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "RejoinTopic"


async def _send(producer: Producer, label: str):
    body = f"{label}-".encode() * 20
    res = await producer.send(TOPIC, body, keys=label)
    return res, body


@pytest.mark.parametrize("crash_at", ["epochs_cut", "commitlog"])
def test_old_master_rejoins_as_slave_and_cuts_only_its_unreplicated_tail(tmp_path, crash_at):
    asyncio.run(_rejoin(tmp_path, crash_at))


async def _rejoin(tmp_path, crash_at: str) -> None:
    cluster = await ControllerCluster.start(tmp_path, syncFlushTimeout=500)
    producer = Producer("PG", [cluster.ns.addr], retry_times=2)
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        acked = [await _send(producer, f"before-{i}") for i in range(40)]
        assert {r.status for r, _ in acked} == {SendStatus.SEND_OK}
        old = cluster.node_at(first)
        others = [n for n in cluster.nodes.values() if n is not old]
        end = (await cluster.status(first))["maxOffset"]
        for n in others:  # SYNC_MASTER: every acknowledged byte is on both slaves
            await wait_for(
                lambda n=n: _max_offset_is(cluster, n.addr, end), 10_000, what="slaves at the end"
            )
        cluster.silence_ha(old.name)  # from here the old master's writes reach no slave
        tail = [await _send(producer, f"tail-{i}") for i in range(3)]
        assert {r.status for r, _ in tail} == {SendStatus.FLUSH_SLAVE_TIMEOUT}  # not acked
        tail_end = (await cluster.status(first))["maxOffset"]
        assert tail_end > end
        cluster.kill(old.name)
        second, epoch2 = await cluster.wait_master(epoch, 30_000)
        assert second != first
        after = [await wait_for(lambda: _send_ok(producer, "after-0"), 30_000, what="a send")]
        after += [await _send(producer, f"after-{i}") for i in range(1, 20)]
        assert {r.status for r, _ in after} == {SendStatus.SEND_OK}

        code = await cluster.run_until_crash(old.name, crash_at)
        assert code == 9, f"no crash inside the cut (exit {code}); log {old.name}.log"
        assert (old.store / "truncating").exists(), "the crash left no unfinished cut"
        await cluster.start_node(old.name)

        async def caught_up():
            mine, theirs = await cluster.status(first), await cluster.status(second)
            return (
                mine
                and theirs
                and mine["brokerRole"] == "SLAVE"
                and mine["epoch"] == epoch2
                and mine["maxOffset"] == theirs["maxOffset"]
                and mine
            )

        mine = await wait_for(caught_up, 30_000, what="the old master caught up as a slave")
        log = old.proc.log_path.read_text()
        assert f"truncating the commit log [{end}, {tail_end}) ({tail_end - end} bytes)" in log
        new_end = mine["maxOffset"]
        assert cluster.commit_log(old.name, new_end) == cluster.commit_log(
            cluster.node_at(second).name, new_end
        ), "the rejoined log differs from the new master's"
        for res, body in acked + after:  # every acknowledged message, on both
            for addr in (second, first):
                rec = await cluster.pull(addr, TOPIC, res.queue.queue_id, res.queue_offset)
                assert rec.body == body, (addr, res.queue, res.queue_offset)
    finally:
        await producer.close()
        await cluster.close()


async def _send_ok(producer: Producer, label: str):
    try:
        res, body = await _send(producer, label)
    except SendFailedError:  # the route still names the old master
        return None
    return (res, body) if res.status is SendStatus.SEND_OK else None


async def _max_offset_is(cluster: ControllerCluster, addr: str, end: int) -> bool:
    doc = await cluster.status(addr)
    return doc is not None and doc["maxOffset"] == end
