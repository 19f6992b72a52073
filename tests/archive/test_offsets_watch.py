"""``haproof archive --follow`` ships a snapshot at each change of consumerOffset.json between
rounds (a store whose commits are not records: the blind window is the file's cadence)."""

from __future__ import annotations

import os
import threading

from broker.archive.offsets_watch import POLL_MS, OffsetsWatch


def test_a_snapshot_at_each_change_and_none_without(tmp_path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    path = cfg / "consumerOffset.json"
    path.write_text('{"offsetTable": {}}')
    shipped = []
    watch = OffsetsWatch(str(tmp_path), lambda: shipped.append(path.read_text()))
    stop = threading.Event()
    assert watch.wait(stop, POLL_MS) is False and shipped == []  # unchanged: nothing
    path.write_text('{"offsetTable": {"T@G": {"0": 5}}}')
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert watch.wait(stop, POLL_MS) is False
    assert shipped == ['{"offsetTable": {"T@G": {"0": 5}}}'] and watch.snapshots == 1
    stop.set()
    assert watch.wait(stop, 10 * POLL_MS) is True and watch.snapshots == 1
