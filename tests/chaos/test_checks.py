"""The checks of ``haproof chaos`` on hand-made histories, archives and logs (no processes),
and the controller-mode site of the planted ``unclean-election``."""

from __future__ import annotations

import json

import pytest

from broker import planted_bugs
from broker.controller.election import choose
from broker.controller.events import Candidate
from broker.store.epoch import EpochEntry
from contracts.archive_layout import event_key, make_event
from contracts.record.builder import encode_message
from contracts.record.model import Message
from tools.chaos import checks
from tools.chaos.cli import _kinds
from tools.chaos.runner import KINDS, schedule
from tools.sim.invariants import Violation


def _log(tmp_path, name: str, data: bytes):
    (tmp_path / name / "commitlog").mkdir(parents=True)
    (tmp_path / name / "commitlog" / f"{0:020d}").write_bytes(data + bytes(64))
    return checks.FileLog(tmp_path / name, len(data))


def _final(tmp_path, logs: dict[str, bytes], master: str = "a", epochs=None) -> checks.Final:
    entries = epochs or [EpochEntry(1, 0)]
    return checks.Final(
        master,
        {n: len(d) for n, d in logs.items()},
        {n: list(entries) for n in logs},
        {n: _log(tmp_path, n, d) for n, d in logs.items()},
    )


def _record(label: str) -> bytes:
    msg = Message("T", f"{label}-body".encode(), properties={"KEYS": label})
    return bytes(encode_message(msg, ("127.0.0.1", 1)).data)


def test_offsets_going_back_are_found_and_ties_are_not() -> None:
    ops = [
        {"t": 1, "queue": 0, "offset": 5, "addr": "x"},
        {"t": 2, "queue": 1, "offset": 1, "addr": "x"},
        {"t": 3, "queue": 0, "offset": 5, "addr": "y"},
        {"t": 4, "queue": 0, "offset": 4, "addr": "y"},
    ]
    found = checks.offsets_regressed(ops)
    assert len(found) == 1 and "y answered 4 at 4 ms after x answered 5" in found[0]


def test_a_read_past_the_confirm_offset_reported_after_it_is_counted() -> None:
    reads = [
        {"end": 100, "confirmAfter": 100},
        {"end": 101, "confirmAfter": 100},
        {"end": 5, "confirmAfter": None},
    ]
    assert checks.reads_beyond_confirm(reads) == [reads[1]]


def test_an_ack_missing_from_the_final_master_is_lost(tmp_path) -> None:
    first = _record("m-1")
    final = _final(tmp_path, {"a": first + _record("m-2")})
    sends = [
        {"label": "m-1", "offset": 0, "t": 1, "addr": "a", "queue": 0, "queueOffset": 0},
        {"label": "m-2", "offset": len(first), "t": 2, "addr": "a", "queue": 0, "queueOffset": 1},
        {"label": "m-3", "offset": 9999, "t": 3, "addr": "a", "queue": 0, "queueOffset": 2},
    ]
    assert [op["label"] for op in checks.acks_lost(sends, final)] == ["m-3"]


def test_two_nodes_acknowledging_under_one_epoch_is_found(tmp_path) -> None:
    final = _final(tmp_path, {"a": b"x" * 200}, epochs=[EpochEntry(1, 0), EpochEntry(2, 100)])
    sends = [{"addr": "A", "offset": 10}, {"addr": "A", "offset": 150}]
    assert checks.epochs_and_masters([], sends, final, str.lower) == 2
    with pytest.raises(Violation, match="one-master-per-epoch"):
        checks.epochs_and_masters([], [*sends, {"addr": "B", "offset": 120}], final, str.lower)
    with pytest.raises(Violation, match="b and a both master under epoch 2"):
        checks.epochs_and_masters([], sends, final, str.lower, [{"addr": "B", "epoch": 2}])


def test_archived_events_feed_the_epoch_checks(tmp_path) -> None:
    for node, at, epoch, to in (
        ("a", 1, 1, "SYNC_MASTER"),
        ("b", 2, 2, "SYNC_MASTER"),
        ("a", 3, 1, "SLAVE"),
    ):
        path = tmp_path / event_key("C", "broker-a", node, at, "role_changed")
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = make_event("role_changed", node, "C", "broker-a", at, epoch, to=to, **{"from": "x"})
        path.write_text(json.dumps(doc))
    events = checks.archived_events(tmp_path)
    assert [e["at"] for e in events] == [1, 2, 3]
    final = _final(tmp_path, {"a": b"x"})
    checks.epochs_and_masters(events[:2], [], final, str)
    with pytest.raises(Violation, match="epoch-monotonic"):  # a went from 1 to 2? no: 2 to 1
        checks.epochs_and_masters(
            [*events[:2], {**events[1], "node": "b", "epoch": 1, "to": "SLAVE"}], [], final, str
        )


def test_replicas_with_other_bytes_break_log_matching(tmp_path) -> None:
    checks.log_matching(_final(tmp_path / "same", {"a": b"abcd", "b": b"abcd", "c": b"ab"}))
    with pytest.raises(Violation, match="log-matching.*offset 2"):
        checks.log_matching(_final(tmp_path / "differ", {"a": b"abcd", "b": b"abXd"}))


def test_the_schedule_is_the_seeds_and_fault_kinds_are_checked() -> None:
    assert schedule(7, 5, KINDS) == schedule(7, 5, KINDS)
    assert {f.kind for f in schedule(7, 50, ("pause",))} == {"pause"}
    assert _kinds("kill,pause") == ("kill", "pause")
    with pytest.raises(Exception, match="fault kinds are"):
        _kinds("kill,explode")


def test_the_planted_unclean_election_takes_a_node_outside_the_set() -> None:
    def cand(bid: int, offset: int, in_set: bool) -> Candidate:
        return Candidate(bid, f"127.0.0.1:{bid}", 1, offset, offset, 0, in_set, True)

    cands = [cand(1, 100, False), cand(2, 500, True), cand(3, 900, False)]
    assert choose(cands, old_master=None, designated=None, unclean_allowed=False) == (2, False)
    planted_bugs.switch_on({"unclean-election"})
    try:
        assert choose(cands, old_master=None, designated=None, unclean_allowed=False)[0] == 3
    finally:
        planted_bugs.switch_off()


def test_the_environment_switches_planted_bugs_on_and_refuses_unknown_names() -> None:
    try:
        planted_bugs.switch_on_from_env({"HAPROOF_PLANTED_BUG": "early-ack, unclean-election"})
        assert planted_bugs.active_names() == ["early-ack", "unclean-election"]
        with pytest.raises(ValueError, match="no-such-bug"):
            planted_bugs.switch_on_from_env({"HAPROOF_PLANTED_BUG": "no-such-bug"})
    finally:
        planted_bugs.switch_off()
    planted_bugs.switch_on_from_env({})
    assert planted_bugs.active_names() == []
