"""Read-your-writes of offset commits on a SYNC_MASTER: a commit is answered only once
QUERY_CONSUMER_OFFSET shows it. The master has two in-sync slaves and its ack needs one; what it
applies (and answers queries with) needs both (the confirmOffset). Before the fix the commit was
answered SUCCESS on the first slave's ack while the query still answered below it, until the
second slave acked.

A real store and a real HAService (its slave connections stand-ins whose acks the test
delivers), the offset log service over them, all on a DrivenClock: time moves only where the
test says, so an answer that comes without moving it was woken by the ack itself, not by the
catch-up's periodic round."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.clock import DrivenClock
from broker.config import BrokerConfig, BrokerRole, FlushDiskType
from broker.ha.confirm_watch import ConfirmWatch
from broker.ha.service import HAService
from broker.offset_log.service import OffsetLogService
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.record.model import Message
from tests.support.waiting import wait_for

TIMEOUT_MS = 1_000  # syncFlushTimeout


class _Rig:
    """A SYNC_MASTER with slaves ``a`` and ``b`` in sync at the log end."""

    def __init__(self, tmp_path) -> None:
        cfg = BrokerConfig.from_dict(
            {
                "storePathRootDir": str(tmp_path / "store"),
                "flushDiskType": FlushDiskType.ASYNC_FLUSH.value,
                "brokerRole": "SYNC_MASTER",
                "syncFlushTimeout": str(TIMEOUT_MS),
            }
        )
        self.clock = DrivenClock()
        self.store = MessageStore.open(cfg)
        self.role = role = BrokerRoleState(BrokerRole.SYNC_MASTER, 0)
        watch = ConfirmWatch()
        self.ha = HAService(
            self.store, cfg, role, "127.0.0.1", clock=self.clock, confirm_watch=watch
        )
        ha = self.ha

        async def await_replication(result, timeout_ms):
            return await ha.wait_replicated(result, timeout_ms)

        replication = SimpleNamespace(ha=ha, await_replication=await_replication)
        self.svc = OffsetLogService(self.store, role, replication, cfg, watch, clock=self.clock)
        self.slaves = {
            name: SimpleNamespace(
                peer=f"127.0.0.1:{40000 + i}",
                ack_offset=-1,
                closed=False,
                transfer_speed=lambda: 0.0,
            )
            for i, name in enumerate("ab")
        }

    async def start(self) -> None:
        for i in range(5):
            self.store.put_message(Message("T", b"m%d" % i, queue_id=0)).result(5)
        self.ha.connections.extend(self.slaves.values())
        self.ha.transfer.start()
        for name in self.slaves:
            self.ack(name)
        await self.svc.start()

    async def stop(self) -> None:
        await self.svc.stop()
        await self.ha.transfer.stop()
        self.store.shutdown()

    def ack(self, name: str) -> None:
        """Slave ``name`` acknowledges the master's whole log (as HAConnection's read loop)."""
        conn, end = self.slaves[name], self.store.max_phy_offset
        conn.ack_offset = end
        self.ha.on_ack(end, conn)

    def query(self) -> int:
        """What QUERY_CONSUMER_OFFSET answers (AdminProcessor.query_offset: catch up, read)."""
        self.svc.catch_up()
        return self.store.consumer_offsets.query("G", "T", 0)

    async def commit(self, offset: int) -> asyncio.Task:
        """A client's commit, its record appended (past the coalescing interval) and waiting
        for the slaves."""
        writer = self.svc.writer
        records = writer.records
        task = asyncio.create_task(writer.commit("G", "T", 0, offset, "c:1"))
        await self.clock.advance(self.svc.writer.coalesce_ms)
        await wait_for(lambda: writer.records > records, what="the record appended")
        await self.clock.settle()
        return task


def test_a_commit_is_answered_only_once_the_query_shows_it(tmp_path) -> None:
    async def main() -> None:
        rig = _Rig(tmp_path)
        await rig.start()
        try:
            task = await rig.commit(3)
            assert not task.done() and rig.query() == -1
            rig.ack("a")  # the ack a SYNC_MASTER put needs: the replication wait is over
            applier = rig.svc.applier
            await wait_for(lambda: task.done() or applier.waiting, what="answered, or waiting")
            assert rig.ha.status()["confirmOffset"] < rig.store.max_phy_offset
            shown = rig.query()
            assert not task.done(), f"commit of 3 answered while the query shows {shown}"
            rig.ack("b")  # every in-sync slave holds it: applied, answered (no time moved)
            await asyncio.wait_for(task, 5)
            assert rig.query() == 3
            assert rig.svc.writer.visibility_lagged == 0
        finally:
            await rig.stop()

    asyncio.run(main())


@pytest.mark.parametrize("acked_by", ["a", ""])
def test_past_sync_flush_timeout_the_commit_is_answered_and_counted(tmp_path, acked_by) -> None:
    """A slave that never acks: the commit is answered (not refused) after syncFlushTimeout
    from its append, whether the replication wait was answered (``a`` acked) or timed out too,
    the lag is counted, and the commit becomes visible once the slave acks after all."""

    async def main() -> None:
        rig = _Rig(tmp_path)
        await rig.start()
        try:
            task = await rig.commit(4)
            if acked_by:
                rig.ack(acked_by)
            await rig.clock.advance(TIMEOUT_MS - 1)
            assert not task.done()
            await rig.clock.advance(1)
            await asyncio.wait_for(task, 5)  # SUCCESS (no error): the record is in the log
            assert rig.svc.writer.visibility_lagged == 1
            assert rig.query() == -1
            rig.ack("a")
            rig.ack("b")
            await rig.clock.settle()
            assert rig.query() == 4
        finally:
            await rig.stop()

    asyncio.run(main())


def test_a_master_demoted_while_a_commit_waits_does_not_count_its_own_apply(tmp_path) -> None:
    """Demoted (a slave now), the node applies what its log holds, confirmed or not: that is
    no read-your-writes (the new master may not hold the record, and the rejoin may cut it), so
    the commit waits out syncFlushTimeout and is answered as lagged."""

    async def main() -> None:
        rig = _Rig(tmp_path)
        await rig.start()
        try:
            task = await rig.commit(2)
            rig.ack("a")
            await wait_for(lambda: rig.svc.applier.waiting, what="waiting to be visible")
            rig.role.change(BrokerRole.SLAVE, 1, master_ha_addr="127.0.0.1:1")
            assert rig.query() == 2  # applied as a slave: everything its log holds
            await rig.clock.advance(TIMEOUT_MS - 1)
            assert not task.done()
            await rig.clock.advance(1)
            await asyncio.wait_for(task, 5)
            assert rig.svc.writer.visibility_lagged == 1
        finally:
            await rig.stop()

    asyncio.run(main())
