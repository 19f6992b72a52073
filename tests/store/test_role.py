"""BrokerRoleState: the one owner of a node's role, broker id, epoch and master."""

from __future__ import annotations

import logging

import pytest

from broker.config import BrokerConfig, BrokerRole
from broker.store.epoch import EpochEntry, EpochFile, EpochFileError
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState, RoleChange


def _config(tmp_path, **kw) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(tmp_path), **kw)


def test_starts_as_configured_and_changes_only_through_change(tmp_path):
    cfg = _config(
        tmp_path, broker_role=BrokerRole.SLAVE, broker_id=2, ha_master_address="10.0.0.1:10912"
    )
    state = BrokerRoleState.configured(cfg, EpochFile.load(str(tmp_path)))
    assert (state.role, state.broker_id, state.epoch) == (BrokerRole.SLAVE, 2, 0)
    assert state.master_ha_addr == "10.0.0.1:10912"
    heard = []
    state.listeners.append(lambda old, new, epoch: heard.append((old, new, epoch)))
    state.begin_epoch(3, 4096)
    change = state.change(BrokerRole.SYNC_MASTER, 0)
    assert change == RoleChange(BrokerRole.SLAVE, BrokerRole.SYNC_MASTER, 3)
    assert heard == []  # told when the failover announces it, once the new services run
    state.announce(change)
    assert heard == [(BrokerRole.SLAVE, BrokerRole.SYNC_MASTER, 3)]
    assert (state.role, state.broker_id) == (BrokerRole.SYNC_MASTER, 0)
    assert (cfg.broker_role, cfg.broker_id) == (BrokerRole.SLAVE, 2)  # the config stays as read
    state.change(BrokerRole.SLAVE, 1, master_ha_addr="10.0.0.9:10912")
    assert state.master_ha_addr == "10.0.0.9:10912"
    state.change(BrokerRole.SLAVE, 1)  # no address given: the known one stays
    assert state.master_ha_addr == "10.0.0.9:10912"


def test_epochs_persist_and_keep_their_order(tmp_path):
    state = BrokerRoleState(BrokerRole.ASYNC_MASTER, 0, EpochFile.load(str(tmp_path)))
    state.begin_epoch(1, 0)
    state.begin_epoch(2, 100)
    with pytest.raises(EpochFileError, match="out of order"):
        state.begin_epoch(2, 200)
    assert EpochFile.load(str(tmp_path)).entries == [EpochEntry(1, 0), EpochEntry(2, 100)]
    state.adopt_epochs([EpochEntry(1, 0), EpochEntry(4, 50)])
    assert state.epoch == 4 and state.epochs_json(80)[-1] == {
        "epoch": 4,
        "startOffset": 50,
        "endOffset": 80,
    }
    assert EpochFile.load(str(tmp_path)).entries == state.epoch_entries


def test_without_an_epoch_file_the_epoch_is_zero_and_cannot_begin(tmp_path):
    state = BrokerRoleState(BrokerRole.ASYNC_MASTER, 0)
    assert state.epoch == 0 and state.epoch_entries == [] and state.epochs_json(10) == []
    with pytest.raises(RuntimeError, match="no epoch file"):
        state.begin_epoch(1, 0)


def test_a_failing_listener_does_not_keep_the_others_from_hearing(tmp_path, caplog):
    state = BrokerRoleState(BrokerRole.SLAVE, 1)
    heard = []

    def broken(old, new, epoch):
        raise ValueError("boom")

    state.listeners += [broken, lambda old, new, epoch: heard.append(new)]
    with caplog.at_level(logging.ERROR, logger="broker.store.role"):
        state.announce(state.change(BrokerRole.ASYNC_MASTER, 0))
    assert heard == [BrokerRole.ASYNC_MASTER]
    assert "role-change listener" in caplog.text


def test_the_store_reads_the_role_from_its_owner(tmp_path):
    """A slave's store refuses puts; once the owner says master, it takes them."""
    from contracts.record.model import Message

    cfg = _config(
        tmp_path, broker_role=BrokerRole.SLAVE, broker_id=1, mapped_file_size_commit_log=1 << 20
    )
    state = BrokerRoleState.configured(cfg)
    store = MessageStore.open(cfg, role_state=state)
    store.start()
    try:
        assert store.role_state is state
        refused = store.put_message(Message("T", b"x", 0)).result()
        assert refused.status.name == "SERVICE_NOT_AVAILABLE"
        state.change(BrokerRole.ASYNC_MASTER, 0)
        assert store.role is BrokerRole.ASYNC_MASTER
        assert store.put_message(Message("T", b"x", 0)).result().status.name == "PUT_OK"
    finally:
        store.shutdown()


def test_a_start_cuts_the_epochs_to_the_log_a_master_keeps_its_own(tmp_path):
    for role, want in (
        (BrokerRole.SLAVE, [EpochEntry(1, 0)]),
        (BrokerRole.SYNC_MASTER, [EpochEntry(1, 0), EpochEntry(3, 500)]),  # its own, at the end
    ):
        root = tmp_path / role.value
        root.mkdir()
        epochs = EpochFile.load(str(root))
        epochs.replace([EpochEntry(1, 0), EpochEntry(2, 500), EpochEntry(3, 800)])
        state = BrokerRoleState(role, 0 if role.is_master else 1, epochs)
        assert state.cut_epochs_to_log(500)
        assert EpochFile.load(str(root)).entries == want and state.epoch == 3
