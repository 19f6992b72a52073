"""Consumer-progress and offset-reset requests for ``haproof admin``.

- ``GET_CONSUME_STATS`` (208, RocketMQ's code): header ``consumerGroup``, optional ``topic``.
  RocketMQ answers a ConsumeStats whose ``offsetTable`` is keyed by MessageQueue objects, which
  plain JSON cannot express; ours is a list of ``{topic, brokerName, queueId, brokerOffset,
  consumerOffset, diff}`` plus ``brokerAddr``, ``brokerRole`` and ``consumeTps`` (0: not
  measured). A group with no committed offset and no subscription config on this broker gets
  SUBSCRIPTION_GROUP_NOT_EXIST (26).
- ``INVOKE_BROKER_TO_RESET_OFFSET`` (222, RocketMQ's code; RocketMQ 5's header also carries
  ``queueId`` and ``offset``): header ``group``, ``topic``, ``queueId``, ``offset``. The one way
  a committed offset moves backwards: applied with ``ConsumerOffsetManager.reset``, which
  persists it at once, logs it and tells its reset listeners (the archiver records it). Answers
  ``previousOffset``. Consumers of the group should be stopped: a live consumer that commits
  its in-memory (larger) offset afterwards moves the offset forward again (RocketMQ notifies
  clients with RESET_CONSUMER_CLIENT_OFFSET; our client does not take it).
  Without ``offset`` (or with ``offset`` -1, as RocketMQ's mqadmin resetOffsetByTime sends
  it): by time. Header ``timestamp`` (ms), optional ``queueId`` (-1 or absent: every queue) and
  ``isForce`` (default true; false only rewinds): each queue moves to its first message stored
  at or after the time, each move a ``reset`` as above. The body is RocketMQ's ResetOffsetBody
  (``{"offsetTable": {MessageQueue: offset}}`` as fastjson writes it), or with header
  ``strictJson=true`` a list of ``{topic, brokerName, queueId, offset, previousOffset,
  changed}``.
"""

from __future__ import annotations

import json
import logging

from broker.live_config import LiveConfig
from broker.processors.broker_config import fastjson_mq_map
from broker.processors.request_service import RequestService
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import HaproofError

log = logging.getLogger(__name__)


class OffsetAdminService(RequestService):
    """A node service answering GET_CONSUME_STATS and INVOKE_BROKER_TO_RESET_OFFSET."""

    def __init__(self, store: MessageStore, config: LiveConfig, role: BrokerRoleState) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.resets = 0

    def handlers(self) -> dict:
        return {
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    def runtime_info(self) -> dict:
        return {"offsetResets": self.resets}

    def progress(self, group: str, topic: str | None = None) -> list[dict] | None:
        """Per queue broker/consumer offsets of ``group``; None when the broker knows nothing of
        the group."""
        store = self.store
        topics = store.consumer_offsets.topics_of(group)
        known = bool(topics) or group in store.subscription_groups
        if topic is not None:
            topics = {topic}
        if not known:
            return None
        rows = []
        for t in sorted(topics):
            tc = store.topic_config.get(t) or {}
            committed = store.consumer_offsets.queues_of(group, t)
            nums = int(tc.get("readQueueNums", 0))
            for qid in sorted(set(range(nums)) | set(committed)):
                broker_off = store.get_max_offset_in_queue(t, qid)
                consumer_off = store.consumer_offsets.query(group, t, qid)
                rows.append(
                    {
                        "topic": t,
                        "brokerName": self.config.broker_name,
                        "queueId": qid,
                        "brokerOffset": broker_off,
                        "consumerOffset": consumer_off,
                        "diff": broker_off - max(consumer_off, 0),
                    }
                )
        return rows

    async def consume_stats(self, conn, req: RemotingCommand) -> RemotingCommand:
        group = req.field("consumerGroup")
        rows = self.progress(group, req.opt_field("topic") or None)
        cfg = self.config
        if rows is None:
            return req.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                remark=f"broker {cfg.broker_addr} knows no consumer group {group!r}",
            )
        doc = {
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "brokerRole": self.role.role.value,
            "offsetTable": rows,
            "consumeTps": 0.0,
        }
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        """Rewind (or set) one committed offset; returns the previous one. Raises ValueError
        naming the bad field."""
        store = self.store
        tc = store.topic_config.get(topic)
        if tc is None:
            raise ValueError(f"topic {topic!r} does not exist on {self.config.broker_addr}")
        nums = int(tc.get("readQueueNums", 0))
        if not 0 <= queue_id < nums:
            raise ValueError(f"queueId {queue_id} out of range: {topic} has {nums} queue(s)")
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        if self.role.role.is_master:
            top = store.get_max_offset_in_queue(topic, queue_id)
            if offset > top:
                raise ValueError(f"offset {offset} is beyond {topic}/{queue_id}'s max {top}")
        before = store.consumer_offsets.reset(group, topic, queue_id, offset)
        self.resets += 1
        return before

    def reset_by_time(
        self, group: str, topic: str, timestamp_ms: int, queue_id: int = -1, force: bool = True
    ) -> list[dict]:
        """Move each queue's (or only ``queue_id``'s) committed offset to its first message
        stored at or after ``timestamp_ms`` (the queue's max offset when none is). Without
        ``force`` only rewinds, as RocketMQ's isForce=false. One ``reset`` (so one recorded
        offset_reset) per queue whose offset changes."""
        store = self.store
        tc = store.topic_config.get(topic)
        if tc is None:
            raise ValueError(f"topic {topic!r} does not exist on {self.config.broker_addr}")
        if timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms} is negative")
        queues = [queue_id] if queue_id >= 0 else list(range(int(tc.get("readQueueNums", 0))))
        rows = []
        for qid in queues:
            target = store.get_offset_in_queue_by_time(topic, qid, timestamp_ms)
            current = store.consumer_offsets.query(group, topic, qid)
            row = {
                "topic": topic,
                "brokerName": self.config.broker_name,
                "queueId": qid,
                "offset": target,
                "previousOffset": current,
            }
            if target == current or (not force and 0 <= current < target):
                row["offset"], row["changed"] = current, False
            else:
                row["previousOffset"] = self.reset(group, topic, qid, target)
                row["changed"] = True
            rows.append(row)
        return rows

    async def reset_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        try:
            group, topic = req.field("group"), req.field("topic")
            offset = int(req.opt_field("offset", "-1"))
            if offset >= 0:
                before = self.reset(group, topic, req.int_field("queueId"), offset)
                return req.make_response(
                    ResponseCode.SUCCESS, ext_fields={"previousOffset": before}
                )
            rows = self.reset_by_time(
                group,
                topic,
                int(req.opt_field("timestamp", "-1")),
                int(req.opt_field("queueId", "-1")),
                str(req.opt_field("isForce", "true")).lower() == "true",
            )
        except (ValueError, HaproofError) as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        if str(req.opt_field("strictJson", "false")).lower() == "true":
            body = json.dumps({"offsetTable": rows})
        else:  # RocketMQ's ResetOffsetBody: {MessageQueue: offset}, as fastjson writes it
            body = '{"offsetTable":' + fastjson_mq_map(rows, None) + "}"
        return req.make_response(ResponseCode.SUCCESS, body=body.encode("utf-8"))
