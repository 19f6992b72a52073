"""A fenced master's refusal says what is true as its role changes (broker/write_gate.py): the
lease while it is the master whose lease ended; once the controller made it a slave of another
(the client unfences only a master whose lease is renewed, so the gate stays closed), that it
is not the master any more, naming the new master and epoch; elected again before a renewal,
that it is a master without a lease yet. Offset commits and sends answer with these words."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from unittest.mock import AsyncMock

from broker.config import BrokerRole
from broker.ha.controller_role import LEASE, ControllerRole
from broker.store.role import BrokerRoleState
from broker.write_gate import WriteGate, offset_commit_refusal

FENCED = "master lease of 8000 ms ended: no heartbeat acknowledged by the controller leader"


def test_the_fence_reason_follows_the_role() -> None:
    async def main() -> None:
        gate = WriteGate()
        failover = SimpleNamespace(become_slave=AsyncMock(), become_master=AsyncMock())
        reconciler = SimpleNamespace(fetch_epochs=AsyncMock(return_value={}))
        role = BrokerRoleState(BrokerRole.SYNC_MASTER, 1)
        owner = ControllerRole(failover, role, reconciler, gate, BrokerRole.SYNC_MASTER)
        owner.fence_writes(FENCED)
        assert offset_commit_refusal(gate, role, True) == FENCED
        await owner.become_slave(broker_id=1, master_epoch=7, master_broker_id=2, master_addr="")
        why = offset_commit_refusal(gate, role, True) or ""
        assert "not the master any more" in why and "brokerId 2" in why and "epoch 7" in why
        assert "lease of" not in why
        await owner.become_master(
            broker_id=1, master_epoch=8, sync_state_set={1}, sync_state_set_epoch=1
        )
        assert "master of epoch 8 without a lease yet" in (gate.refusal or "")
        owner.unfence_writes()
        assert gate.refusal is None

    asyncio.run(main())


def test_restating_an_open_key_leaves_it_open() -> None:
    gate = WriteGate()
    gate.restate(LEASE, "not the master any more")
    assert gate.refusal is None
