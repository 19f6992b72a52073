"""file:// deletes leave no empty bucket folders behind, and never break a concurrent put."""

from __future__ import annotations

import os
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import archive_layout as layout
from contracts.object_store import open_store

C, B = "c1", "broker-a"


def folders(root: str) -> set[str]:
    """Every folder below ``root``, relative to it."""
    out = set()
    for dirpath, dirnames, _ in os.walk(root):
        out |= {os.path.relpath(os.path.join(dirpath, d), root) for d in dirnames}
    return out


def ancestors(keys, upto: int = 1) -> set[str]:
    """The folders that hold ``keys`` (each key's parent folders, ``upto`` levels and below)."""
    out = set()
    for key in keys:
        parts = key.split("/")[:-1]
        out |= {"/".join(parts[:n]) for n in range(upto, len(parts) + 1)}
    return out


KEY = st.one_of(
    st.builds(
        lambda node, start, size, epoch: layout.chunk_key(C, B, node, start, start + size, epoch),
        st.sampled_from(["a", "b"]),
        st.integers(0, 10**13),
        st.integers(1, 10**8),
        st.integers(0, 3),
    ),
    st.builds(
        lambda node, t: layout.snapshot_key(C, B, node, t),
        st.sampled_from(["a", "b"]),
        st.integers(0, 10**13 - 1),
    ),
    st.builds(
        lambda node, t, kind: layout.event_key(C, B, node, t, kind),
        st.sampled_from(["a", "b"]),
        st.integers(0, 10**13 - 1),
        st.sampled_from(layout.EVENT_KINDS),
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=st.sets(KEY, min_size=1, max_size=25), data=st.data())
def test_deletes_leave_exactly_the_folders_of_the_remaining_keys(tmp_path_factory, keys, data):
    root = tmp_path_factory.mktemp("store")
    store = open_store(f"file://{root}")
    for key in sorted(keys):
        store.put(key, b"x")
    gone = data.draw(st.sets(st.sampled_from(sorted(keys))))
    for key in data.draw(st.permutations(sorted(gone))):
        store.delete(key)
    kept = keys - gone
    # the node folders stay (the folders above them too); below, only what holds a kept key
    node_folders = {layout.node_prefix(C, B, layout.parse_key(k).node).rstrip("/") for k in keys}
    assert folders(root) == ancestors(kept) | ancestors(k + "/x" for k in node_folders)
    assert [i.key for i in store.list("v1/")] == sorted(kept)


def test_a_pruned_year_leaves_no_empty_bucket_folders(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    keys = [layout.chunk_key(C, B, "a", i << 30, (i + 1) << 30, 0) for i in range(300)]
    keys += [layout.event_key(C, B, "a", i * 86_400_000, "started") for i in range(300)]
    keep = layout.chunk_key(C, B, "a", 300 << 30, 301 << 30, 0)
    for key in [*keys, keep]:
        store.put(key, b"x")
    assert len(folders(tmp_path)) > 300
    for key in keys:
        store.delete(key)
    assert folders(tmp_path) == ancestors([keep])
    store.requests.clear()
    assert [i.key for i in store.list(layout.node_prefix(C, B, "a"))] == [keep]
    assert store.requests["list"] == 5  # the node, commitlog and the three bucket folders of keep


def test_a_delete_racing_a_put_into_the_same_new_folder_never_fails_the_put(tmp_path) -> None:
    """A delete empties a bucket folder while a put creates a key in it: the put succeeds
    (it recreates the folder if the delete removed it) and its key is never lost."""
    store = open_store(f"file://{tmp_path}")
    rounds = 300
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def key(i: int, which: int) -> str:
        return layout.chunk_key(C, B, "a", i * 10**9 + which * 7, i * 10**9 + which * 7 + 1, 0)

    def putter() -> None:
        try:
            for i in range(rounds):
                start.wait()
                store.put(key(i, 1), b"kept")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            start.abort()

    thread = threading.Thread(target=putter)
    thread.start()
    try:
        for i in range(rounds):
            store.put(key(i, 0), b"pruned")
            start.wait()
            store.delete(key(i, 0))
    except threading.BrokenBarrierError:
        pass  # the putter failed: its error is asserted below
    finally:
        thread.join(timeout=60)
    assert not errors, errors
    assert [i.key for i in store.list("v1/")] == [key(i, 1) for i in range(rounds)]
    assert all(store.get(key(i, 1)) == b"kept" for i in range(rounds))
    assert folders(tmp_path) == ancestors(key(i, 1) for i in range(rounds))


def test_a_delete_outside_node_folders_keeps_its_folders(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    store.put("audits/run-1/broker-a/verdict.json", b"{}")
    store.delete("audits/run-1/broker-a/verdict.json")
    assert "audits/run-1/broker-a" in folders(tmp_path)
