"""Child process for the crash test: append with SYNC_FLUSH and print every acknowledgement."""

from __future__ import annotations

import sys
import threading

from broker.config import BrokerConfig, FlushDiskType
from broker.store.message_store import MessageStore
from contracts.record.model import Message


def main() -> None:
    root = sys.argv[1]
    cfg = BrokerConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    store = MessageStore.open(cfg)
    store.start()
    out_lock = threading.Lock()

    def writer(w: int) -> None:
        i = 0
        while True:
            body = f"w{w}-m{i}".encode() * 20
            r = store.put_message(Message("crash", body, queue_id=w % 2)).result()
            if r.status.ok:
                with out_lock:
                    sys.stdout.write(f"{r.wrote_offset} {r.wrote_bytes} {w} {i}\n")
                    sys.stdout.flush()
            i += 1

    for w in range(4):
        threading.Thread(target=writer, args=(w,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
