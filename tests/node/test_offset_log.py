"""offsetCommitThroughLog inside one node (no wall-clock sleeps as synchronisation): commits of
one group and topic within the coalescing interval are one record; a commit at or below the
committed offset appends nothing; an admin reset appends a reset record; a restart without
``consumerOffset.json`` gets every committed offset back from the log; the records are what the
audit's contract reads."""

from __future__ import annotations

import asyncio
import json
import os

from broker.node import BrokerNode
from contracts.offset_commits.model import OFFSETS_TOPIC
from contracts.offset_commits.reader import parse_record
from contracts.record.reader import decode_record
from tests.ha.test_replication import _config, put


def _records(node: BrokerNode) -> list:
    res = node.store.get_message(OFFSETS_TOPIC, 0, 0, 100)
    return [parse_record(decode_record(raw)) for raw in res.records]


def test_commits_become_records_and_come_back_from_the_log(tmp_path) -> None:
    conf = _config(tmp_path, "n", brokerRole="ASYNC_MASTER")

    async def first() -> None:
        node = await BrokerNode.start(conf, "127.0.0.1")
        try:
            for i in range(40):
                await put(node, i)  # 10 messages in each of queues 0-3
            writer = node.offset_log.writer
            await asyncio.gather(*(writer.commit("G", "T", q, 5 + q, "c:1") for q in range(4)))
            await writer.commit("G", "T", 0, 3, "c:1")  # below: nothing new to record
            assert [r.offsets for r in _records(node)] == [{0: 5, 1: 6, 2: 7, 3: 8}]
            node.store.consumer_offsets.reset("G", "T", 1, 2)  # admin: a reset record
            while len(_records(node)) < 2:
                await asyncio.sleep(0)  # the record is appended by a task of this loop
            reset = _records(node)[1]
            assert (reset.kind, reset.offsets, reset.previous, reset.by) == (
                "reset",
                {1: 2},
                {1: 6},
                "admin",
            )
            await writer.commit("G", "T", 1, 4, "c:2")
            assert node.store.consumer_offsets.queues_of("G", "T") == {0: 5, 1: 4, 2: 7, 3: 8}
        finally:
            await node.stop()

    asyncio.run(first())
    path = os.path.join(conf.store_path_root_dir, "config", "consumerOffset.json")
    doc = json.loads(open(path).read())
    assert doc["logQueueOffset"] == 3 and doc["logOffset"] > 0  # after the third record

    async def with_checkpoint() -> None:
        node = await BrokerNode.start(conf, "127.0.0.1")
        try:
            assert node.store.consumer_offsets.queues_of("G", "T") == {0: 5, 1: 4, 2: 7, 3: 8}
            assert node.offset_log.applier.applied == 0  # nothing after the checkpoint
        finally:
            await node.stop()

    asyncio.run(with_checkpoint())
    for p in (path, path + ".bak"):
        if os.path.exists(p):
            os.remove(p)

    async def again() -> None:
        node = await BrokerNode.start(conf, "127.0.0.1")
        try:
            assert node.store.consumer_offsets.queues_of("G", "T") == {0: 5, 1: 4, 2: 7, 3: 8}
            assert node.offset_log.applier.applied == 3
        finally:
            await node.stop()

    asyncio.run(again())  # the checkpoint gone: every record replayed from the log
