"""The ``delivery`` check's message rows as arrays: one row per master chunk instead of one
Python object per message, and the duplicate grouping in NumPy.

A chunk task returns ``(MESSAGE_KIND, Messages)`` for each master chunk it checked: the fields
the compiled record walk extracted (``contracts.record_walk.message_fields``; no record decoded
in Python), the counted topics' messages only, each with a 64-bit hash of (topic, UNIQ_KEY).
:func:`counts` drops records seen twice (the same epoch and log offset: a chunk shipped twice),
counts the messages per topic and finds the hashes held more than once; only those few
:func:`candidates` are compared by their full topic and UNIQ_KEY in :func:`summaries` (a hash
collision never merges two keys), so the counts are exact; :func:`spark_jobs.delivery.duplicates_of` is the reference.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from contracts.record_walk import key_hash, message_fields

COLUMNS = ("epoch", "log_offset", "at", "topic", "host", "hash", "uniq_at", "uniq_len")


@dataclass
class Messages:
    """Messages as columns (int64 arrays of equal length, ``COLUMNS``): ``topic`` / ``host``
    index ``topics`` (names) / ``hosts`` (the upper-case hex msgId prefix of a store host);
    ``uniq_at`` / ``uniq_len`` the UNIQ_KEY's bytes in ``blob`` (length -1: none)."""

    cols: np.ndarray  # shape (len(COLUMNS), n)
    topics: list[str]
    hosts: list[str]
    blob: bytes

    def __len__(self) -> int:
        return self.cols.shape[1]

    def take(self, idx: np.ndarray) -> Messages:
        return Messages(self.cols[:, idx], self.topics, self.hosts, self.blob)


def from_chunk(data: bytes, start: int, epoch: int, counted) -> Messages | None:
    """The counted messages of a sound chunk (``check_chunk`` found no issue) from the record
    walk's arrays, or None when the walk cannot say (the caller uses :func:`from_rows`)."""
    got = message_fields(data, start)
    if got is None:
        return None
    rows, tpos, hpos = got
    topics = [data[p : p + n].decode("utf-8", "replace") for p, n in tpos.tolist()]
    hosts = [data[p : p + n].hex().upper() for p, n in hpos.tolist()]
    keep = np.array([counted(t) for t in topics] + [False], bool)[rows[:, 2]]
    rows = rows[keep]
    cols = np.empty((len(COLUMNS), len(rows)), np.int64)
    cols[0] = epoch
    cols[1:] = rows[:, [0, 1, 2, 5, 6, 3, 4]].T  # MESSAGE_FIELDS into COLUMNS' order
    return compact(Messages(cols, topics, hosts, data))


def from_rows(rows) -> Messages:
    """``delivery.MESSAGE_COLUMNS`` rows (decoded in Python) as :class:`Messages`."""
    topics: dict[str, int] = {}
    hosts: dict[str, int] = {}
    blob = bytearray()
    out = []
    for epoch, topic, uniq, off, at, msg_id in rows:
        raw = None if uniq is None else uniq.encode()
        h = key_hash(topic.encode(), raw)
        t = topics.setdefault(topic, len(topics))
        s = hosts.setdefault(msg_id[:-16], len(hosts))
        out.append((epoch, off, at, t, s, h, len(blob), -1 if raw is None else len(raw)))
        blob += raw or b""
    cols = np.array(out, np.int64).reshape(-1, len(COLUMNS)).T.copy()
    return Messages(cols, list(topics), list(hosts), bytes(blob))


def compact(m: Messages) -> Messages:
    """The same messages with ``blob`` holding only their UNIQ_KEYs (not the whole chunk)."""
    at, n = m.cols[6], m.cols[7]
    has = n > 0
    lens = np.where(has, n, 0)
    ends = np.cumsum(lens)
    idx = np.repeat(at - (ends - lens), lens) + np.arange(int(ends[-1]) if len(ends) else 0)
    blob = np.frombuffer(m.blob, np.uint8)[idx].tobytes()
    cols = m.cols.copy()
    cols[6] = ends - lens
    return Messages(cols, m.topics, m.hosts, blob)


def _first_copies(c: np.ndarray) -> np.ndarray:
    """The columns ``c`` with one copy per (epoch, log offset) (a chunk shipped twice)."""
    c = c[:, np.lexsort((c[1], c[0]))]
    first = np.ones(c.shape[1], bool)
    first[1:] = (c[0, 1:] != c[0, :-1]) | (c[1, 1:] != c[1, :-1])
    return c[:, first]


def counts(m: Messages) -> tuple[dict[str, int], np.ndarray]:
    """The messages per topic, and the key hashes held by more than one message (the
    candidates: equal hashes, perhaps different keys; :func:`summaries` decides)."""
    if not len(m):
        return {}, np.zeros(0, np.int64)
    c = _first_copies(m.cols)
    n = np.bincount(c[3], minlength=len(m.topics)).tolist()
    hashes, k = np.unique(c[5, c[7] >= 0], return_counts=True)
    return {m.topics[t]: x for t, x in enumerate(n) if x}, hashes[k > 1]


def candidates(m: Messages, hashes: np.ndarray) -> Messages:
    """The messages of ``m`` with a UNIQ_KEY whose hash is one of ``hashes``."""
    return compact(m.take(np.flatnonzero(np.isin(m.cols[5], hashes) & (m.cols[7] >= 0))))


def concat(parts: list[Messages]) -> Messages:
    """One :class:`Messages` of several (their topic and host tables merged)."""
    topics: dict[str, int] = {}
    hosts: dict[str, int] = {}
    cols, blob = [np.zeros((len(COLUMNS), 0), np.int64)], bytearray()
    for m in parts:
        c = m.cols.copy()
        c[3] = np.array([topics.setdefault(t, len(topics)) for t in m.topics] + [0])[c[3]]
        c[4] = np.array([hosts.setdefault(s, len(hosts)) for s in m.hosts] + [0])[c[4]]
        c[6] += len(blob)
        blob += m.blob
        cols.append(c)
    return Messages(np.concatenate(cols, axis=1), list(topics), list(hosts), bytes(blob))


def summaries(m: Messages, shown: int):
    """One bucket's messages: ``("dup", (topic, uniq, copies, gapMs, msgIds))`` per duplicated
    key and ``("enqueued", {topic: n})``, as ``delivery._summaries`` gives them."""
    c = _first_copies(m.cols)
    counts = np.bincount(c[3], minlength=len(m.topics))
    keyed = c[:, c[7] >= 0]
    hashes, n = np.unique(keyed[5], return_counts=True)
    cand = keyed[:, np.isin(keyed[5], hashes[n > 1])]
    groups: dict[tuple[str, bytes], list] = defaultdict(list)
    for epoch, off, at, t, s, _h, u0, ul in cand.T.tolist():
        groups[(m.topics[t], m.blob[u0 : u0 + ul])].append((epoch, off, at, s))
    for (topic, uniq), copies in groups.items():
        if len(copies) > 1:
            copies.sort()
            ats = [a for _e, _o, a, _s in copies]
            ids = [f"{m.hosts[s]}{o & (1 << 64) - 1:016X}" for _e, o, _a, s in copies[:shown]]
            name = uniq.decode("utf-8", "replace")
            yield "dup", (topic, name, len(copies), max(ats) - min(ats), ids)
    yield "enqueued", {m.topics[t]: int(k) for t, k in enumerate(counts.tolist()) if k}
