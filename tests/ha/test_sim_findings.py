"""Fixes for what the deterministic simulation (``haproof sim``) found, each pinned here on real
nodes (in process, over TCP) or on the part itself."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker import planted_bugs
from broker.clock import DrivenClock
from broker.config import BrokerConfig, BrokerRole
from broker.ha.client import HAClient
from broker.ha.failover import FailoverError, UncleanPromotionError, promote
from broker.ha.sync_state import IN_SYNC_REPLICAS_NOT_ENOUGH, SyncStateConfig, SyncStateSet
from broker.store.epoch import EpochEntry, consistent_point
from broker.store.role import BrokerRoleState
from tests.ha.test_failover import node
from tests.ha.test_replication import message, put, stop, wait_for
from tests.support.aio import async_test


class _Log:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self, least_pages: int = 0) -> int:
        self.flushes += 1
        return 700


def _client(tmp_path, flush_disk_type: str, reconciler=None) -> tuple[HAClient, _Log]:
    config = BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path),
            "brokerRole": "SLAVE",
            "brokerId": 1,
            "flushDiskType": flush_disk_type,
        }
    )
    log = _Log()
    store = SimpleNamespace(commit_log=log, max_phy_offset=900)
    role = BrokerRoleState.configured(config)
    client = HAClient(store, config, role, node_name="s", namesrv_addrs=[], reconciler=reconciler)
    return client, log


async def _master_and_slave(tmp_path):
    """Node ``a``, a SYNC_MASTER, and node ``b``, its slave (HA address configured)."""
    a = await node(tmp_path, "a", brokerRole="SYNC_MASTER", nodeName="a")
    ha = f"127.0.0.1:{a.replication.ha.port}"
    try:
        b = await node(
            tmp_path, "b", brokerRole="SLAVE", brokerId=1, nodeName="b", haMasterAddress=ha
        )
    except BaseException:
        await stop(a)
        raise
    return a, b


def test_a_sync_flush_slave_acknowledges_only_what_it_flushed(tmp_path):
    client, log = _client(tmp_path, "SYNC_FLUSH")
    assert client._ack_offset() == 700 and log.flushes == 1
    planted_bugs.switch_on({"early-ack"})
    try:
        assert client._ack_offset() == 900  # the planted bug: written, not flushed
    finally:
        planted_bugs.switch_off()


def test_an_async_flush_slave_acknowledges_what_it_wrote_as_rocketmq(tmp_path):
    client, log = _client(tmp_path, "ASYNC_FLUSH")
    assert client._ack_offset() == 900 and log.flushes == 0


@pytest.mark.parametrize("entries", [[], [EpochEntry(1, 0)]])
def test_no_unchecked_replication_into_a_log_that_has_epochs(tmp_path, entries):
    reconciler = SimpleNamespace(role=SimpleNamespace(epoch_entries=entries))
    client, _ = _client(tmp_path, "ASYNC_FLUSH", reconciler)
    # master's remoting address unknown (no name server, no answer to the guess)
    assert asyncio.run(client._reconcile()) is (not entries)


@async_test
async def test_a_slave_refuses_to_cut_its_log_to_a_stale_master_or_to_a_slave(tmp_path):
    a, b = await _master_and_slave(tmp_path)
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        await put(a, 1)
        # asked to cut its log to a slave's: refused, nothing cut
        with pytest.raises(FailoverError, match="not a master"):
            await a.reconciler.reconcile(b.config.broker_addr)
        # b becomes master under epoch 2; a, still at epoch 1, is no master to follow
        await b.failover.become_master(2, BrokerRole.SYNC_MASTER)
        end = b.store.max_phy_offset
        with pytest.raises(FailoverError, match="stale master"):
            await b.reconciler.reconcile(a.config.broker_addr)
        assert b.role.epoch == 2 and b.store.max_phy_offset == end
    finally:
        await stop(b, a)


@async_test
async def test_become_slave_of_an_unreachable_master_still_follows_it(tmp_path):
    a = await node(tmp_path, "a", brokerRole="SYNC_MASTER", nodeName="a")
    try:
        with pytest.raises(FailoverError, match="cannot read the epochs"):
            await a.failover.become_slave("127.0.0.1:9", "127.0.0.1:10", 1)
        # a slave now, whose HA client reconciles and replicates once the master answers
        assert a.role.role is BrokerRole.SLAVE
        client = a.replication.ha_client
        assert client is not None and client.master_ha_addr == "127.0.0.1:10"
    finally:
        await stop(a)


@async_test
async def test_promote_takes_an_epoch_no_lower_than_min_epoch(tmp_path):
    a = await node(tmp_path, "a", brokerRole="SYNC_MASTER", nodeName="a")
    try:
        result = await promote("broker-a", "a", broker_addrs=[a.config.broker_addr], min_epoch=7)
        assert result["epoch"] == 7 and a.role.epoch == 7
        result = await promote("broker-a", "a", broker_addrs=[a.config.broker_addr])
        assert result["epoch"] == 8
    finally:
        await stop(a)


@async_test
async def test_promote_refuses_a_node_behind_another_unless_unclean(tmp_path):
    a, b = await _master_and_slave(tmp_path)
    addrs = [a.config.broker_addr, b.config.broker_addr]
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        await put(a, 1)
        await b.replication.ha_client.stop()
        await a.store.put_message_async(message(2))  # only a holds it
        with pytest.raises(UncleanPromotionError, match="is behind a"):
            await promote("broker-a", "b", broker_addrs=addrs)
        assert (a.role.epoch, b.role.epoch) == (1, 1) and b.role.role is BrokerRole.SLAVE
        done = await promote("broker-a", "b", broker_addrs=addrs, unclean=True)
        assert done["master"] == "b" and b.role.role is BrokerRole.SYNC_MASTER
    finally:
        await stop(b, a)


def test_a_put_admitted_before_the_set_shrank_to_the_master_is_not_acknowledged():
    """Seed 1 of ``haproof sim --controller`` (allAckInSyncStateSet, minInSyncReplicas=2): a
    put admitted while a slave was in the set waited for it; the set shrank to the master alone
    (the slave cut off) and the put was answered PUT_OK on the master's disk only. It must wait
    (and time out) instead: RocketMQ answers it at once (doWaitTransfer, a set of one)."""
    config = SyncStateConfig(all_ack_in_sync_state_set=True, min_in_sync_replicas=2)
    sss = SyncStateSet(0, frozenset({0, 1}), config, DrivenClock())
    sss.on_transfer(1, 100)
    sss.on_ack(1, 100, 100)
    assert sss.admit_put() is None  # the put ending at 200 is appended and waits for 1
    assert not sss.acknowledged(200)
    sss.on_disconnect(1)
    sss.applied({0}, 200)
    assert not sss.acknowledged(200)
    assert sss.acknowledged_offset() < 200
    assert sss.admit_put() == IN_SYNC_REPLICAS_NOT_ENOUGH  # and the next put is refused


@async_test
async def test_become_master_drops_epochs_that_start_past_the_log_end(tmp_path):
    """Seed 1042 of ``haproof sim --controller``: a restarted master began epoch 5 at its log end
    (unflushed bytes a kill had left in the page cache), then a power loss took those bytes: the
    epoch file said epoch 5 starts past the log end, every later ``become_master`` appended an
    entry before it (out of order, refused) and the group never had a master again."""
    a = await node(tmp_path, "a", brokerRole="SYNC_MASTER", nodeName="a")
    try:
        await put(a, 1)
        end = a.store.max_phy_offset
        a.role.begin_epoch(2, end + 500)  # the epoch's first bytes lost with the power
        await a.failover.become_master(3, BrokerRole.SYNC_MASTER)
        assert a.role.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, end)]
        assert a.role.role is BrokerRole.SYNC_MASTER and a.role.epoch == 3
    finally:
        await stop(a)


def test_the_confirm_offset_stops_at_the_masters_flushed_offset_under_sync_flush():
    """Seed 5018 of ``haproof sim --controller``: every slave flushed bytes the master (on a slow
    disk) had not; the confirmOffset, over the master's log end, let a consumer read them; a
    power loss took them from the master, which renewed its epoch with the shorter log, and the
    slaves cut them: a record read, then gone."""
    flushed = [100]
    config = SyncStateConfig(all_ack_in_sync_state_set=True, min_in_sync_replicas=2)
    sss = SyncStateSet(0, frozenset({0, 1}), config, DrivenClock())
    sss.master_durable = lambda: flushed[0]
    sss.on_transfer(1, 200)
    sss.on_ack(1, 200, 200)
    assert sss.confirm_offset(200) == 100  # the slave holds 200, the master's disk 100
    flushed[0] = 200
    assert sss.confirm_offset(200) == 200


@async_test
async def test_a_master_renewing_its_epoch_while_a_slave_reconciles_costs_no_cut(tmp_path):
    """The simulation's seed 900075 (counted as ``needless_cuts``): the slave read the master's
    epochs, the master renewed its epoch (closing its HA connections) before the slave
    connected, and the slave then took the new epoch's bytes under the old epoch's entry; a
    later rejoin cut them although the master held them. Now the slave checks the master's
    epochs once connected, before its first report, and reconciles again when they moved."""
    a, b = await _master_and_slave(tmp_path)
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        await put(a, 1)
        reconcile, renewed = b.reconciler.reconcile, []

        async def master_renews_meanwhile(master_addr: str):
            point = await reconcile(master_addr)
            if not renewed:  # between this read of its epochs and the HA connection
                renewed.append(True)
                await a.failover.become_master(3, BrokerRole.SYNC_MASTER)
                await a.store.put_message_async(message(3))
            return point

        b.reconciler.reconcile = master_renews_meanwhile
        await a.failover.become_master(2, BrokerRole.SYNC_MASTER)  # b reconnects, reconciles
        await a.store.put_message_async(message(2))

        def caught_up() -> bool:
            epochs = [e.epoch for e in a.role.epoch_entries]
            return epochs == [1, 2, 3] and b.store.max_phy_offset == a.store.max_phy_offset

        await wait_for(caught_up, what="b caught up with the renewed master")
        end = a.store.max_phy_offset
        assert [e.epoch for e in a.role.epoch_entries] == [1, 2, 3]
        assert b.role.epoch_entries == a.role.epoch_entries
        # a rejoin of b now cuts nothing: its epochs say what the master's say of every byte
        assert consistent_point(b.role.epoch_entries, end, a.role.epoch_entries, end) == end
    finally:
        await stop(b, a)
