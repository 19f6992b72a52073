"""The demo's traffic: a producer sends, the consumer group consumes part of it and commits, and
the demo waits until the commit is on the slave and in an archived master snapshot."""

from __future__ import annotations

import asyncio
import json
import time

from tools.demo.base import (
    CLUSTER,
    CONSUMER_GROUP,
    GROUP,
    MASTER,
    OFFSETS_KEY,
    SLAVE,
    TOPIC,
    Demo,
    DemoError,
    covers,
    has_module,
    poll,
)


async def produce(d: Demo, n: int, label: str) -> None:
    """Send ``n`` messages, counting the acknowledged ones (SEND_OK) in ``d.acked``."""
    from broker.client.producer import Producer, SendStatus

    producer = Producer("demo-producer", [d.procs["namesrv"].addr])
    statuses: dict[str, int] = {}
    try:
        for i in range(n):
            body = f"{label} message {i} ".encode() * 8
            res = await producer.send(TOPIC, body, tags=f"tag{i % 4}", keys=f"{label}-{i}")
            statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
            if res.status is SendStatus.SEND_OK:
                d.acked += 1
    finally:
        await producer.close()
    d.say(f"  sent {n} ({label}): " + ", ".join(f"{k} {v}" for k, v in statuses.items()))


async def consume(d: Demo, want: int, until_idle: bool = False) -> tuple[int, dict[int, int]]:
    """Consume ``want`` messages as the group (``until_idle``: or until a poll finds nothing
    more once some came) and commit; returns how many and the committed offset of each
    queue."""
    from broker.client.consumer import Consumer

    consumer = Consumer(CONSUMER_GROUP, [d.procs["namesrv"].addr], TOPIC)
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < want and time.monotonic() < deadline:
            batch = len(await consumer.poll())
            if until_idle and got and not batch:
                break
            got += batch
        await consumer.persist()
        committed = {
            mq.queue_id: int(off)
            for mq, off in consumer.offsets.offsets.items()
            if mq.topic == TOPIC
        }
    finally:
        await consumer.close()
    return got, committed


def traffic(d: Demo) -> None:
    d.step(f"traffic: {d.args.messages} messages to {TOPIC}, then consume and commit")
    asyncio.run(produce(d, d.args.messages, "before-failover"))
    got, committed = asyncio.run(consume(d, d.args.messages // 2))
    d.say(
        f"  consumer group {CONSUMER_GROUP} consumed {got} and committed "
        f"{sum(committed.values())} over {len(committed)} queue(s)"
    )
    if not committed:
        raise DemoError(f"consumer group {CONSUMER_GROUP} committed no offset")
    d.committed = committed
    # before the kill -9: the commit is on the slave (SlaveSynchronize) and in an archived
    # snapshot of the master, so the audit has offsets to judge on the first epoch
    wait_slave_offsets(d, SLAVE, committed)
    wait_snapshot_offsets(d, MASTER, committed)
    wait_archived_as_master(d, MASTER)


def wait_archived_as_master(d: Demo, node: str, timeout_s: float = 60.0) -> None:
    """Until ``node`` shipped its commit log up to the end it has now: the messages are in
    chunks archived under its master role (the audit's delivery counts read those), not
    only in what the slave ships after the kill -9."""
    from broker.admin.cluster import runtime_tables

    addr = d.procs[node].addr
    end = {}

    def shipped() -> bool:
        table = asyncio.run(runtime_tables([addr]))[0].get("table") or {}
        end.setdefault("want", int(table.get("commitLogMaxOffset", 0)))
        return int(table.get("archiveEnd", -1)) >= end["want"] > 0

    if not has_module("broker.archive.node_archiver"):
        return
    poll(shipped, timeout_s, f"{node}'s archive to reach its commit log end")
    d.say(f"  {node} archived its commit log up to {end['want']} as master")


def wait_slave_offsets(d: Demo, node: str, want: dict[int, int], timeout_s=60.0) -> None:
    """Until ``node``'s ``consumerOffset.json`` holds the group's offsets (at least
    ``want`` on every queue): SlaveSynchronize copied and persisted them."""
    path = d.workdir / f"store-{node}" / "config" / "consumerOffset.json"

    def synced() -> bool:
        try:
            table = json.loads(path.read_text()).get("offsetTable", {})
        except (OSError, ValueError):  # not written yet, or being replaced
            return False
        return covers(table.get(OFFSETS_KEY, {}), want)

    poll(synced, timeout_s, f"{node}'s {path.name} to carry {OFFSETS_KEY} {want}")
    d.say(f"  {node} holds the committed offsets ({path})")


def wait_snapshot_offsets(d: Demo, node: str, want: dict[int, int], timeout_s=60.0) -> None:
    """Until the latest archived snapshot of ``node`` was taken as master and carries the
    group's offsets (at least ``want`` on every queue): a point for the offset audit."""
    from contracts import archive_layout as layout
    from contracts.object_store import open_store

    if not has_module("broker.archive.node_archiver"):
        d.skip(f"snapshot offsets of {node}", "in-node archiving is not built")
        return
    store = open_store(d.root)
    prefix = layout.node_prefix(CLUSTER, GROUP, node) + layout.SNAPSHOTS
    seen = {}

    def archived() -> bool:
        keys = sorted(o.key for o in store.list(prefix))
        if not keys:
            return False
        doc = json.loads(store.get(keys[-1]))
        seen.update(epoch=doc.get("epoch"), key=keys[-1])
        have = doc.get("consumerOffsets", {}).get(OFFSETS_KEY, {})
        return doc.get("role") != "SLAVE" and covers(have, want)

    poll(archived, timeout_s, f"a master snapshot of {node} carrying {want}")
    d.say(
        f"  {node} (epoch {seen['epoch']}): {seen['key'].rsplit('/', 1)[1]} "
        "carries the committed offsets"
    )
