"""A rejoining old master's cut, crash-safe (broker/ha/rejoin_cut.py, broker/store/truncation.py;
RocketMQ #10666): a process killed (os._exit, no cleanup) after each step of the cut leaves a
store whose next open finishes the cut, so no byte of the stale tail is ever read again, the
consume queues point below the cut, and the epoch file names no byte beyond it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from broker.config import BrokerConfig, FlushDiskType
from broker.ha.rejoin_cut import finish_interrupted
from broker.store.epoch import EpochEntry, EpochFile
from broker.store.message_store import MessageStore
from contracts.record.model import Message

FILE_SIZE = 4096
N = 120
STEPS = ("rejoin_marker", "epochs_cut", "marker", "commitlog", "queues", "epochs_adopted")


class Role:
    """The role state's epoch half (BrokerRoleState.epoch_entries / adopt_epochs)."""

    def __init__(self, root: str) -> None:
        self.file = EpochFile.load(root)

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return list(self.file.entries)

    def adopt_epochs(self, entries) -> None:
        self.file.replace(entries)


def config(root) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 50,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
    )


@pytest.fixture(scope="module")
def old_master(tmp_path_factory):
    """An old master's store: epoch 1 from 0, its own epoch 2 from record 80 (never
    replicated); the new master shares epoch 1 up to record 70 and began epoch 3 there."""
    root = tmp_path_factory.mktemp("old") / "store"
    store = MessageStore.open(config(root))
    rs = [
        store.put_message(Message("t", f"m-{i:04d}".encode() * 20, queue_id=i % 2)).result()
        for i in range(N)
    ]
    store.flush_all()
    store.shutdown()
    role = Role(str(root))
    role.file.append(1, 0)
    role.file.append(2, rs[80].wrote_offset)
    return root, rs


SCRIPT = textwrap.dedent(
    """
    import os, sys
    from broker.store.epoch import EpochEntry
    from broker.ha.rejoin_cut import rejoin_cut
    from broker.store.message_store import MessageStore
    from tests.ha.test_rejoin_cut import Role, config
    root, point, crash_at = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = MessageStore.open(config(root))
    theirs = [EpochEntry(1, 0), EpochEntry(3, point)]
    def step(name):
        if name == crash_at:
            os._exit(9)  # a crash: no flush, no close, no cleanup
    rejoin_cut(store, Role(root), point, theirs, lambda a, b: print("truncated", a, b), step)
    os._exit(0)
    """
)


@pytest.mark.parametrize("crash_at", [*STEPS, "never"])
def test_a_crash_at_any_step_of_the_cut_is_finished_by_the_restart(old_master, tmp_path, crash_at):
    src, rs = old_master
    root = tmp_path / "store"
    shutil.copytree(src, root)
    point, old_end = rs[70].wrote_offset, rs[-1].end_offset
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), str(point), crash_at],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.getcwd(),
    )
    assert done.returncode == (0 if crash_at == "never" else 9), done.stderr
    # the restart: the store's open finishes the cut, the node's start its epoch part
    store = MessageStore.open(config(root))
    try:
        role = Role(str(root))
        interrupted = crash_at in ("rejoin_marker", "epochs_cut", "marker", "commitlog", "queues")
        assert store.finished_cut == ((point, old_end) if interrupted else None)
        assert finish_interrupted(store, role) == (point if interrupted else None)
        assert store.max_phy_offset == point  # never the stale tail
        assert not os.path.exists(root / "truncating")
        assert all(e.start_offset < point for e in role.epoch_entries[:1])
        assert all(e.start_offset <= point for e in role.epoch_entries)
        assert role.epoch_entries in ([EpochEntry(1, 0)], [EpochEntry(1, 0), EpochEntry(3, point)])
        # what is read is what was below the cut, and nothing above it
        last = store.commit_log.lookup(rs[69].wrote_offset)
        assert last.body == b"m-0069" * 20
        for qid in (0, 1):
            assert store.get_max_offset_in_queue("t", qid) == 35  # records 0..69, two queues
        tail_file = os.path.join(
            store.config.store_path_commit_log, f"{point // FILE_SIZE * FILE_SIZE:020d}"
        )
        with open(tail_file, "rb") as fh:
            fh.seek(point % FILE_SIZE)
            assert fh.read(FILE_SIZE - point % FILE_SIZE).strip(b"\0") == b""
        later = [f for f in os.listdir(store.config.store_path_commit_log) if int(f) > point]
        assert later == []
    finally:
        store.shutdown()
