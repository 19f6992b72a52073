"""What ``haproof chaos`` checks once the run is over, from the client history, the archive
and the nodes' files. The simulation's checker (``tools/sim/invariants.py``) owns the
invariants whose data the real processes give in its shape: one master per epoch and epochs
only going up (``Checker.observe`` / ``master_under``, fed the archive's events and the epochs
of the acknowledgements), log matching (``Checker.log_matching`` over the commit log files).
The ones here have no counterpart there: an acknowledgement is known to a client by its label
and offsets, not by the stored bytes (``ack-lost`` below reads the record back), and committed
consumer offsets (Jepsen's non-monotonic check on QUERY_CONSUMER_OFFSET answers).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from broker.store.epoch import EpochEntry, EpochFile
from contracts.archive_layout import parse_event, parse_key
from contracts.record.reader import decode_record
from tools.sim.invariants import Checker, Violation


class FileLog:
    """A node's commit log as its files hold it, up to ``end`` (``commit_log.read`` in the
    shape ``tools/sim/invariants.log_bytes`` reads)."""

    def __init__(self, store_root: Path, end: int) -> None:
        files = sorted((store_root / "commitlog").iterdir())
        self.data = b"".join(f.read_bytes() for f in files)[:end]
        self.min_phy_offset = 0  # the files are joined from the first, as written from 0
        self.max_phy_offset = end
        self.commit_log = self

    def read(self, pos: int, size: int) -> bytes:
        return self.data[pos : pos + size]


@dataclass
class Final:
    """The group as it ended: the master's name, each node's log end and epoch entries."""

    master: str
    ends: dict[str, int]
    epochs: dict[str, list[EpochEntry]]
    logs: dict[str, FileLog]

    @classmethod
    def read(cls, master: str, ends: dict[str, int], stores: dict[str, Path]) -> Final:
        logs = {n: FileLog(stores[n], ends[n]) for n in ends}
        epochs = {n: EpochFile.load(str(stores[n])).entries for n in ends}
        return cls(master, ends, epochs, logs)

    def epoch_at(self, offset: int) -> int:
        entries = self.epochs[self.master]
        i = bisect.bisect_right([e.start_offset for e in entries], offset) - 1
        return entries[i].epoch if i >= 0 else 0


def acks_lost(sends: list[dict], final: Final) -> list[dict]:
    """The SEND_OKs whose record (by its label) is not at its offset in the final master's
    log."""
    log = final.logs[final.master]
    lost = []
    for op in sends:
        try:
            ok = decode_record(log.data, op["offset"]).properties.get("KEYS") == op["label"]
        except Exception:  # noqa: BLE001 - beyond the end, zeros, another record's middle
            ok = False
        if not ok:
            lost.append(op)
    return lost


def describe_send(op: dict) -> str:
    return (
        f"{op['label']} (SEND_OK at {op['t']} ms from {op['addr']}, offset {op['offset']}, "
        f"queue {op['queue']}:{op['queueOffset']})"
    )


def archived_events(archive: Path) -> list[dict]:
    """Every node event in the archive (not the controller's), in time order."""
    out = []
    for path in archive.rglob("*.json"):
        key = path.relative_to(archive).as_posix()
        parsed = parse_key(key)
        if parsed is not None and parsed.kind == "event":
            out.append(parse_event(path.read_bytes(), key))
    return sorted(out, key=lambda d: (d["at"], d["node"]))


def epochs_and_masters(
    events: list[dict], sends: list[dict], final: Final, names, named: list[dict] = ()
) -> int:
    """One master per epoch, epochs only up: the archive's ``started`` / ``role_changed``
    events, the masters the controller named (``named``: the history's ``master`` lines), then
    the epoch each acknowledged record was written under (the final master's epoch file) with
    the node that acknowledged it. Returns how many facts were checked."""
    checker = Checker()
    for doc in events:
        if doc["kind"] in ("started", "role_changed"):
            to = doc.get("to", "")
            checker.observe(doc["node"], to.endswith("MASTER"), doc["epoch"])
    for op in named:
        checker.master_under(names(op["addr"]) or op["addr"], op["epoch"])
    for op in sends:
        checker.master_under(names(op["addr"]) or op["addr"], final.epoch_at(op["offset"]))
    return len(events) + len(named) + len(sends)


def log_matching(final: Final) -> None:
    """Every replica sharing the master's epochs holds the master's bytes."""

    def node(name: str):
        role = SimpleNamespace(epoch_entries=final.epochs[name])
        return SimpleNamespace(
            name=name, up=True, node=SimpleNamespace(store=final.logs[name], role=role)
        )

    slaves = [node(n) for n in final.logs if n != final.master]
    Checker().log_matching(node(final.master), slaves)


def offsets_regressed(queries: list[dict]) -> list[str]:
    """QUERY_CONSUMER_OFFSET answers, per queue in time order, never below an earlier one."""
    highest: dict[int, tuple[int, dict]] = {}
    out = []
    for op in queries:
        best = highest.get(op["queue"])
        if best is not None and op["offset"] < best[0]:
            out.append(
                f"queue {op['queue']}: {op['addr']} answered {op['offset']} at "
                f"{op['t']} ms after {best[1]['addr']} answered {best[0]} at "
                f"{best[1]['t']} ms"
            )
        if best is None or op["offset"] > best[0]:
            highest[op["queue"]] = (op["offset"], op)
    return out


def reads_beyond_confirm(reads: list[dict]) -> list[dict]:
    """Reads whose record ends past the confirmOffset the master reported right after (an
    upper bound of its confirmOffset at the read: it only grows within a master's term)."""
    return [
        op for op in reads if op.get("confirmAfter") is not None and op["end"] > op["confirmAfter"]
    ]


def check_all(history: list[dict], final: Final | None, archive: Path, names) -> dict:
    """Every check; ``violations`` maps a name to its first finding's text."""
    sends = [op for op in history if op["op"] == "send" and op["ok"]]
    reads = [op for op in history if op["op"] == "read"]
    queries = [op for op in history if op["op"] == "query"]
    named = [op for op in history if op["op"] == "master"]
    violations: dict[str, str] = {}
    lost: list[dict] = []
    events: list[dict] = []
    if final is not None:
        lost = acks_lost(sends, final)
        if lost:
            violations["ack-lost"] = f"{len(lost)} acknowledged, first {describe_send(lost[0])}"
        gone = {op["label"] for op in lost}
        kept = [op for op in sends if op["label"] not in gone]
        events[:] = archived_events(archive)
        for check in (
            lambda: epochs_and_masters(events, kept, final, names, named),
            lambda: log_matching(final),
        ):
            try:
                check()
            except Violation as v:
                violations[v.name] = v.detail
    regressed = offsets_regressed(queries)
    if regressed:
        violations["offset-regressed"] = f"{len(regressed)} time(s), first {regressed[0]}"
    beyond = reads_beyond_confirm(reads)
    return {
        "archived_events": len(events) if final is not None else 0,
        "acked": len(sends),
        "lost": len(lost),
        "reads": len(reads),
        "reads_beyond_confirm": len(beyond),
        "offset_queries": len(queries),
        "violations": violations,
        "first_beyond_confirm": json.dumps(beyond[0], sort_keys=True) if beyond else None,
    }
