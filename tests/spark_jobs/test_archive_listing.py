"""Group and node discovery by delimiter listings; listings resumed from per-node marks."""

from __future__ import annotations

from contracts.object_store import open_store
from spark_jobs.archive_reader import list_broker_names, list_group_keys, list_nodes
from spark_jobs.incremental import NodeMark, resume_key


def test_groups_and_nodes_are_found_without_listing_their_objects(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    for g in ("broker-a", "broker-b"):
        for n in ("n0", "n1"):
            for i in range(50):
                store.put(f"v1/c1/{g}/{n}/snapshots/{i:013d}.json", b"{}")
    store.put("v1/c1/broker-a/_audit/state.json", b"{}")
    store.put("v1/c2/broker-z/n0/snapshots/0000000000001.json", b"{}")
    before = store.requests["keys_listed"]
    assert list_broker_names(store, "c1") == ["broker-a", "broker-b"]
    assert list_nodes(store, "c1", "broker-a") == ["n0", "n1"]  # not _audit
    assert store.requests["keys_listed"] == before  # no object key was listed


def test_group_keys_resume_after_each_nodes_marks(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    chunks = []
    for n in ("n0", "n1"):
        for i in range(5):
            k = f"v1/c1/g/{n}/commitlog/{i * 10:020d}-{i * 10 + 10:020d}-0"
            store.put(k + ".log", b"x")
            store.put(k + ".json", b"{}")
            chunks.append({"start": i * 10, "end": i * 10 + 10, "key": k + ".log", "node": n})
        store.put(f"v1/c1/g/{n}/snapshots/0000000000005.json", b"{}")
    # the group's verified low watermark is 30: each node resumes at its chunk holding byte 29
    mine = [c for c in chunks if c["node"] == "n0"]
    after = resume_key(mine, 30, "")
    assert after == "v1/c1/g/n0/commitlog/00000000000000000020"
    marks = {
        "n0": NodeMark(
            commitlog_after=after, last_snapshot="v1/c1/g/n0/snapshots/0000000000005.json"
        ),
    }
    keys = list_group_keys(store, "c1", "g", marks, ["n0", "n1"])
    keys = [o.key for o in keys]
    n0 = [k for k in keys if "/n0/" in k]
    assert n0 == [
        f"v1/c1/g/n0/commitlog/{s:020d}-{s + 10:020d}-0.{e}"
        for s in (20, 30, 40)
        for e in ("json", "log")
    ]
    assert len([k for k in keys if "/n1/" in k]) == 11  # no marks: all of it


def test_a_resumed_listing_reads_a_few_small_folders_whatever_the_age(tmp_path) -> None:
    """file://: resuming a node's commitlog/ listing after its mark reads the folders around
    the mark (bucket folders), not every chunk name ever written; the same chunks written flat
    (layout revision 1) cost a read of every name."""
    from contracts import archive_layout as layout

    def build(root, n: int, flat: bool):
        store = open_store(f"file://{root}")
        keys = []
        for i in range(n):
            key = layout.chunk_key("c1", "g", "n0", i * 100_000, (i + 1) * 100_000, 0)
            if flat:
                parts = key.split("/")
                key = "/".join(parts[:5] + parts[-1:])
            store.put(key, b"x")
            keys.append(key)
        return store, keys

    def cost(store, keys) -> tuple[int, int]:
        before = store.requests["dir_entries"]
        after = resume_key([{"start": (len(keys) - 2) * 100_000, "key": keys[-2]}], 10**12, "")
        got = [o.key for o in store.list("v1/c1/g/n0/commitlog/", start_after=after)]
        assert got == keys[-2:]
        return store.requests["dir_entries"] - before

    # 10 chunks a 10^6-byte folder; the mark's 10^9-byte folder holds (at most 1,000) such
    # folders: 20 and 200 here, and the listing reads those names, its leaf and the top
    assert cost(*build(tmp_path / "a", 200, flat=False)) <= 20 + 10 + 2
    assert cost(*build(tmp_path / "b", 2000, flat=False)) <= 200 + 10 + 2
    assert cost(*build(tmp_path / "c", 2000, flat=True)) >= 2000
