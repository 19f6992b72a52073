"""Failover and slave sync with ACL on (in-process nodes over TCP): the brokers' own admin keys
carry reconciliation, slave sync and the HA handshake; ``promote`` without an admin signature is
refused and changes no role."""

from __future__ import annotations

import pytest

from broker.config import BrokerRole
from broker.ha.failover import promote
from broker.store.results import PutMessageStatus
from contracts.errors import HaproofError
from tests.acl.acl_files import acl_broker_conf, admin, user
from tests.ha.test_failover import node
from tests.ha.test_replication import log_bytes, put, stop, wait_for
from tests.support.aio import async_test


@async_test
async def test_promote_needs_an_admin_signature_and_then_fails_over(tmp_path):
    acl = acl_broker_conf(tmp_path)
    a = await node(tmp_path, "a", brokerRole="SYNC_MASTER", nodeName="a", **acl)
    b = await node(
        tmp_path,
        "b",
        brokerRole="SLAVE",
        brokerId=1,
        nodeName="b",
        haMasterAddress=f"127.0.0.1:{a.replication.ha.port}",
        **acl,
    )
    addrs = [a.config.broker_addr, b.config.broker_addr]
    try:
        await wait_for(lambda: a.replication.ha.status()["slaves"], what="slave connected")
        statuses = [(await put(a, i))[1] for i in range(50)]
        assert set(statuses) == {PutMessageStatus.PUT_OK}
        # slave sync (admin-only config dumps) works with the broker's own keys
        a.store.topic_config.put(
            "SyncedTopic",
            {"topicName": "SyncedTopic", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2},
        )
        sync = next(s for s in b.replication.services if type(s).__name__ == "SlaveSynchronize")
        await sync.sync_all()
        assert "SyncedTopic" in b.store.topic_config.table

        for hook in (None, user()):
            with pytest.raises(HaproofError):
                await promote("broker-a", "b", broker_addrs=addrs, rpc_hook=hook)
        assert (a.store.role, b.store.role) == (BrokerRole.SYNC_MASTER, BrokerRole.SLAVE)
        assert (a.role.epoch, b.role.epoch) == (1, 1)

        done = await promote("broker-a", "b", broker_addrs=addrs, rpc_hook=admin())
        assert done["master"] == "b" and done["epoch"] == 2
        assert b.store.role is BrokerRole.SYNC_MASTER and a.store.role is BrokerRole.SLAVE
        await wait_for(lambda: b.replication.ha.status()["slaves"], what="old master rejoined")
        for i in range(50, 60):
            _, status = await put(b, i)
            assert status is PutMessageStatus.PUT_OK
        end = b.store.max_phy_offset
        await wait_for(lambda: a.store.max_phy_offset == end, what="catch-up")
        assert log_bytes(a, 0, end) == log_bytes(b, 0, end)
    finally:
        await stop(a, b)
