"""Broker config and topic statistics requests (RocketMQ's codes, AdminBrokerProcessor's
behaviour):

- ``GET_BROKER_CONFIG`` (26): body is every property as ``key=value`` lines, secrets
  (secretKey, ...password, ...token) as ``******``; header ``version`` is the config's
  DataVersion JSON (its counter moves at every accepted update).
- ``UPDATE_BROKER_CONFIG`` (25): body ``key=value`` lines; persisted to the node's config file,
  then the keys of ``broker.runtime_config.RUNTIME_KEYS`` applied; any other key of the config
  is only saved (``effect`` "next start" in the answer). A key of ``BLACKLIST`` or none of the
  config's gets NO_PERMISSION (16, as RocketMQ answers a key of its black list) naming it; a bad
  value or a node without a config file gets SYSTEM_ERROR naming the problem.
- ``GET_TOPIC_STATS_INFO`` (202): header ``topic``; per write queue min and max queue offset and
  the store time of the queue's last message. The body is RocketMQ's TopicStatsTable as
  fastjson writes it (MessageQueue objects as map keys, so mqadmin reads it); a request with
  header ``strictJson=true`` (haproof's admin) gets ``{"offsetTable": [{topic, brokerName,
  queueId, minOffset, maxOffset, lastUpdateTimestamp}]}`` instead.
"""

from __future__ import annotations

import json
import logging

from broker.clock import SYSTEM_CLOCK, Clock
from broker.live_config import LiveConfig
from broker.processors.request_service import RequestService
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.runtime_config import (
    MAX_BODY_BYTES,
    NotRuntimeKeyError,
    config_properties,
    parse_properties,
    properties_text,
    update_node_config,
)
from broker.store.message_store import MessageStore
from contracts.errors import ConfigError

log = logging.getLogger(__name__)


def fastjson_mq_map(rows: list[dict], value_keys: tuple[str, ...] | None) -> str:
    """``{{"brokerName":..,"queueId":..,"topic":..}:value}``: fastjson's text of a map keyed
    by MessageQueue (not strict JSON; RocketMQ's admin tools read it). The value is an object
    of ``value_keys``, or with None the row's ``offset``."""
    parts = []
    for r in rows:
        key = {"brokerName": r["brokerName"], "queueId": r["queueId"], "topic": r["topic"]}
        value = r["offset"] if value_keys is None else {k: r[k] for k in value_keys}
        parts.append(
            json.dumps(key, sort_keys=True, separators=(",", ":"))
            + ":"
            + json.dumps(value, sort_keys=True, separators=(",", ":"))
        )
    return "{" + ",".join(parts) + "}"


class BrokerConfigService(RequestService):
    """A node service answering codes 25, 26 and 202."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        config_path: str | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.config = config  # the node's one holder: an update assigns the new config there
        self.config_path = config_path  # the broker.conf updates are written to (None: refused)
        self.clock = clock
        self.data_version = {"timestamp": clock.wall_ms(), "counter": 0}
        self.updates = 0

    def handlers(self) -> dict:
        return {
            RequestCode.GET_BROKER_CONFIG: self.get_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
        }

    def runtime_info(self) -> dict:
        return {"brokerConfigUpdates": self.updates}

    async def get_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = properties_text(config_properties(self.config.current, redact=True)).encode("utf-8")
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"version": json.dumps(self.data_version)},
            body=body,
        )

    async def update_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        where = f"UPDATE_BROKER_CONFIG from {conn.peer}"
        if not req.body:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{where}: empty body")
        if len(req.body) > MAX_BODY_BYTES:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"{where}: body of {len(req.body)} bytes (at most {MAX_BODY_BYTES})",
            )
        try:
            updates = parse_properties(req.body.decode("utf-8"), where)
            changes = update_node_config(self.config, self.config_path, updates)
        except NotRuntimeKeyError as exc:
            return req.make_response(ResponseCode.NO_PERMISSION, remark=str(exc))
        except UnicodeDecodeError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{where}: {exc}")
        except ConfigError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except OSError as exc:
            log.error("%s: config file not written: %s", where, exc)
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"config file not written, nothing changed: {exc}"
            )
        self.updates += 1
        self.data_version = {
            "timestamp": self.clock.wall_ms(),
            "counter": self.data_version["counter"] + 1,
        }
        doc = {
            k: {"from": c.before, "to": c.after, "effect": "now" if c.at_once else "next start"}
            for k, c in changes.items()
        }
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(doc).encode())

    def topic_stats_rows(self, topic: str) -> list[dict] | None:
        """Per write queue offsets of ``topic``; None when this node does not hold it."""
        store = self.store
        tc = store.topic_config.get(topic)
        if tc is None:
            return None
        rows = []
        for qid in range(int(tc.get("writeQueueNums", 0))):
            lo = store.get_min_offset_in_queue(topic, qid)
            hi = store.get_max_offset_in_queue(topic, qid)
            rows.append(
                {
                    "topic": topic,
                    "brokerName": self.config.broker_name,
                    "queueId": qid,
                    "minOffset": lo,
                    "maxOffset": hi,
                    "lastUpdateTimestamp": self._store_time(topic, qid, hi - 1) if hi > lo else 0,
                }
            )
        return rows

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.store.queues.get((topic, queue_id))
        entry = cq.get(offset) if cq is not None else None
        if entry is None:
            return 0
        try:
            return self.store.look_message_by_offset(entry[0]).store_timestamp
        except Exception as exc:  # a record the log no longer holds: no time to show
            log.info("store time of %s/%d@%d unavailable: %s", topic, queue_id, offset, exc)
            return 0

    async def topic_stats(self, conn, req: RemotingCommand) -> RemotingCommand:
        topic = req.field("topic")
        rows = self.topic_stats_rows(topic)
        if rows is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist on {self.config.broker_addr}",
            )
        if str(req.opt_field("strictJson", "false")).lower() == "true":
            body = json.dumps({"offsetTable": rows})
        else:
            keys = ("lastUpdateTimestamp", "maxOffset", "minOffset")
            body = '{"offsetTable":' + fastjson_mq_map(rows, keys) + "}"
        return req.make_response(ResponseCode.SUCCESS, body=body.encode("utf-8"))
