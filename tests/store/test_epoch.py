"""The epoch file and the consistent point between two logs' epoch histories."""

import pytest

from broker.store.epoch import EpochEntry as E
from broker.store.epoch import EpochFile, EpochFileError, consistent_point


def test_round_trip_and_atomic_persistence(tmp_path):
    f = EpochFile.load(str(tmp_path))
    assert f.entries == [] and f.current_epoch == 0
    f.append(1, 0)
    f.append(2, 4096)
    again = EpochFile.load(str(tmp_path))
    assert again.entries == [E(1, 0), E(2, 4096)] and again.current_epoch == 2
    assert again.to_json(5000) == [
        {"epoch": 1, "startOffset": 0, "endOffset": 4096},
        {"epoch": 2, "startOffset": 4096, "endOffset": 5000},
    ]
    assert not (tmp_path / "epochFileCheckpoint.tmp").exists()


def test_out_of_order_entries_are_refused(tmp_path):
    f = EpochFile.load(str(tmp_path))
    f.append(3, 100)
    with pytest.raises(EpochFileError, match="out of order"):
        f.append(3, 200)  # same epoch
    with pytest.raises(EpochFileError, match="out of order"):
        f.append(4, 50)  # offset going back
    assert EpochFile.load(str(tmp_path)).entries == [E(3, 100)]


def test_corrupt_file_is_a_clear_error(tmp_path):
    f = EpochFile.load(str(tmp_path))
    f.append(1, 0)
    f.append(2, 999)
    path = tmp_path / "epochFileCheckpoint"
    path.write_text(path.read_text().replace("2 999", "2 998"))
    with pytest.raises(EpochFileError, match="checksum"):
        EpochFile.load(str(tmp_path))
    path.write_text("garbage\n")
    with pytest.raises(EpochFileError, match="not an epoch file"):
        EpochFile.load(str(tmp_path))


def test_consistent_point():
    old_master = [E(1, 0)]
    new_master = [E(1, 0), E(2, 5000)]
    # The old master wrote past the promotion point: cut it back to where epoch 2 began.
    assert consistent_point(old_master, 7000, new_master, 9000) == 5000
    # It had not even reached that point (it lost unflushed bytes): nothing to cut.
    assert consistent_point(old_master, 4000, new_master, 9000) == 4000
    # Same history: the shorter log's end.
    assert consistent_point(new_master, 6000, new_master, 9000) == 6000
    # Two later failovers; the rejoining node was master in epoch 2 only until 6000.
    a = [E(1, 0), E(2, 5000)]
    b = [E(1, 0), E(2, 5000), E(3, 6000), E(4, 8000)]
    assert consistent_point(a, 6500, b, 9000) == 6000
    # An epoch with the same number but another start is not shared.
    assert consistent_point([E(1, 0), E(2, 5100)], 6000, b, 9000) == 5000  # epoch 1 ends first
    assert consistent_point([E(7, 0)], 10, b, 9000) is None


def test_an_entry_holding_no_byte_neither_matches_nor_blocks():
    """Sim seed 269174976: a slave adopted epoch 1 before any byte was written; the master lost
    power, its start cut epoch 1 (no byte), and it led again under epoch 2 from offset 0."""
    master = [E(2, 0), E(3, 33435)]
    assert consistent_point([E(1, 0)], 0, master, 34689) == 0  # nothing held: nothing to cut
    assert consistent_point([E(1, 0)], 10, master, 34689) is None  # bytes of epoch 1: unknown
    # a trailing entry past the end is ignored; the one below it still matches
    assert consistent_point([E(2, 0), E(5, 400)], 400, master, 34689) == 400


def test_entries_naming_no_byte_neither_rank_nor_survive_a_start(tmp_path):
    """sim seed 465064305: a power loss left a node epochs past its log end; they must not
    rank it, a start cuts them (RocketMQ's truncateSuffixByOffset), its epoch stays."""
    from broker.store.epoch import held_epoch

    entries = [E(1, 0), E(2, 1894), E(4, 9133)]
    assert held_epoch(entries, 1894) == 1  # holds no byte of epoch 2
    assert held_epoch(entries, 1895) == 2 and held_epoch(entries, 0) == 0
    f = EpochFile.load(str(tmp_path))
    f.replace(entries)
    assert f.cut_to_log(1894) == [E(2, 1894), E(4, 9133)]
    again = EpochFile.load(str(tmp_path))
    assert again.entries == [E(1, 0)] and again.current_epoch == 4  # never hands 4 out again
    assert again.to_json(1894) == [{"epoch": 1, "startOffset": 0, "endOffset": 1894}]
    with pytest.raises(EpochFileError, match="out of order"):
        again.append(1, 2000)
    again.append(5, 1894)
    assert EpochFile.load(str(tmp_path)).current_epoch == 5
