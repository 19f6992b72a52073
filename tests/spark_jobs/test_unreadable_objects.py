"""Objects that cannot be read (access denied, gone between listing and reading) are archive
faults naming the key, on the driver (JSON documents) and in the executors (chunks); no crash."""

from __future__ import annotations

from contracts import archive_layout as layout
from contracts import audit_tables as T
from contracts.errors import ArchiveError, ObjectNotFoundError
from spark_jobs.archive_reader import load_group
from spark_jobs.log_integrity import SCAN_COLUMNS, read_chunk
from tests.spark_jobs.builder import CLUSTER, GROUP, Archive, make_store


class FlakyStore:
    """A real store whose reads of some keys fail as S3 would: denied, or gone."""

    def __init__(self, store, denied=(), gone=()):
        self._store, self.denied, self.gone = store, set(denied), set(gone)
        self.root = store.root

    def __getattr__(self, name):
        return getattr(self._store, name)

    def _check(self, key):
        if key in self.denied:
            raise ArchiveError(f"get {self.root}/{key}: AccessDenied (HTTP 403)")
        if key in self.gone:
            raise ObjectNotFoundError(f"{self.root}/{key} does not exist")

    def get(self, key, max_bytes=None):
        self._check(key)
        return self._store.get(key, max_bytes)

    def get_range(self, key, start, end):
        self._check(key)
        return self._store.get_range(key, start, end)


def _archive(tmp_path) -> Archive:
    make_store(tmp_path / "s", 20)
    archive = Archive(tmp_path / "archive")
    archive.ship(tmp_path / "s", "a-0", "SYNC_MASTER", 0, 1024)
    archive.snapshot("a-0", "SYNC_MASTER", 10)
    archive.snapshot("a-0", "SYNC_MASTER", 20)
    return archive


def test_unreadable_json_documents_are_faults(tmp_path) -> None:
    archive = _archive(tmp_path)
    denied = layout.snapshot_key(CLUSTER, GROUP, "a-0", 10)
    gone = layout.snapshot_key(CLUSTER, GROUP, "a-0", 20)
    ga = load_group(FlakyStore(archive.store, [denied], [gone]), CLUSTER, GROUP)
    faults = {f["key"]: f for f in ga.faults}
    assert (
        faults[denied]["kind"] == T.FAULT_UNREADABLE and "AccessDenied" in faults[denied]["detail"]
    )
    assert faults[gone]["kind"] == T.FAULT_UNREADABLE and "gone when read" in faults[gone]["detail"]
    assert ga.nodes["a-0"].chunks  # everything else was read


def test_unreadable_chunks_are_faults_in_the_executors(tmp_path) -> None:
    archive = _archive(tmp_path)
    chunks = sorted(o.key for o in archive.store.list("v1/") if o.key.endswith(".log"))
    denied, gone, fine = chunks[0], chunks[1], chunks[2]
    store = FlakyStore(archive.store, [denied], [gone])
    for key, kind in ((denied, T.FAULT_UNREADABLE), (gone, T.FAULT_LOG_MISSING)):
        pk = layout.parse_key(key)
        data, row = read_chunk(store, "a-0", key, pk.start, pk.end)
        fault = dict(zip(SCAN_COLUMNS, row, strict=True))
        assert data is None and fault["kind"] == "fault"
        assert (fault["node"], fault["key"], fault["check"]) == ("a-0", key, kind)
        assert (fault["start"], fault["end"]) == (pk.start, pk.end)
    pk = layout.parse_key(fine)
    data, row = read_chunk(store, "a-0", fine, pk.start, pk.end)
    assert data is not None and len(data) == pk.end - pk.start and row == ()
