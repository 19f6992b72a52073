"""Consumers read only up to the master's confirmOffset in controller mode (RocketMQ's
ReputMessageService stops at getReputEndOffset: the confirmOffset unless readUnCommitted): a
real store gated by the SyncStateSet keeper on a DrivenClock."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import DrivenClock
from broker.config import BrokerConfig, FlushDiskType
from broker.ha import wire
from broker.ha.client import HAClient
from broker.ha.confirm_watch import ConfirmWatch
from broker.ha.group_transfer import GroupTransferService
from broker.ha.sync_state_keeper import SyncStateKeeper
from broker.store.message_store import MessageStore
from broker.store.queries import StoreQueries
from broker.store.results import GetMessageStatus
from broker.store.role import BrokerRoleState
from contracts.record.model import Message
from tests.support.waiting import wait_for

MASTER, S2 = 1, 2
PEER = "127.0.0.1:40002"


def _rig(tmp_path, **conf):
    cfg = BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "flushDiskType": FlushDiskType.ASYNC_FLUSH.value,
            "enableControllerMode": "true",
            "controllerAddr": "127.0.0.1:9878",
            "allAckInSyncStateSet": "true",
            **conf,
        }
    )
    store = MessageStore.open(cfg)
    clock = DrivenClock()
    keeper = SyncStateKeeper(cfg, "node-m", clock, read_gate=store.queries.set_read_end)
    ha = SimpleNamespace(
        peer_ids={PEER: S2}, peer_names={PEER: "node-2"}, connections=[], store=store
    )
    ha.transfer, ha.confirm_watch = GroupTransferService(clock), ConfirmWatch()
    keeper.attach(ha)
    conn = SimpleNamespace(peer=PEER, ack_offset=-1, sent_end=0)
    return store, keeper, conn


def _ack(keeper, conn, store, ack: int) -> None:
    conn.sent_end = store.max_phy_offset
    keeper.conn_transfer(conn, conn.sent_end)
    conn.ack_offset = ack
    keeper.conn_ack(conn, ack)


def _put(store, body: bytes) -> int:
    return store.put_message(Message("T", body, queue_id=0)).result(5).end_offset


def test_a_put_the_set_has_not_acked_is_invisible_to_pulls_until_the_ack(tmp_path):
    store, keeper, conn = _rig(tmp_path)
    woken: list[int] = []
    store.queries.on_read_end_advanced = lambda: woken.append(1)
    try:
        keeper.begin(MASTER, {MASTER, S2}, 5, 1, 0)
        first = _put(store, b"a")
        _ack(keeper, conn, store, first)
        second = _put(store, b"b")
        assert store.get_max_offset_in_queue("T", 0) == 1, "the un-acked record is not counted"
        got = store.get_message("T", 0, 0, 32)
        assert got.status is GetMessageStatus.FOUND and len(got.records) == 1
        beyond = store.get_message("T", 0, 1, 32)
        assert (
            beyond.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and beyond.next_begin_offset == 1
        )
        _ack(keeper, conn, store, second - 1)  # a partial ack: still not the whole record
        assert store.get_max_offset_in_queue("T", 0) == 1
        _ack(keeper, conn, store, second)
        assert woken, "suspended pulls are woken when the read end advances"
        assert store.get_max_offset_in_queue("T", 0) == 2
        assert len(store.get_message("T", 0, 0, 32).records) == 2
    finally:
        store.shutdown()


def test_a_set_of_the_master_alone_reads_to_the_end_and_the_term_end_keeps_the_gate(tmp_path):
    store, keeper, conn = _rig(tmp_path)
    try:
        keeper.begin(MASTER, {MASTER}, 5, 1, 0)
        _put(store, b"a")
        assert store.get_max_offset_in_queue("T", 0) == 1  # confirmOffset = max offset
        keeper.begin(MASTER, {MASTER, S2}, 6, 1, store.max_phy_offset)
        _put(store, b"b")
        assert store.get_max_offset_in_queue("T", 0) == 1
        keeper.end()  # a slave now: its unconfirmed tail stays hidden (a rejoin may cut it)
        assert store.get_max_offset_in_queue("T", 0) == 1
    finally:
        store.shutdown()


def test_read_uncommitted_serves_past_the_confirm_offset(tmp_path):
    store, keeper, conn = _rig(tmp_path, readUnCommitted="true")
    try:
        keeper.begin(MASTER, {MASTER, S2}, 5, 1, 0)
        _put(store, b"a")
        assert store.get_max_offset_in_queue("T", 0) == 1
        assert len(store.get_message("T", 0, 0, 32).records) == 1
    finally:
        store.shutdown()


def test_without_all_ack_nothing_is_gated(tmp_path):
    store, keeper, conn = _rig(tmp_path, allAckInSyncStateSet="false")
    try:
        keeper.begin(MASTER, {MASTER, S2}, 5, 1, 0)
        _put(store, b"a")
        assert store.queries.read_end is None
        assert store.get_max_offset_in_queue("T", 0) == 1
    finally:
        store.shutdown()


def test_the_confirm_offset_rides_every_frame_header_and_a_rise_is_sent_at_once(tmp_path):
    store, keeper, conn = _rig(tmp_path)
    try:
        keeper.begin(MASTER, {MASTER, S2}, 5, 1, 0)
        end = _put(store, b"a")
        header = keeper.header_for(conn)
        assert wire.read_confirm_header(header(0, end)) == (0, end, 0)
        assert not keeper.confirm_moved(conn)
        _ack(keeper, conn, store, end)
        assert keeper.confirm_moved(conn), "the write loop sends a heartbeat with the rise"
        assert wire.read_confirm_header(header(end, 0)) == (end, 0, end)
        assert not keeper.confirm_moved(conn)
    finally:
        store.shutdown()


def test_a_slave_serves_only_what_its_masters_frames_confirmed(tmp_path):
    """A controller-mode slave (a real HAClient) fed by a stand-in master: nothing is served
    before the first frame, then up to each frame's confirmOffset."""
    source, _, _ = _rig(tmp_path / "m")
    first, second = _put(source, b"a"), _put(source, b"b")
    data = source.read_commit_log(0, second)
    source.shutdown()

    async def main():
        reports: list[int] = []

        async def master(reader, writer):
            reports.append(wire.read_report(await reader.readexactly(wire.REPORT.size)))
            writer.write(wire.build_header(0, len(data), first) + data)  # "b" not yet confirmed
            reports.append(wire.read_report(await reader.readexactly(wire.REPORT.size)))
            await confirm_b.wait()
            writer.write(wire.build_header(second, 0, second))  # a heartbeat: "b" confirmed
            await writer.drain()
            await reader.read()

        confirm_b = asyncio.Event()
        server = await asyncio.start_server(master, "127.0.0.1", 0)
        cfg = BrokerConfig.from_dict(
            {
                "storePathRootDir": str(tmp_path / "s"),
                "brokerRole": "SLAVE",
                "brokerId": "1",
                "enableControllerMode": "true",
                "controllerAddr": "127.0.0.1:9878",
            }
        )
        store = MessageStore.open(cfg)
        client = HAClient(
            store, cfg, BrokerRoleState.configured(cfg), node_name="s", namesrv_addrs=[]
        )
        client.set_master(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await client.start()
        try:
            assert store.queries.read_end == 0  # nothing confirmed before the master says
            await wait_for(lambda: len(reports) == 2, 10_000, what="the frame appended")
            assert store.max_phy_offset == second
            assert store.get_max_offset_in_queue("T", 0) == 1
            assert len(store.get_message("T", 0, 0, 32).records) == 1
            confirm_b.set()
            await wait_for(
                lambda: store.get_max_offset_in_queue("T", 0) == 2,
                10_000,
                what="the heartbeat's confirmOffset",
            )
        finally:
            await client.stop()
            server.close()
            store.shutdown()

    asyncio.run(main())


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), max_size=40),
    gap=st.integers(0, 30),
    lo=st.integers(0, 10),
    end=st.integers(0, 2_000),
)
def test_the_visible_max_counts_exactly_the_entries_ending_at_or_before_the_read_end(
    sizes, gap, lo, end
):
    """A queue's entries ascend in the commit log, other queues' records between them."""
    entries, phy = [], 0
    for size in sizes:
        entries.append((phy, size, 0))
        phy += size + gap
    lo = min(lo, len(entries))

    def get(qo):
        return entries[qo] if lo <= qo < len(entries) else None

    cq = SimpleNamespace(min_offset_in_queue=lo, max_offset_in_queue=len(entries), get=get)
    queries = StoreQueries(None, {}, None, None)
    queries.read_end = end
    visible = queries._visible_max(cq)
    expected = sum(1 for p, s, _ in entries if p + s <= end)
    assert visible == (len(entries) if not entries else max(lo, expected))
