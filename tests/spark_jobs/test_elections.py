"""Elections judged by the audit (spark_jobs/elections.py) over generated archives: the
failover of ``test_failover`` (a-0 master in epoch 0, a-1 elected into epoch 1 holding the log
up to ``cut``), plus the controller's ``elected`` record for it under ``_controller/events/``.
An election whose new master held less than what was acknowledged before it fails acknowledged
durability, naming the candidates that held the bytes; a bad controller object is an archive
fault, never a crash."""

from __future__ import annotations

import pandas as pd
import pytest

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.controller_archive import controller_event_key, controller_events_prefix
from spark_jobs.archive_reader import load_group
from spark_jobs.elections import judge_elections
from tests.spark_jobs.builder import CLUSTER, GROUP
from tests.spark_jobs.test_failover import audit, build, failover  # noqa: F401 - the fixture

A0, A1, A2 = "127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10913"


@pytest.fixture
def history(request):
    """``test_failover``'s stores (imported above as the module-scoped ``failover``)."""
    return request.getfixturevalue("failover")


ELECTED_AT = 1_500  # after a-0's snapshot (1000), before a-1's role_changed (2000)


def candidate(node, bid, max_offset, confirm=0, alive=True, in_set=True) -> dict:
    return {
        "node": node,
        "brokerId": bid,
        "epoch": 0,
        "maxOffset": max_offset,
        "confirmOffset": confirm,
        "priority": 0,
        "inSyncStateSet": in_set,
        "alive": alive,
    }


def elected(archive, node: str, bid: int, candidates: list[dict], unclean=False) -> str:
    doc = layout.make_event(
        "elected",
        node,
        CLUSTER,
        GROUP,
        ELECTED_AT,
        1,
        masterEpoch=1,
        syncStateSetEpoch=2,
        unclean=unclean,
        candidates=candidates,
        brokerId=bid,
        designated=False,
        requester=-1,
    )
    key, data = controller_event_key(doc)
    archive.store.put(key, data)
    return key


def judge(archive):
    return judge_elections(archive.store, load_group(archive.store, CLUSTER, GROUP))


def test_an_election_of_a_node_holding_every_acknowledged_byte_passes(tmp_path, history):
    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=cut)
    elected(
        archive, A1, 2, [candidate(A0, 1, old[-1].end_offset, alive=False), candidate(A1, 2, cut)]
    )
    out = judge(archive)
    assert out.losses == [] and out.faults == [] and out.judged == 1
    (row,) = out.timeline
    assert (row["kind"], row["node"], row["masterEpoch"], row["unclean"]) == (
        "elected",
        A1,
        1,
        False,
    )
    assert [c["node"] for c in row["candidates"]] == [A0, A1]
    ga = load_group(archive.store, CLUSTER, GROUP)
    assert "_controller" not in ga.nodes and ga.faults == []  # not read as a node


def test_a_stale_offset_seen_by_the_controller_is_corrected_by_the_new_masters_archive(
    tmp_path, history
):
    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=cut)
    # the controller saw a-1 100 bytes short (its last heartbeat); a-1's role_changed into
    # epoch 1 names it in the archive, whose epoch-0 chunks reach cut
    elected(
        archive,
        A1,
        2,
        [candidate(A0, 1, old[-1].end_offset, alive=False), candidate(A1, 2, cut - 100)],
    )
    assert judge(archive).losses == []


def test_an_election_of_a_node_lacking_acknowledged_bytes_names_the_holders(tmp_path, history):
    _, old, _, cut, *_ = history
    ack = old[50].wrote_offset  # a-0 acknowledged more than a-1 ever had
    archive, snapshot = build(tmp_path, history, ack=ack)
    elected(
        archive,
        A1,
        2,
        [
            candidate(A0, 1, old[-1].end_offset, alive=False),
            candidate(A1, 2, cut),
            candidate(A2, 3, ack + 10, in_set=False),
        ],
        unclean=True,
    )
    out = judge(archive)
    (loss,) = out.losses
    assert loss["kind"] == "elected_without_acked_bytes" and loss["slave"] == "a-1"
    assert (loss["lost_start"], loss["lost_end"], loss["ack"]) == (cut, ack, ack)
    assert loss["verdict"] == "unclean_election" and loss["snapshot"] == snapshot
    assert loss["detail"].endswith(f"candidates holding the acknowledged bytes: {A0}, {A2}")


def test_a_confirm_offset_reported_to_the_controller_is_a_promise_too(tmp_path, history):
    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=0)  # no snapshot promised anything
    confirm = cut + 40
    elected(
        archive,
        A1,
        2,
        [candidate(A0, 1, old[-1].end_offset, confirm, alive=False), candidate(A1, 2, cut)],
    )
    (loss,) = judge(archive).losses
    assert (loss["lost_start"], loss["lost_end"], loss["verdict"]) == (cut, confirm, "election")
    assert loss["snapshot"] == f"confirmOffset {confirm} reported by {A0} to the controller"


def test_controller_objects_that_do_not_parse_are_archive_faults(tmp_path, history):
    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=cut)
    good = elected(archive, A1, 2, [candidate(A1, 2, cut)])
    folder = good.rsplit("/", 1)[0]
    bad_fields = layout.make_event(
        "elected",
        A1,
        CLUSTER,
        GROUP,
        ELECTED_AT,
        1,
        masterEpoch=1,
        syncStateSetEpoch=2,
        unclean=False,
        brokerId=2,
        candidates=[{"node": A1}],
    )
    key, data = controller_event_key(bad_fields)
    archive.store.put(key, data)
    archive.store.put(f"{folder}/0000000001500-elected-0123456789ab.json", b"{not json")
    archive.store.put(controller_events_prefix(CLUSTER, GROUP) + "stray.txt", b"x")
    out = judge(archive)
    kinds = sorted(f["kind"] for f in out.faults)
    assert kinds == [T.FAULT_BAD_FIELDS, T.FAULT_BAD_JSON, T.FAULT_UNKNOWN_KEY]
    assert all(f["node"] == "_controller" for f in out.faults)
    assert any("candidates[0].brokerId" in f["detail"] for f in out.faults)
    assert out.judged == 1  # the good record is still judged


def test_the_audit_fails_an_election_that_lost_acknowledged_bytes(spark, tmp_path, history):
    _, old, _, cut, *_ = history
    ack = old[50].wrote_offset
    archive, _ = build(tmp_path, history, ack=ack)
    elected(
        archive, A1, 2, [candidate(A0, 1, old[-1].end_offset, alive=False), candidate(A1, 2, cut)]
    )
    v = audit(spark, archive)
    assert not v["passed"]
    status = {c["name"]: c["status"] for c in v["checks"]}
    assert status[T.ACKNOWLEDGED_DURABILITY] == T.STATUS_FAIL
    assert [e["kind"] for e in v["elections"]] == ["elected"]
    table = pd.read_parquet(
        tmp_path / "archive" / "audits" / v["runId"] / GROUP / "acked_losses.parquet"
    )
    row = table[table["kind"] == "elected_without_acked_bytes"].iloc[0]
    assert (row["slave"], row["lost_start"], row["lost_end"]) == ("a-1", cut, ack)
    assert A0 in row["detail"]


def test_the_report_marks_elections_on_its_timeline(tmp_path, history):
    from expectations.evidence import archive_view, plots

    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=cut)
    elected(archive, A1, 2, [candidate(A1, 2, cut)])
    keys = archive_view._keys(archive.store, CLUSTER, GROUP, ["a-0", "a-1"])
    ours = [(k, p) for k, p in keys if p.node == "_controller"]
    assert [(p.kind, p.event_kind, p.at_ms) for _, p in ours] == [("event", "elected", ELECTED_AT)]
    doc = archive_view._read(archive.store, ours[0][0], "event")
    assert doc["kind"] == "elected" and doc["node"] == A1
    snaps = [
        {"role": "SYNC_MASTER", "takenAt": 1_000, "maxPhyOffset": cut + 100, "slaves": {"a-1": cut}}
    ]
    svg = plots.lag_chart(snaps, [doc])
    assert f"{A1}: elected (clean, masterEpoch 1)" in svg


def test_a_masters_set_changes_and_lease_expiry_are_rows_of_the_timeline(tmp_path, history):
    """Controller mode: the master archives each SyncStateSet change it had applied and the
    expiry of its lease as its own events; the audit's timeline shows them among the
    controller's records, in time order."""
    _, old, _, cut, *_ = history
    archive, _ = build(tmp_path, history, ack=cut)
    elected(
        archive, A1, 2, [candidate(A0, 1, old[-1].end_offset, alive=False), candidate(A1, 2, cut)]
    )
    node = sorted(load_group(archive.store, CLUSTER, GROUP).nodes)[-1]
    for at, kind, fields in (
        (
            ELECTED_AT + 300,
            "sync_state_set_changed",
            {
                "members": [node, "a-2"],
                "memberIds": [2, 3],
                "syncStateSetEpoch": 3,
                "masterEpoch": 1,
                "left": [],
                "joined": [3],
            },
        ),
        (ELECTED_AT + 600, "lease_lost", {"lastContactAt": ELECTED_AT + 100, "masterEpoch": 1}),
    ):
        doc = layout.make_event(kind, node, CLUSTER, GROUP, at, 1, **fields)
        archive.store.put(layout.event_key(CLUSTER, GROUP, node, at, kind), layout.json_bytes(doc))
    rows = judge(archive).timeline
    assert [r["kind"] for r in rows] == ["elected", "sync_state_set_changed", "lease_lost"]
    assert rows[1]["members"] == [node, "a-2"] and rows[1]["syncStateSetEpoch"] == 3
    assert rows[2]["lastContactAt"] == ELECTED_AT + 100 and rows[2]["node"] == node
