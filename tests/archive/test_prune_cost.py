"""A prune reads the manifests it expires and the first one it keeps, no further; on file:// it
leaves no empty folders, so the next prune lists only what was kept."""

from __future__ import annotations

import os

from broker.archive import retention
from contracts import archive_layout as layout
from contracts.object_store import open_store

C, B, N = "c1", "broker-a", "n0"
DAY_MS = 86_400_000
T0_MS = 1_700_000_000_000


def write_chunks(store, count: int, size: int = 64 << 20) -> None:
    """``count`` chunks, one a day (manifest and log), and a snapshot and an event a day."""
    for i in range(count):
        at = T0_MS + i * DAY_MS
        key = layout.chunk_key(C, B, N, i * size, (i + 1) * size, 0)
        store.put(key, b"x")
        man = layout.ChunkManifest(
            i * size, (i + 1) * size, 1, at, at, "0" * 64, N, 0, "SYNC_MASTER", 0, at, 1 << 30
        )
        store.put(layout.manifest_key(key), man.to_json())
        snap = layout.Snapshot(N, B, 0, "SYNC_MASTER", 0, at, 0, 0, 0)
        store.put(layout.snapshot_key(C, B, N, at), snap.to_json())
        doc = layout.make_event("started", N, C, B, at, 0)
        store.put(layout.event_key(C, B, N, at, "started"), layout.json_bytes(doc))


def test_a_prune_gets_what_it_expires_and_one_more_and_leaves_no_empty_folders(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    write_chunks(store, 300)
    before = T0_MS + 200 * DAY_MS  # the first 200 days go
    store.requests.clear()
    res = retention.prune_group(store, C, B, before, unaudited=True, now_ms=before + DAY_MS)
    assert res.deleted == 200 * 4  # log, manifest, snapshot, event a day
    # 200 expired manifests, the first kept one and the retention marker (not there yet)
    assert store.requests["get"] == 202, store.requests
    node = os.path.join(tmp_path, layout.node_prefix(C, B, N))
    for dirpath, dirnames, filenames in os.walk(node):
        assert dirnames or filenames, f"{dirpath} was left empty"
    kept = sorted(i.key for i in store.list(layout.node_prefix(C, B, N)))
    assert len(kept) == 100 * 4 and layout.parse_key(kept[0]).start == 200 * (64 << 20)

    store.requests.clear()  # the next night's prune: the pruned history is not listed again
    again = retention.prune_group(store, C, B, before, unaudited=True, now_ms=before + DAY_MS)
    assert again.deleted == 0
    assert store.requests["keys_listed"] <= len(kept), store.requests
    # the folders read hold kept keys only (with the empty folders of the pruned 200 days left
    # behind, this read 1,246 entries in 850 folders)
    assert store.requests["dir_entries"] <= 2 * len(kept), store.requests
    assert store.requests["list"] <= len(kept), store.requests
    assert store.requests["get"] == 2  # the first kept manifest and the marker
