"""Promotion, demotion and a rejoining old master's truncation, on in-process nodes over TCP."""

from __future__ import annotations

import errno

from broker.config import BrokerRole
from broker.node import BrokerNode
from broker.store.epoch import EpochEntry
from broker.store.results import PutMessageStatus
from tests.ha.test_replication import _config, log_bytes, put, stop, wait_for
from tests.support.aio import async_test
from tools.localcluster import free_port


async def node(tmp_path, name: str, **kw) -> BrokerNode:
    """A node on a free port pair (listenPort, listenPort + 1 for HA); another process can take
    a port between the probe and the bind, so a clash is retried with new ports."""
    for attempt in range(5):
        try:
            return await BrokerNode.start(
                _config(tmp_path, name, listenPort=free_port(), **kw), "127.0.0.1"
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or attempt == 4:
                raise
    raise AssertionError("unreachable")


@async_test
async def test_promote_then_old_master_rejoins_and_truncates_its_unreplicated_tail(tmp_path):
    a = await node(tmp_path, "a", brokerRole="ASYNC_MASTER", nodeName="a")
    b = await node(
        tmp_path,
        "b",
        brokerRole="SLAVE",
        brokerId=1,
        nodeName="b",
        haMasterAddress=f"127.0.0.1:{a.replication.ha.port}",
    )
    truncations = []
    roles = []
    a.truncations.add(lambda f, t: truncations.append((f, t)))
    b.role.listeners.append(lambda old, new, epoch: roles.append((old, new, epoch)))
    try:
        assert a.role.epoch == 1 and a.role.epoch_entries == [EpochEntry(1, 0)]
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        for i in range(200):
            await put(a, i)
        replicated = a.store.max_phy_offset
        await wait_for(lambda: b.store.max_phy_offset == replicated, what="catch-up")
        # The link goes; the old master takes 50 more messages nobody else has.
        await b.replication.ha_client.stop()
        for i in range(200, 250):
            await put(a, i)
        old_end = a.store.max_phy_offset
        assert old_end > replicated

        # b becomes master under epoch 2 and takes new traffic.
        await b.failover.become_master(2, BrokerRole.SYNC_MASTER)
        assert b.store.role is BrokerRole.SYNC_MASTER and b.role.broker_id == 0
        assert b.role.epoch_entries == [EpochEntry(1, 0), EpochEntry(2, replicated)]
        assert roles == [(BrokerRole.SLAVE, BrokerRole.SYNC_MASTER, 2)]
        # one owner: every reader says what the role state says; the config stays as read
        assert (b.config.broker_role, b.config.broker_id) == (BrokerRole.SLAVE, 1)
        described = b.failover.describe()
        assert (described["brokerRole"], described["brokerId"], described["epoch"]) == (
            "SYNC_MASTER",
            0,
            2,
        )
        assert b.info.table()["haConnections"] == "0"  # its HAService runs now
        assert b.registration._register_request().ext_fields["brokerId"] == "0"
        res, status = await put(b, 1000)
        assert res.status is PutMessageStatus.PUT_OK
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE  # no slave yet

        # a rejoins as b's slave: cut back to where epoch 2 began, then replicate.
        await a.failover.become_slave(b.config.broker_addr, f"127.0.0.1:{b.replication.ha.port}", 1)
        assert truncations == [(old_end, replicated)]
        assert a.role.epoch_entries == b.role.epoch_entries
        await wait_for(lambda: b.replication.ha.status()["slaves"], what="old master connected")
        for i in range(1001, 1050):
            res, status = await put(b, i)
            assert status is PutMessageStatus.PUT_OK  # a acknowledges now
        end = b.store.max_phy_offset
        await wait_for(lambda: a.store.max_phy_offset == end, what="rejoin catch-up")
        assert log_bytes(a, 0, end) == log_bytes(b, 0, end)
        # Its consume queues were cut and rebuilt too: queue offsets continue b's.
        for qid in range(4):
            assert a.store.get_max_offset_in_queue("T", qid) == b.store.get_max_offset_in_queue(
                "T", qid
            )
    finally:
        await stop(a, b)


@async_test
async def test_role_change_with_an_old_epoch_is_refused(tmp_path):
    a = await node(tmp_path, "a", brokerRole="ASYNC_MASTER")
    try:
        await a.failover.become_master(5, BrokerRole.ASYNC_MASTER)
        assert a.role.epoch == 5
        try:
            await a.failover.become_master(4, BrokerRole.ASYNC_MASTER)
        except Exception as exc:  # noqa: BLE001 - asserting the message
            assert "not newer" in str(exc)
        else:
            raise AssertionError("an older epoch was accepted")
        await a.failover.become_master(5, BrokerRole.ASYNC_MASTER)  # idempotent retry
        assert [e.epoch for e in a.role.epoch_entries] == [1, 5]
    finally:
        await stop(a)


def test_promote_ranks_by_the_epoch_of_the_last_byte_held():
    """sim seed 465064305: a node whose epochs name no byte it holds is behind, not ahead."""
    import pytest

    from broker.ha.failover import UncleanPromotionError
    from broker.ha.promotion_rules import refuse_unclean

    def doc(name, end, entries):
        return {
            "nodeName": name,
            "maxOffset": end,
            "epoch": entries[-1][0],
            "epochList": [{"epoch": e, "startOffset": s, "endOffset": 0} for e, s in entries],
        }

    cut = doc("a", 1894, [(1, 0), (2, 1894), (4, 9133)])  # holds epoch 1's bytes only
    holder = doc("b", 9133, [(1, 0), (2, 1894), (3, 6932)])
    with pytest.raises(UncleanPromotionError, match="epoch 1, log end 1894"):
        refuse_unclean(cut, {"a": cut, "b": holder}, [])
    refuse_unclean(holder, {"a": cut, "b": holder}, [])


def test_promote_refuses_while_two_nodes_of_the_group_are_unreachable():
    """sim seed 664625287: the master was down and a slave holding its newest acknowledged
    bytes went down during the promotion; the node promoted lacked them and the slave's log was
    cut when it came back. With one node unreachable the reachable ones hold every
    acknowledged byte (SYNC_MASTER); with two, one of them may be their only holder."""
    import pytest

    from broker.ha.failover import UncleanPromotionError
    from broker.ha.promotion_rules import refuse_unclean

    a = {"nodeName": "a", "maxOffset": 5913, "epoch": 1}
    refuse_unclean(a, {"a": a}, ["127.0.1.3:10911"])  # the failed master alone: fine
    with pytest.raises(UncleanPromotionError, match="2 nodes of the group are unreachable"):
        refuse_unclean(a, {"a": a}, ["127.0.1.2:10911", "127.0.1.3:10911"])
