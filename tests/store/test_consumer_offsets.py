"""ConsumerOffsetManager: forward-only commits within the queue's bounds, checksummed
generations, and a start that never serves older offsets than the ones committed."""

from __future__ import annotations

import json
import os

import pytest

from broker.store.consumer_offsets import (
    Commit,
    ConsumerOffsetManager,
    OffsetOutOfRangeError,
    OffsetsUnreadableError,
)
from tests.support.aio import async_test


def _manager(tmp_path, top: int | None = None) -> ConsumerOffsetManager:
    path = str(tmp_path / "config" / "consumerOffset.json")
    bound = None if top is None else (lambda topic, qid: top)
    return ConsumerOffsetManager(path, bound)


def test_offsets_only_move_forward_unless_reset(tmp_path) -> None:
    t = _manager(tmp_path)
    events = []
    t.reset_listeners.append(lambda *ev: events.append(ev))
    assert t.commit("g", "t", 0, 10) is Commit.STORED
    assert t.commit("g", "t", 0, 5) is Commit.KEPT_LARGER
    assert t.query("g", "t", 0) == 10
    assert t.reset("g", "t", 0, 3) == 10
    assert t.query("g", "t", 0) == 3
    assert events == [("g", "t", 0, 10, 3)]
    assert ConsumerOffsetManager.load(t.path).query("g", "t", 0) == 3  # reset persists at once


def test_commit_beyond_the_queue_max_is_refused_and_changes_nothing(tmp_path) -> None:
    t = _manager(tmp_path, top=125)
    assert t.commit("g", "t", 0, 125) is Commit.STORED  # = max offset: everything consumed
    with pytest.raises(OffsetOutOfRangeError, match="beyond the queue's max offset 125"):
        t.commit("g", "t", 0, 10**15)
    with pytest.raises(OffsetOutOfRangeError):
        t.commit("g", "t", 0, -5)
    assert t.query("g", "t", 0) == 125 and t.refused_commits == 1


def test_merge_forward_raises_only_smaller_offsets_and_ignores_bounds(tmp_path) -> None:
    t = _manager(tmp_path, top=0)  # a slave whose queues lag its master's: still copied
    raised = t.merge_forward({"offsetTable": {"T@G": {"0": 40, "1": 9}}})
    assert sorted(raised) == [("G", "T", 0, -1, 40), ("G", "T", 1, -1, 9)]
    assert t.merge_forward({"offsetTable": {"T@G": {"0": 30}}}) == []
    assert t.query("G", "T", 0) == 40


def test_persist_writes_generation_and_checksum_to_file_and_backup(tmp_path) -> None:
    t = _manager(tmp_path)
    t.commit("g", "t", 1, 7)
    t.persist()
    t.commit("g", "t", 1, 9)
    t.persist()
    for path in (t.path, t.path + ".bak"):
        doc = json.load(open(path))
        assert doc["offsetTable"] == {"t@g": {"1": 9}} and doc["generation"] == 2
        assert len(doc["checksum"]) == 64
    assert not os.path.exists(t.path + ".tmp")
    again = ConsumerOffsetManager.load(t.path)
    assert again.query("g", "t", 1) == 9 and again.generation == 2


def _persisted(tmp_path, offset=4) -> ConsumerOffsetManager:
    t = _manager(tmp_path)
    t.commit("g", "t", 0, offset)
    t.persist()
    return t


@pytest.mark.parametrize(
    "damage",
    [
        b'{"offsetTable": {"t@g": {0: 4',  # torn
        b"\x00" * 64,  # zeroed block
        b"",  # empty
    ],
)
def test_damaged_file_uses_the_verified_backup_of_the_same_generation(tmp_path, damage) -> None:
    t = _persisted(tmp_path)
    with open(t.path, "wb") as fh:
        fh.write(damage)
    loaded = ConsumerOffsetManager.load(t.path)
    assert loaded.query("g", "t", 0) == 4 and loaded.generation == 1


def test_a_flipped_digit_fails_the_checksum(tmp_path) -> None:
    t = _persisted(tmp_path, offset=500)
    text = open(t.path).read().replace("500", "100")  # still valid JSON, smaller offset
    for path in (t.path, t.path + ".bak"):
        with open(path, "w") as fh:
            fh.write(text)
    with pytest.raises(OffsetsUnreadableError, match="checksum mismatch"):
        ConsumerOffsetManager.load(t.path)


def test_garbage_file_and_legacy_empty_backup_refuse_to_start(tmp_path) -> None:
    """The issue's case: garbage in the file, an old .bak holding {} (no checksum)."""
    t = _persisted(tmp_path)
    with open(t.path, "w") as fh:
        fh.write("garbage")
    with open(t.path + ".bak", "w") as fh:
        fh.write("{}")
    hint = "a slave's copy"
    with pytest.raises(OffsetsUnreadableError) as exc:
        ConsumerOffsetManager.load(t.path, restore_hint=hint)
    msg = str(exc.value)
    assert t.path in msg and "not JSON" in msg and hint in msg and "--accept-offset-loss" in msg
    assert open(t.path).read() == "garbage"  # nothing rewritten


def test_accept_offset_loss_serves_what_is_left_and_says_why(tmp_path) -> None:
    t = _persisted(tmp_path)
    with open(t.path, "w") as fh:
        fh.write("garbage")
    os.unlink(t.path + ".bak")
    loaded = ConsumerOffsetManager.load(t.path, accept_offset_loss=True)
    assert loaded.query("g", "t", 0) == -1
    assert "not JSON" in loaded.accepted_loss and "an empty table" in loaded.accepted_loss


def test_rocketmq_file_without_checksum_loads_and_a_broken_backup_is_only_a_warning(
    tmp_path, caplog
) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable":{"t@g":{0:250,1:250}}}')  # fastjson, unquoted keys
    (tmp_path / "consumerOffset.json.bak").write_text("{broken")
    loaded = ConsumerOffsetManager.load(str(path))
    assert loaded.queues_of("g", "t") == {0: 250, 1: 250}
    assert "consumerOffset.json.bak" in caplog.text


def test_wrong_shape_is_reported(tmp_path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable": {"no-at-sign": {"0": 1}}}')
    with pytest.raises(OffsetsUnreadableError, match="topic@group"):
        ConsumerOffsetManager.load(str(path))


def test_never_smaller_after_any_single_damage(tmp_path) -> None:
    """Every persisted generation, then one copy damaged at every byte position in turn: the
    load either refuses or yields exactly the last committed offsets, never smaller ones."""
    t = _manager(tmp_path)
    for offset in (3, 17, 250):
        t.commit("g", "t", 0, offset)
        t.persist()
    good = open(t.path, "rb").read()
    for target in (t.path, t.path + ".bak"):
        for pos in range(0, len(good), 7):
            damaged = bytearray(good)
            damaged[pos] ^= 0x5A
            with open(target, "wb") as fh:
                fh.write(damaged)
            try:
                got = ConsumerOffsetManager.load(t.path).query("g", "t", 0)
            except OffsetsUnreadableError:
                got = None
            assert got in (None, 250), (target, pos, got)
            with open(target, "wb") as fh:
                fh.write(good)


def test_periodic_persist_writes_only_after_a_change(tmp_path) -> None:
    t = _manager(tmp_path)
    assert t.persist_if_changed() and t.generation == 1  # no file yet: written
    assert not t.persist_if_changed()
    t.commit("g", "t", 0, 5)
    t.commit("g", "t", 0, 5)
    assert t.persist_if_changed() and t.generation == 2
    t.commit("g", "t", 0, 3)  # kept larger: no change
    assert not t.persist_if_changed() and t.generation == 2


def test_offsets_above_their_queue_after_a_lost_tail_are_reported_not_lowered(tmp_path) -> None:
    t = _manager(tmp_path, top=10)
    t.merge_forward({"offsetTable": {"T@G": {"0": 50, "1": 10}}})  # copied, not bounded
    assert t.beyond_queues() == [("G", "T", 0, 50, 10)]
    assert t.query("G", "T", 0) == 50


@async_test
async def test_periodic_persist_loop_writes_after_a_change(tmp_path, driven_clock) -> None:
    """By ticks of a driven clock: nothing is written before the interval, the change is
    written at it."""
    import asyncio

    t = _manager(tmp_path)

    def persisted() -> int:
        return ConsumerOffsetManager.load(t.path).query("g", "t", 0)

    task = asyncio.create_task(t.persist_periodically(10, driven_clock))
    try:
        await driven_clock.settle()
        t.commit("g", "t", 0, 9)
        await driven_clock.advance(9)
        assert not os.path.exists(t.path) or persisted() != 9
        await driven_clock.advance(1)
        assert persisted() == 9
    finally:
        task.cancel()
