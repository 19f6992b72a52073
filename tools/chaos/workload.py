"""The clients of ``haproof chaos`` and the history they write: producers sending SYNC sends
through the name server's route, one consumer pulling from the master the controller names
(its own positions), committing offsets and asking for them back, and an observer recording
each master the controller names. Every operation is one JSON line of the history, with its
wall time ``t`` (ms since the run's start) as the client saw it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from broker.client.consumer import decode_pull_body
from broker.client.producer import Producer, SendStatus
from broker.remoting.codes import RequestCode, ResponseCode
from contracts.record.ids import parse_message_id
from tools.chaos.cluster import RealGroup

TOPIC, GROUP, QUEUES = "ChaosTopic", "ChaosConsumers", 4
TICK_S = 0.05


class History:
    """The JSONL history file; ``ops`` keeps every line for the checks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ops: list[dict] = []
        self._file = open(path, "w")  # noqa: SIM115 - closed in close()
        self._t0 = time.time()

    def now_ms(self) -> float:
        return round((time.time() - self._t0) * 1000, 1)

    def add(self, op: str, **fields) -> dict:
        doc = {"t": self.now_ms(), "op": op, **fields}
        self.ops.append(doc)
        self._file.write(json.dumps(doc, sort_keys=True) + "\n")
        return doc

    def close(self) -> None:
        self._file.close()


async def produce(group: RealGroup, history: History, name: str, stop: asyncio.Event) -> None:
    """Send until ``stop``; an answer other than SEND_OK (or none) is no acknowledgement."""
    producer = Producer(f"ChaosProducer-{name}", [group.ns.addr], retry_times=1)
    seq = 0
    try:
        while not stop.is_set():
            seq += 1
            label = f"{name}-{seq}"
            t0 = history.now_ms()
            try:
                res = await producer.send(TOPIC, label.encode() * 8, keys=label)
            except Exception as exc:  # noqa: BLE001 - refused, timed out, no master
                history.add("send", label=label, t0=t0, ok=False, error=str(exc)[:200])
                await asyncio.sleep(TICK_S * 4)
                continue
            host, port, offset = parse_message_id(res.offset_msg_id)
            history.add(
                "send",
                label=label,
                t0=t0,
                ok=res.status is SendStatus.SEND_OK,
                status=res.status.value,
                addr=f"{host}:{port}",
                offset=offset,
                queue=res.queue.queue_id,
                queueOffset=res.queue_offset,
            )
            await asyncio.sleep(TICK_S)
    finally:
        await producer.close()


async def observe(group: RealGroup, history: History, stop: asyncio.Event) -> None:
    """A ``master`` line each time the controller names another (master, epoch)."""
    last = (None, 0)
    while not stop.is_set():
        now = await group.replica_info()
        if now[0] is not None and now != last:
            history.add("master", addr=now[0], epoch=now[1])
            last = now
        await asyncio.sleep(TICK_S * 2)


class Consumer:
    """Pulls every queue from the master in turn, commits where it got to, asks it back."""

    def __init__(self, group: RealGroup, history: History) -> None:
        self.group, self.history = group, history
        self.next: dict[int, int] = dict.fromkeys(range(QUEUES), 0)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            master, _ = await self.group.replica_info()
            if master is not None:
                for q in range(QUEUES):
                    await self._round(master, q)
            await asyncio.sleep(TICK_S * 2)

    async def _round(self, master: str, q: int) -> None:
        g = self.group
        fields = {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": q,
            "queueOffset": self.next[q],
            "maxMsgNums": 16,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
        }
        resp = await g.invoke(master, RequestCode.PULL_MESSAGE, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS and resp.body:
            records = decode_pull_body(resp.body, master)
            status = await g.status(master) or {}
            for rec in records:
                self.history.add(
                    "read",
                    addr=master,
                    queue=q,
                    queueOffset=rec.queue_offset,
                    offset=rec.stored_physical_offset,
                    end=rec.stored_physical_offset + rec.total_size,
                    label=rec.properties.get("KEYS", ""),
                    confirmAfter=status.get("confirmOffset"),
                    epochAfter=status.get("epoch"),
                )
                self.next[q] = max(self.next[q], rec.queue_offset + 1)
        elif resp is not None and resp.code != ResponseCode.SUCCESS:
            hint = resp.ext_fields.get("nextBeginOffset")
            if hint is not None and int(hint) > self.next[q]:
                self.next[q] = int(hint)
        await self._commit_and_query(master, q)

    async def _commit_and_query(self, master: str, q: int) -> None:
        g, h = self.group, self.history
        fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q}
        commit = {**fields, "commitOffset": self.next[q]}
        resp = await g.invoke(master, RequestCode.UPDATE_CONSUMER_OFFSET, commit)
        ok = resp is not None and resp.code == ResponseCode.SUCCESS
        h.add("commit", addr=master, queue=q, offset=self.next[q], ok=ok)
        resp = await g.invoke(master, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        if resp is not None and resp.code == ResponseCode.SUCCESS:
            h.add("query", addr=master, queue=q, offset=int(resp.ext_fields["offset"]))
