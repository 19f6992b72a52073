"""Property-based (Hypothesis): committed offsets and acknowledged records survive any single
damage to their files; they are served whole or the node refuses, never older or shorter."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig, FlushDiskType
from broker.store.consumer_offsets import ConsumerOffsetManager, OffsetsUnreadableError
from broker.store.message_store import MessageStore
from broker.store.recovery import StoreDamagedError
from contracts.record.model import Message

_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

commits = st.lists(
    st.tuples(
        st.sampled_from(["g1", "g2"]),
        st.sampled_from(["t", "u"]),
        st.integers(0, 3),
        st.integers(0, 10**12),
    ),
    min_size=1,
    max_size=30,
)
damage = st.tuples(
    st.sampled_from(["file", "bak"]),
    st.sampled_from(["flip", "truncate", "zero"]),
    st.floats(0, 1, exclude_max=True),
    st.integers(1, 255),
)


@_SETTINGS
@given(commits=commits, persists_every=st.integers(1, 5), hit=damage)
def test_offsets_load_whole_or_refuse_never_smaller(commits, persists_every, hit) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "consumerOffset.json")
        t = ConsumerOffsetManager(path)
        for i, (g, topic, q, off) in enumerate(commits):
            t.merge_forward({"offsetTable": {f"{topic}@{g}": {str(q): off}}})
            if i % persists_every == 0:
                t.persist()
        t.persist()
        last = {k: dict(v) for k, v in t.table.items()}
        target = path if hit[0] == "file" else path + ".bak"
        data = bytearray(open(target, "rb").read())
        pos = int(hit[2] * len(data))
        if hit[1] == "flip":
            data[pos] ^= hit[3]
        elif hit[1] == "truncate":
            data = data[:pos]
        else:
            data[pos : pos + 512] = bytes(len(data[pos : pos + 512]))
        with open(target, "wb") as fh:
            fh.write(data)
        try:
            loaded = ConsumerOffsetManager.load(path)
        except OffsetsUnreadableError:
            return  # refusing is allowed; serving older offsets is not
        assert loaded.table == last


FILE_SIZE = 8 * 1024
_PRISTINE: dict[str, object] = {}


def _pristine() -> tuple[str, int, int]:
    """One store written once per session: (root, log end, start of the last record)."""
    if not _PRISTINE:
        root = tempfile.mkdtemp(prefix="haproof-prop-")
        cfg = _cfg(os.path.join(root, "store"))
        store = MessageStore.open(cfg)
        rs = [
            store.put_message(Message("t", f"{i:05d}".encode() * 30, queue_id=i % 3)).result()
            for i in range(90)
        ]
        store.shutdown()
        _PRISTINE.update(root=root, end=rs[-1].end_offset, last=rs[-1].wrote_offset)
    return os.path.join(_PRISTINE["root"], "store"), _PRISTINE["end"], _PRISTINE["last"]


def _cfg(root: str) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 200,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
    )


@_SETTINGS
@given(where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_a_flipped_log_byte_is_refused_or_loses_no_record(where, xor) -> None:
    pristine, end, last = _pristine()
    first = max(0, (end // FILE_SIZE - 2) * FILE_SIZE)  # the files a clean restart scans
    pos = first + int(where * (end - first))
    with tempfile.TemporaryDirectory() as d:
        root = os.path.join(d, "store")
        shutil.copytree(pristine, root)
        cfg = _cfg(root)
        path = os.path.join(cfg.store_path_commit_log, f"{pos - pos % FILE_SIZE:020d}")
        with open(path, "r+b") as fh:
            fh.seek(pos % FILE_SIZE)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ xor]))
        try:
            store = MessageStore.open(cfg)
        except StoreDamagedError as exc:
            assert exc.damage.start <= pos < exc.damage.resume
            return
        got = store.max_phy_offset
        store.shutdown()
        # whole log kept, or only the last record dropped (a torn write looks the same)
        assert got == end or (got == last and pos >= last)
