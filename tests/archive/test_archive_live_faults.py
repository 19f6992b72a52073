"""Archiving in a live broker process under storage faults and crashes.

- The S3 endpoint goes away (a TCP proxy in front of the embedded S3 server refuses every
  connection) while producers keep sending: every send succeeds, the node reports the error and
  a growing lag, then catches up once the endpoint is back.
- kill -9 and a clean restart: the node resumes from what the archive holds and never rewrites
  an object (same inode, same mtime, same bytes for every key written before).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import uuid

from contracts.object_store import open_store
from tests.archive.live import (
    archived_bytes,
    archived_end,
    broker_conf,
    events,
    log_bytes,
    send,
    status,
    wait_for,
)
from tools.faultproxy import FaultProxy
from tools.localcluster import child_pids, free_port, start_broker, start_namesrv
from tools.s3server import DUMMY_CREDENTIALS


class ProxyThread:
    """A FaultProxy on its own event loop thread; ``down()`` makes the endpoint refuse."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy: FaultProxy = self._call(FaultProxy.start("127.0.0.1", target_port))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def _sync(self, fn) -> None:
        async def run():
            fn()

        self._call(run())

    def down(self) -> None:
        # new connections find no target (the proxy closes them), open ones get an RST
        dead = free_port()
        self._sync(lambda: (setattr(self.proxy, "target", ("127.0.0.1", dead)), self.proxy.reset()))

    def up(self) -> None:
        self._sync(lambda: setattr(self.proxy, "target", ("127.0.0.1", self.target_port)))

    def close(self) -> None:
        self._call(self.proxy.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_endpoint_down_then_back_sends_keep_succeeding_and_archive_catches_up(
    tmp_path, s3_server
) -> None:
    bucket = "down-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    root = f"s3://{bucket}/x"
    store = open_store(root, **s3_server.store_options())
    proxy = ProxyThread(s3_server.port)
    endpoint = f"http://127.0.0.1:{proxy.proxy.port}"
    ns = start_namesrv(tmp_path)
    procs = [ns]
    try:
        port = free_port()
        conf = broker_conf(tmp_path, "a", port, ns.addr, root, archiveS3Endpoint=endpoint)
        node = start_broker("a", conf, port, tmp_path, dict(DUMMY_CREDENTIALS))
        procs.append(node)
        store_dir = tmp_path / "store-a"
        send(ns.addr, 150, "before")
        wait_for(
            lambda: archived_end(store, "a") >= len(log_bytes(store_dir)) > 0,
            what="first messages archived",
        )

        proxy.down()
        assert send(ns.addr, 400, "during") == 400  # the broker serves while storage is down
        st = wait_for(
            lambda: (
                (s := status(node.addr))["archiveLastError"] and int(s["archiveLagBytes"]) > 0 and s
            ),
            what="the node to report the storage error and a lag",
        )
        assert "x" in st["archiveLastError"]  # names what failed (the archive key/root)
        log_path = tmp_path / "a.log"
        # let the worker fail a few rounds (each round: bounded retries, then a backoff)
        wait_for(
            lambda: (
                log_path.read_text().count("failed after") >= 0
                and log_path.read_text().count("; retry ") >= 15
            ),
            what="three rounds of failed attempts",
        )
        held = archived_end(store, "a")
        assert held < len(log_bytes(store_dir))  # nothing reached the archive meanwhile

        proxy.up()
        send(ns.addr, 100, "after")
        wait_for(
            lambda: (
                int((s := status(node.addr))["archiveLagBytes"]) == 0
                and not s["archiveLastError"]
                and archived_end(store, "a") >= len(log_bytes(store_dir))
            ),
            what="the archive to catch up",
        )
        assert node.stop() == 0
        data = log_bytes(store_dir)
        assert archived_bytes(store, "a")[: len(data)] == data
        text = (tmp_path / "a.log").read_text()
        failures = [ln for ln in text.splitlines() if "archiving to" in ln and "failed" in ln]
        assert len(failures) == 1, f"one error per change of state, got {failures}"
        assert "will retry" in failures[0] and endpoint in failures[0]
        assert "reachable again" in text
        assert DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in text
        assert DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"] not in text
    finally:
        for p in procs:
            p.kill()
        proxy.close()


def _objects(root) -> dict[str, tuple[int, int, str]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_ino, st.st_mtime_ns, digest)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_kill9_and_restart_resume_without_rewriting_any_object(tmp_path) -> None:
    archive_dir = tmp_path / "archive"
    root = f"file://{archive_dir}"
    store = open_store(root)
    store_dir = tmp_path / "store-a"
    ns = start_namesrv(tmp_path)
    procs = [ns]
    port = free_port()
    conf = broker_conf(tmp_path, "a", port, ns.addr, root)
    try:
        seen: dict[str, tuple[int, int, str]] = {}
        for round_no, how in enumerate(("kill", "term", "last")):
            node = start_broker("a", conf, port, tmp_path)
            procs.append(node)
            send(ns.addr, 250, f"r{round_no}")
            wait_for(
                lambda: archived_end(store, "a") >= len(log_bytes(store_dir)),
                what=f"round {round_no} archived",
            )
            if how == "kill":
                kids = child_pids(node.proc.pid)
                assert kids, "the archiver's child process is not running"
                node.kill()
                # its end of the pipe closed: the orphaned child exits by itself
                wait_for(lambda ks=kids: not any(map(_alive, ks)), what="the child to exit")
            else:
                assert node.stop() == 0
            now = _objects(archive_dir)
            for key, ident in seen.items():
                assert now.get(key) == ident, f"{key} was rewritten or removed"
            assert len(now) > len(seen)
            seen = now
        data = log_bytes(store_dir)
        assert archived_bytes(store, "a") == data
        evs = events(store, "a")
        assert [e["kind"] for e in evs].count("started") == 3
        recovered = [e for e in evs if e["kind"] == "recovered"]
        assert len(recovered) == 1  # only the start after kill -9 was abnormal
        assert 0 < recovered[0]["to"] <= len(data)
        text = (tmp_path / "a.log").read_text()
        assert "conflict" not in text.lower()
        assert "archiving to" not in text or "failed" not in text
    finally:
        for p in procs:
            p.kill()
