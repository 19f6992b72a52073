"""The journal (torn tail vs damage, snapshot + replay) and the controller's housekeeping loop
on a DrivenClock (no wall time)."""

from __future__ import annotations

import asyncio

import pytest

from broker.clock import DrivenClock
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.journal import Journal, JournalDamagedError
from broker.controller.state_machine import ControllerStateMachine
from broker.remoting.codes import ResponseCode as RC

C, B = "DefaultCluster", "broker-a"


def _open(path, snapshot_every=1000):
    sm = ControllerStateMachine()
    journal = Journal(path, sm, snapshot_every=snapshot_every)
    journal.open()
    return sm, journal


async def _join(controller: Controller, n: int) -> None:
    for bid in range(1, n + 1):
        r = await controller.submit(lambda m, b=bid: m.apply_broker_id(C, B, b, f"h:{b};{b}"))
        assert r.code == RC.SUCCESS


def test_journal_replays_and_snapshots(tmp_path):
    async def go():
        sm, journal = _open(tmp_path, snapshot_every=2)
        ctl = Controller(ControllerConfig(), journal, sm, clock=DrivenClock())
        await _join(ctl, 3)
        journal.close()
        assert (tmp_path / "snapshot.json").exists()
        sm2, j2 = _open(tmp_path)
        assert sm2.tables.to_snapshot() == sm.tables.to_snapshot()
        j2.close()

    asyncio.run(go())


def test_a_torn_tail_is_cut_and_damage_before_the_end_refuses(tmp_path):
    async def go():
        sm, journal = _open(tmp_path)
        await _join(Controller(ControllerConfig(), journal, sm, clock=DrivenClock()), 2)
        journal.close()

    asyncio.run(go())
    path = tmp_path / "journal"
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:7])  # a write cut short
    sm, journal = _open(tmp_path)
    journal.close()
    assert path.read_bytes() == whole and sorted(sm.tables.replicas[B].brokerIdInfo) == [1, 2]
    damaged = bytearray(whole)
    damaged[12] ^= 0xFF  # inside the first record, with the second after it
    path.write_bytes(bytes(damaged))
    with pytest.raises(JournalDamagedError, match="damaged, not torn"):
        _open(tmp_path)


def test_housekeeping_elects_when_the_master_goes_silent_on_a_driven_clock(tmp_path):
    async def go():
        clock = DrivenClock()
        sm, journal = _open(tmp_path)
        notified: list[tuple[str, dict]] = []

        async def notifier(addr, header, body):
            notified.append((addr, header))

        cfg = ControllerConfig(scanNotActiveBrokerInterval=1000, scanInactiveMasterInterval=1000)
        ctl = Controller(cfg, journal, sm, clock=clock, notifier=notifier)
        await _join(ctl, 2)
        for bid in (1, 2):
            ctl.heartbeats.on_heartbeat(
                C, B, f"h:{bid}", bid, timeout_ms=3000, epoch=0, max_offset=10
            )
        assert (await ctl.elect(B, 1, False)).header["masterBrokerId"] == 1
        r = await ctl.submit(lambda m: m.alter_sync_state_set(B, 1, 1, {1, 2}, 1, ctl.heartbeats))
        assert r.code == RC.SUCCESS
        ctl.housekeeping.start()
        for _ in range(5):  # 2 keeps beating, 1 is silent
            await clock.advance(1000)
            ctl.heartbeats.on_heartbeat(C, B, "h:2", 2, timeout_ms=3000, epoch=1, max_offset=10)
        await ctl.housekeeping.stop()
        info = sm.tables.sync_states[B]
        assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet) == (2, 2, {2})
        assert notified and notified[-1][0] == "h:2" and notified[-1][1]["masterBrokerId"] == 2
        kinds = [r["kind"] for _, r in sm.records_since(0)]
        assert kinds == ["elected", "sync_state_set_changed", "elected"]
        journal.close()

    asyncio.run(go())


def test_memory_log_replays_to_the_same_tables_and_records():
    from broker.controller.memory_log import MemoryLog

    async def go():
        sm = ControllerStateMachine()
        mem = MemoryLog(sm)
        ctl = Controller(ControllerConfig(), mem, sm, clock=DrivenClock())
        await _join(ctl, 2)
        ctl.heartbeats.on_heartbeat(C, B, "h:1", 1, epoch=0, max_offset=5)
        assert (await ctl.elect(B, 1, False)).code == RC.SUCCESS
        mem.leader = False
        assert (await ctl.elect(B, 1, False)).code == RC.CONTROLLER_NOT_LEADER
        again = ControllerStateMachine()
        mem.replay_into(again)
        assert again.tables.to_snapshot() == sm.tables.to_snapshot()
        assert again.records_since(0) == sm.records_since(0)

    asyncio.run(go())
