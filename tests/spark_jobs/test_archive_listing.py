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
