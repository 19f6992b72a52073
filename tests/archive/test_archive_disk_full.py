"""A full disk under a file:// archive: a real broker process whose archive directory is a tiny
tmpfs (mounted in the process's own user + mount namespace with ``unshare -rm``).

The test fills the tmpfs through ``/proc/PID/root`` while producers keep sending: every send
succeeds, the node reports "No space left on device" naming the path, and once space is freed the
archive catches up with the commit log byte for byte.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.object_store import open_store
from tests.archive.live import (
    archived_bytes,
    archived_end,
    broker_conf,
    log_bytes,
    send,
    status,
    wait_for,
)
from tools.localcluster import LocalProcess, free_port, start_namesrv

TMPFS_BYTES = 4 * 1024 * 1024


def _can_mount_in_namespace(where: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {where}"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def _fill(directory: Path) -> Path:
    """Write zeros until the filesystem says ENOSPC; returns the filler file."""
    filler = directory / "filler"
    block = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_full_disk_is_reported_and_the_archive_catches_up_when_space_returns(tmp_path) -> None:
    archive_dir = tmp_path / "archive"
    archive_dir.mkdir()
    if not _can_mount_in_namespace(archive_dir):
        pytest.skip("unprivileged user+mount namespaces (unshare -rm) are not available here")
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        port = free_port()
        root = f"file://{archive_dir}"
        conf = broker_conf(tmp_path, "a", port, ns.addr, root)
        mount = f"mount -t tmpfs -o size={TMPFS_BYTES} tmpfs {archive_dir}"
        log_file = open(tmp_path / "a.log", "ab")  # noqa: SIM115 - closed by LocalProcess
        proc = subprocess.Popen(
            ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$0" "$@"', sys.executable]
            + ["-m", "broker.cli", "--log-level", "INFO", "broker", "-c", str(conf)]
            + ["--host", "127.0.0.1"],
            stdout=log_file,
            stderr=log_file,
        )
        node = LocalProcess("a", proc, port, tmp_path / "a.log", log_file)
        procs.append(node)
        wait_for(lambda: "error" not in status(node.addr) or not node.alive(), what="node up")
        assert node.alive(), (tmp_path / "a.log").read_text()[-2000:]
        # the node's view of the archive directory: the tmpfs inside its mount namespace
        seen = Path(f"/proc/{proc.pid}/root") / str(archive_dir).lstrip("/")
        store = open_store(f"file://{seen}")
        store_dir = tmp_path / "store-a"

        send(ns.addr, 150, "before")
        wait_for(
            lambda: archived_end(store, "a") >= len(log_bytes(store_dir)) > 0,
            what="first messages archived on the tmpfs",
        )
        assert not any(archive_dir.iterdir()), "the archive must live on the tmpfs only"

        filler = _fill(seen)
        assert send(ns.addr, 300, "full") == 300  # the broker serves with its archive disk full
        st = wait_for(
            lambda: (
                (s := status(node.addr))["archiveLastError"] and int(s["archiveLagBytes"]) > 0 and s
            ),
            what="the node to report the full disk",
        )
        assert "No space left on device" in st["archiveLastError"], st["archiveLastError"]
        assert str(archive_dir) in st["archiveLastError"]  # names the path it could not write

        filler.unlink()
        send(ns.addr, 50, "after")
        wait_for(
            lambda: (
                int((s := status(node.addr))["archiveLagBytes"]) == 0
                and not s["archiveLastError"]
                and archived_end(store, "a") >= len(log_bytes(store_dir))
            ),
            what="the archive to catch up after space was freed",
        )
        data = log_bytes(store_dir)
        assert archived_bytes(store, "a")[: len(data)] == data
        leftovers = [p.name for p in seen.rglob("*") if ".tmp-" in p.name]
        assert leftovers == []  # failed writes leave no temp file behind
        assert node.stop() == 0
        text = (tmp_path / "a.log").read_text()
        errors = [ln for ln in text.splitlines() if "archiving to" in ln and "failed" in ln]
        assert errors and all("No space left on device" in ln for ln in errors)
        assert "reachable again" in text
    finally:
        for p in procs:
            p.kill()
