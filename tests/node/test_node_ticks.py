"""A whole node on a driven clock (tests/conftest.py ``driven_clock``): its background loops
(consumer offsets persisted, runtime stats sampled, idle clients dropped) run by ticks, with no
wall time (issue #24: one loop base with an injected clock drives every background service)."""

from __future__ import annotations

import os

from broker.processors.admin import CLIENT_IDLE_MAX_MS
from broker.store.consumer_offsets import ConsumerOffsetManager
from tests.support.nodes import run_node


def test_a_nodes_loops_run_by_ticks(tmp_path, driven_clock):
    clock = driven_clock

    async def body(node, client, addr):
        offsets = node.store.consumer_offsets
        node.store.topic_config.put("T", {"topicName": "T", "writeQueueNums": 1, "perm": 6})
        await clock.settle()
        samples = node.stats.samples_taken
        offsets.table.setdefault("T@G", {})  # a commit the periodic flush must write
        offsets.merge_forward({"offsetTable": {"T@G": {"0": 0}}})
        await clock.advance(999)
        assert node.stats.samples_taken == samples  # the sampler's period is 1 s of this clock
        await clock.advance(1)
        assert node.stats.samples_taken == samples + 1
        # flushConsumerOffsetInterval=5000: the change is on disk by then, not before
        assert not os.path.exists(offsets.path) or "T@G" not in _on_disk(offsets.path)
        await clock.advance(4000)
        assert "T@G" in _on_disk(offsets.path)
        # a consumer silent for longer than the idle limit is dropped by the client scan
        node.consumers.heartbeat(_Conn(), "c1", "G", {"T": "*"})
        assert node.consumers.ids("G") == ["c1"]
        await clock.advance(CLIENT_IDLE_MAX_MS + 10_000)
        assert node.consumers.ids("G") == []

    run_node(tmp_path, body, clock=clock, flushConsumerOffsetInterval=5000)


def _on_disk(path: str) -> dict:
    return ConsumerOffsetManager.load(path).table


class _Conn:
    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        import asyncio

        self.closed = asyncio.Event()

    async def invoke_oneway(self, req) -> None:
        pass
