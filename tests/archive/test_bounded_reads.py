"""file:// reads only regular files and never more than the reader's limit (issue 28, finding 6):
a FIFO is refused at once instead of hanging the reader, a link to /dev/zero is refused instead
of filling memory, and JSON beyond the documented depth or size is a ValueError naming it."""

from __future__ import annotations

import os
import threading

import pytest

from contracts import archive_layout as layout
from contracts.errors import ArchiveError, ObjectTooLargeError
from contracts.object_store import open_store
from contracts.read_limits import MAX_JSON_DOC_BYTES, MAX_JSON_DOC_DEPTH, load_json_doc

KEY = "v1/c/b/n/obj.log"


def _store(tmp_path):
    store = open_store(f"file://{tmp_path}")
    (tmp_path / "v1" / "c" / "b" / "n").mkdir(parents=True)
    return store, tmp_path / KEY


def _in_time(fn, timeout_s: float = 10.0):
    """``fn()``'s outcome, failing (not hanging) when it does not return in time."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "the read hung"
    return out


def test_a_fifo_is_refused_without_blocking(tmp_path) -> None:
    store, path = _store(tmp_path)
    os.mkfifo(path)
    for read in (lambda: store.get(KEY), lambda: store.get_range(KEY, 0, 10)):
        out = _in_time(read)
        assert isinstance(out.get("error"), ArchiveError), out
        assert "not a regular file" in str(out["error"])


def test_a_link_to_dev_zero_is_refused(tmp_path) -> None:
    store, path = _store(tmp_path)
    os.symlink("/dev/zero", path)
    out = _in_time(lambda: store.get(KEY))
    assert isinstance(out.get("error"), ArchiveError) and "not a regular file" in str(out["error"])


def test_a_regular_file_beyond_the_limit_is_not_read(tmp_path) -> None:
    store, path = _store(tmp_path)
    with open(path, "wb") as fh:
        fh.truncate(64 << 30)  # a sparse 64 GiB file: reading it would take the host's memory
    with pytest.raises(ObjectTooLargeError):
        store.get(KEY)
    with pytest.raises(ObjectTooLargeError):
        store.get(KEY, 100)
    assert store.get_range(KEY, 0, 4) == b"\0\0\0\0"


def test_json_documents_have_a_depth_and_size_limit() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="nested deeper"):
        load_json_doc(deep, "verdict.json")
    assert load_json_doc("[" * MAX_JSON_DOC_DEPTH + "]" * MAX_JSON_DOC_DEPTH) is not None
    with pytest.raises(ValueError, match="more than"):
        load_json_doc(b" " * (MAX_JSON_DOC_BYTES + 1), "big.json")
    with pytest.raises(ValueError):
        load_json_doc('{"start": ' + "9" * 23 + "}", "manifest")
    with pytest.raises(ValueError, match="nested deeper"):
        layout.ChunkManifest.from_json('{"a":' * 100_000 + "1" + "}" * 100_000, "m.json")
