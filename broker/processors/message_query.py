"""QUERY_MESSAGE (12): ``mqadmin queryMsgByKey`` asks each broker of a topic for the messages
carrying a key (QueryMessageRequestHeader: ``topic``, ``key``, ``maxNum``, ``beginTimestamp``,
``endTimestamp``); the answer's body is the matching records back to back, its header
``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset``; none is QUERY_NOT_FOUND.

RocketMQ looks the key up in its IndexFile; haproof keeps no index: the broker reads the topic's
newest ``SCAN_MAX_ENTRIES`` messages (spread over its queues, newest first) and matches the key
against each one's ``KEYS`` (space-separated, as RocketMQ splits them) and ``UNIQ_KEY``, inside
the time range. Older messages are not found this way: ``queryMsgByOffset`` reads any. The
guard checks ``topic`` (SUB under ACL).
"""

from __future__ import annotations

import asyncio

from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from contracts.errors import HaproofError
from contracts.record.reader import decode_record

SCAN_MAX_ENTRIES = 16_384  # per request, over all the topic's queues
MAX_NUM = 64  # messages answered at most (RocketMQ's maxMsgsNumBatch)
YIELD_EVERY = 512  # records read between two turns of the event loop
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR


class MessageQueryProcessor:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def handlers(self) -> dict[int, object]:
        return {RequestCode.QUERY_MESSAGE: self.query}

    async def query(self, conn, req: RemotingCommand) -> RemotingCommand:
        try:
            topic, key = req.field("topic"), req.field("key")
            max_num = min(MAX_NUM, max(1, int(req.opt_field("maxNum") or MAX_NUM)))
            begin = int(req.opt_field("beginTimestamp") or 0)
            end = int(req.opt_field("endTimestamp") or 2**63 - 1)
        except (ValueError, HaproofError) as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=f"QUERY_MESSAGE: {exc}")
        found = await self._scan(topic, key, max_num, (begin, end))
        if not found:
            return req.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct (haproof reads the "
                f"topic's newest {SCAN_MAX_ENTRIES} messages)",
            )
        fields = {
            "indexLastUpdateTimestamp": 0,
            "indexLastUpdatePhyoffset": self.store.dispatched_offset,
        }
        return req.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=b"".join(found))

    async def _scan(self, topic: str, key: str, max_num: int, span: tuple[int, int]) -> list:
        store = self.store
        queues = sorted((qid, cq) for (t, qid), cq in list(store.queues.items()) if t == topic)
        if not queues:
            return []
        budget = max(1, SCAN_MAX_ENTRIES // len(queues))
        found: list[tuple[int, bytes]] = []
        read = 0
        for _qid, cq in queues:
            top, low = cq.max_offset_in_queue, cq.min_offset_in_queue
            for qo in range(top - 1, max(low, top - budget) - 1, -1):
                read += 1
                if read % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                data = self._matching(cq.get(qo), key, span)
                if data is not None:
                    found.append(data)
        found.sort(reverse=True)  # the newest first
        return [data for _phy, data in found[:max_num]]

    def _matching(self, entry, key: str, span: tuple[int, int]) -> tuple[int, bytes] | None:
        if entry is None:
            return None
        phy, size, _tag_code = entry
        commit_log = self.store.commit_log
        if phy < commit_log.min_offset or phy + size > self.store.dispatched_offset:
            return None
        try:
            data = commit_log.read_record(phy, size)
            rec = decode_record(data)
        except (HaproofError, ValueError):
            return None  # damaged or gone: the pull path reports it
        if not span[0] <= rec.store_timestamp <= span[1]:
            return None
        props = rec.properties
        keys = (props.get("KEYS") or "").split(KEY_SEPARATOR)
        if key in keys or props.get("UNIQ_KEY") == key:
            return phy, data
        return None
