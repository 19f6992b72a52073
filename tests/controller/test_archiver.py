"""The controller's records shipped to the archive (broker/controller/archiver.py), on a
DrivenClock: in order, by the leader only, content-named (shipping again writes nothing new),
a failed write retried next round; and a real controller process shipping to file://."""

from __future__ import annotations

import asyncio
import json

from broker.clock import DrivenClock
from broker.controller.archiver import ControllerArchiver
from broker.controller.config import ControllerConfig, load_controller_config
from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from contracts import archive_layout as layout
from contracts.controller_archive import (
    controller_event_key,
    controller_events_prefix,
    parse_controller_event,
)
from contracts.errors import ArchiveError, ConfigError
from contracts.object_store import open_store
from spark_jobs.elections import load_records
from tests.conftest import wait_until
from tests.controller.support import B, C, beat, call, join, replica_info, start_controller
from tests.controller.support import wait_answering as answering
from tests.controller.test_state import Group
from tools.localcluster import free_port


def _group_with_history() -> Group:
    """Three brokers join; 3 (longest log) is elected, widens its set to {2, 3}, goes silent,
    and 2 is elected: records elected, sync_state_set_changed, elected."""
    g = Group()
    g.join(3)
    for bid in (1, 2, 3):
        g.beat(bid, 0, 100 * bid)
    assert g.elect().code == RC.SUCCESS and g.info().masterBrokerId == 3
    assert g.alter({2, 3}).code == RC.SUCCESS
    g.clock._mono_ms += 60_000  # 3 goes silent (as tests/controller/test_state.py does)
    g.clock.jump_wall(60_000)
    g.beat(1, 0, 100)
    g.beat(2, 0, 250)
    assert g.elect().code == RC.SUCCESS and g.info().masterBrokerId == 2
    return g


def _keys(store) -> list[str]:
    return [o.key for o in store.list(controller_events_prefix(C, B))]


class FlakyStore:
    def __init__(self, store, fail_puts: int) -> None:
        self.store, self.fail_puts = store, fail_puts

    def put(self, key, data, sha256=None):
        if self.fail_puts:
            self.fail_puts -= 1
            raise ArchiveError("the archive is unreachable (test)")
        return self.store.put(key, data)


def test_the_leader_ships_every_record_in_order_and_shipping_again_adds_nothing(tmp_path):
    g = _group_with_history()
    store = open_store(f"file://{tmp_path}/archive")
    clock = DrivenClock()
    leading = [False]
    flaky = FlakyStore(store, fail_puts=1)
    archiver = ControllerArchiver(
        g.sm.records_since, lambda: leading[0], flaky, period_ms=1_000, clock=clock
    )

    async def rounds(n: int) -> None:  # writes run in a thread: wait for the round to end
        await clock.advance(1_000)
        deadline = asyncio.get_running_loop().time() + 10
        while archiver.rounds < n and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert archiver.rounds == n

    async def go():
        archiver.start()
        await rounds(1)
        assert _keys(store) == [] and archiver.shipped_seq == 0  # a follower ships nothing
        leading[0] = True
        await rounds(2)  # the first write fails: the round stops there
        assert _keys(store) == [] and archiver.failures == 1
        await rounds(3)
        assert archiver.shipped_seq == 3 and archiver.shipped == 3
        await archiver.stop()

    asyncio.run(go())
    kinds = [layout.key_name(k).split("-")[1] for k in _keys(store)]
    assert sorted(kinds) == ["elected", "elected", "sync_state_set_changed"]
    docs = [parse_controller_event(store.get(k), k) for k in _keys(store)]
    first, second = sorted((d for d in docs if d["kind"] == "elected"), key=lambda d: d["at"])
    assert first["brokerId"] == 3 and second["brokerId"] == 2 and second["masterEpoch"] == 2
    seen = {c["brokerId"]: (c["maxOffset"], c["alive"]) for c in second["candidates"]}
    assert seen[2] == (250, True) and seen[3][1] is False
    # a restarted controller (or a new leader) ships the same records again: same keys, same
    # bytes, nothing new written
    before = {k: store.get(k) for k in _keys(store)}
    again = ControllerArchiver(g.sm.records_since, lambda: True, store, clock=clock)
    assert asyncio.run(again.ship()) == 3
    assert {k: store.get(k) for k in _keys(store)} == before


def test_records_lost_from_memory_before_shipping_are_counted(tmp_path):
    g = _group_with_history()
    store = open_store(f"file://{tmp_path}/archive")
    seen = g.sm.records_since(0)
    archiver = ControllerArchiver(
        lambda s: [r for r in seen if r[0] > s and r[0] != 2], lambda: True, store
    )
    archiver.shipped_seq = 1
    assert asyncio.run(archiver.ship()) == 1 and archiver.dropped == 1


def test_two_records_of_one_kind_in_one_millisecond_get_two_keys():
    doc = layout.make_event(
        "sync_state_set_changed",
        "127.0.0.1:10913",
        C,
        B,
        5,
        1,
        members=["a"],
        memberIds=[3],
        syncStateSetEpoch=2,
    )
    other = dict(doc, syncStateSetEpoch=3)
    assert controller_event_key(doc)[0] != controller_event_key(other)[0]
    assert controller_event_key(doc) == controller_event_key(dict(doc))


def test_the_reader_of_node_folders_ignores_the_controller_folder():
    key, _ = controller_event_key(
        layout.make_event("election_failed", "", C, B, 7, 0, masterEpoch=0, candidates=[])
    )
    assert layout.parse_key(key) is None and not layout.in_node_folder(key)


def test_archive_keys_are_checked_in_the_controller_config(tmp_path):
    conf = tmp_path / "controller.conf"
    conf.write_text("archiveEnable=true\n")
    try:
        load_controller_config(str(conf))
    except ConfigError as exc:
        assert "archiveRoot" in str(exc)
    else:
        raise AssertionError("archiveEnable without archiveRoot was accepted")
    conf.write_text(f"archiveEnable=true\narchiveRoot=file://{tmp_path}/a\narchiveIntervalMs=50\n")
    cfg = load_controller_config(str(conf))
    assert (cfg.archiveEnable, cfg.archiveIntervalMs) == (True, 50)
    assert ControllerConfig().archiveEnable is False


def test_a_controller_process_ships_its_elections_to_a_file_archive(tmp_path):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    root = f"file://{tmp_path}/archive"
    proc = start_controller(
        tmp_path, "c0", port, f"archiveEnable=true\narchiveRoot={root}\narchiveIntervalMs=100\n"
    )
    try:
        answering(addr)
        for expected in (1, 2, 3):
            assert join(addr, expected) == expected
        for bid in (1, 2, 3):
            assert beat(addr, bid, 0, 100 * bid, timeout_ms=60_000 if bid != 3 else 1500) == 0
        code, hdr, _ = call(
            addr, Q.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1}
        )
        assert code == RC.SUCCESS and int(hdr["masterBrokerId"]) == 3
        fields = {"brokerName": B, "masterBrokerId": 3, "masterEpoch": 1}
        assert (
            call(
                addr,
                Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                fields,
                {"syncStateSet": [2, 3], "syncStateSetEpoch": 1},
            )[0]
            == RC.SUCCESS
        )
        beat(addr, 3, 0, 300, timeout_ms=500)  # the master goes silent: 2 is elected
        wait_until(
            lambda: int(replica_info(addr)[1].get("masterBrokerId") or 0) == 2,
            15,
            "controller-triggered election of 2",
            every_s=0.1,
        )
        store = open_store(root)
        wait_until(lambda: len(_keys(store)) >= 3, 15, "3 records archived", every_s=0.1)
    finally:
        proc.stop()
    records, faults = load_records(store, C, B)
    assert faults == []
    assert [r["kind"] for r in records] == ["elected", "sync_state_set_changed", "elected"]
    last = records[-1]
    assert last["brokerId"] == 2 and last["node"] == "127.0.0.1:10912" and not last["unclean"]
    by_id = {c["brokerId"]: c for c in last["candidates"]}
    assert by_id[2]["inSyncStateSet"] and by_id[2]["maxOffset"] == 200
    assert records[1]["members"] == ["127.0.0.1:10912", "127.0.0.1:10913"]
    assert json.loads(store.get(_keys(store)[0]))["cluster"] == C
