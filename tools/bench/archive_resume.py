"""What a node's archiver reads to resume, by the number of chunks archived: every manifest (as
before issue #19's leftovers were done) against the archive's tail (``archive_tail.py``).

``python -m tools.bench.archive_resume [--chunks N] [--s3]``: one JSON line. The archive is
written straight to files (file://) or through the embedded S3 server (``--s3``): manifests of
64 MiB chunks over 4 epochs with a truncation, and a ``started`` event a day.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid

from broker.archive.archive_tail import read_tail
from contracts import archive_layout as layout
from contracts.object_store import open_store

C, B, N = "bench", "broker-a", "n0"
CHUNK = 64 << 20


def _documents(chunks: int):
    """(key, bytes) of the archive: ``chunks`` manifests, a truncation 3/4 of the way."""
    end, epoch, now = 0, 0, 1_700_000_000_000
    cut_at = chunks * 3 // 4
    for i in range(chunks):
        if i % (chunks // 4 or 1) == 0:
            epoch += 1
        if i == cut_at:
            to, epoch = end - 3 * CHUNK - 1000, epoch + 1
            doc = layout.make_event("truncated", N, C, B, now, epoch, **{"from": end, "to": to})
            yield layout.event_key(C, B, N, now, "truncated"), layout.json_bytes(doc)
            end = to
        now += 70_000
        key = layout.chunk_key(C, B, N, end, end + CHUNK, epoch)
        role = "SYNC_MASTER" if epoch % 2 else "SLAVE"
        man = layout.ChunkManifest(
            end, end + CHUNK, 1, now, now, "0" * 64, N, 0, role, epoch, now, 1 << 30
        )
        yield layout.manifest_key(key), man.to_json()
        if i % 1234 == 0:  # about a day at a chunk every 70 s
            doc = layout.make_event("started", N, C, B, now, epoch)
            yield layout.event_key(C, B, N, now, "started"), layout.json_bytes(doc)
        end += CHUNK


def _full_read(store, prefix: str) -> int | None:
    """Start-up before: every manifest, every event key, the newest truncation."""
    mans = [
        layout.ChunkManifest.from_json(store.get(i.key))
        for i in store.list(prefix + layout.COMMITLOG)
        if i.key.endswith(".json")
    ]
    trunc = [i.key for i in store.list(prefix + layout.EVENTS) if "-truncated" in i.key]
    if not trunc:
        return max((m.end for m in mans), default=None)
    doc = layout.parse_event(store.get(trunc[-1]))
    return max((m.end for m in mans if m.epoch >= doc["epoch"]), default=doc["to"])


def _measure(store, prefix: str) -> dict:
    out = {}
    for name, read in (("tail", lambda: read_tail(store, prefix).end), ("full", None)):
        store.requests.clear()
        t0 = time.perf_counter()
        end = read() if read else _full_read(store, prefix)
        out[name] = {
            "s": round(time.perf_counter() - t0, 3),
            "get": store.requests["get"],
            "list": store.requests["list"],
            "keys_listed": store.requests["keys_listed"],
            "end": end,
        }
    assert out["tail"]["end"] == out["full"]["end"], out
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.archive_resume")
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--s3", action="store_true", help="through the embedded S3 server")
    args = p.parse_args(argv)
    prefix = layout.node_prefix(C, B, N)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.s3:
            for key, data in _documents(args.chunks):
                os.makedirs(os.path.dirname(os.path.join(tmp, key)), exist_ok=True)
                with open(os.path.join(tmp, key), "wb") as fh:
                    fh.write(data)
            figures = _measure(open_store(f"file://{tmp}"), prefix)
        else:
            from tools.s3server import S3Server

            with S3Server.start() as server:
                bucket = f"resume-{uuid.uuid4().hex[:8]}"
                server.create_bucket(bucket)
                store = open_store(f"s3://{bucket}/a", **server.store_options())
                for key, data in _documents(args.chunks):
                    store.put_mutable(key, data)
                figures = _measure(store, prefix)
    print(json.dumps({"bench": "archive_resume", "chunks": args.chunks, "s3": args.s3, **figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
