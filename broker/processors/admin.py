"""Consumer bookkeeping and offset/config requests: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN,
SEARCH_OFFSET_BY_TIMESTAMP, HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, GET_ALL_*."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.clock import SYSTEM_CLOCK
from broker.live_config import LiveConfig
from broker.offset_log.service import OffsetLogService
from broker.processors.sendback import (
    create_topic_in_send_back,
    find_subscription_group,
    retry_topic,
)
from broker.processors.topics import TopicAdminProcessor
from broker.registration import NamesrvRegistration
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from broker.write_gate import WriteGate, offset_commit_refusal
from contracts.errors import RemotingError, StoreError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

PERM_RW = 0x6  # PermName.PERM_READ | PERM_WRITE
CLIENT_IDLE_MAX_MS = 120_000  # RocketMQ's channel expiry: no heartbeat for 2 minutes


@dataclass
class ClientInfo:
    client_id: str
    conn: object
    last_heartbeat_ms: int
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> expression
    language: str = ""  # the heartbeat's header (producers: mqadmin producerConnection)
    version: int = 0


class ConsumerManager:
    """group → {clientID: ClientInfo}, from heartbeats; members leave on unregister or when
    their connection closes. Membership changes notify the group (NOTIFY_CONSUMER_IDS_CHANGED)."""

    def __init__(self, clock_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms) -> None:
        self.groups: dict[str, dict[str, ClientInfo]] = {}
        self.producers: dict[str, dict[str, ClientInfo]] = {}  # producer group -> clients
        self.clock_ms = clock_ms
        self._watched: set[int] = set()
        self._tasks: set[asyncio.Task] = set()

    def heartbeat(self, conn, client_id: str, group: str, subs: dict[str, str]) -> bool:
        members = self.groups.setdefault(group, {})
        new = client_id not in members
        members[client_id] = ClientInfo(client_id, conn, self.clock_ms(), subs)
        if id(conn) not in self._watched:
            self._watched.add(id(conn))
            self._spawn(self._on_close(conn))
        if new:
            self._notify(group)
        return new

    def producer_heartbeat(self, conn, req: RemotingCommand, client_id: str, group: str) -> None:
        """A producer's heartbeat (RocketMQ's ProducerManager.registerProducer)."""
        now = self.clock_ms()
        info = ClientInfo(client_id, conn, now, language=req.language, version=req.version)
        self.producers.setdefault(group, {})[client_id] = info
        if id(conn) not in self._watched:
            self._watched.add(id(conn))
            self._spawn(self._on_close(conn))

    def _drop_producers(self, gone) -> None:
        for group, members in list(self.producers.items()):
            for cid in [c for c, info in members.items() if gone(info)]:
                del members[cid]
            if not members:
                del self.producers[group]

    def unregister(self, client_id: str, group: str) -> None:
        members = self.groups.get(group, {})
        if members.pop(client_id, None) is not None:
            self._notify(group)
        if not members:
            self.groups.pop(group, None)

    async def scan_idle_round(self) -> None:
        """One round of the node's idle-client scan (a ``Periodic``)."""
        self.scan_idle()

    def scan_idle(self, max_idle_ms: int = CLIENT_IDLE_MAX_MS) -> list[tuple[str, str]]:
        """Drop members silent for more than ``max_idle_ms``; returns (group, clientID) pairs."""
        now = self.clock_ms()
        self._drop_producers(lambda info: now - info.last_heartbeat_ms > max_idle_ms)
        gone = []
        for group, members in list(self.groups.items()):
            for cid, info in list(members.items()):
                if now - info.last_heartbeat_ms > max_idle_ms:
                    log.info(
                        "consumer %s of %s expired: no heartbeat for %d ms",
                        cid,
                        group,
                        now - info.last_heartbeat_ms,
                    )
                    gone.append((group, cid))
                    self.unregister(cid, group)
        return gone

    def ids(self, group: str) -> list[str]:
        return sorted(self.groups.get(group, {}))

    def subscription(self, group: str, topic: str) -> str | None:
        for info in self.groups.get(group, {}).values():
            if topic in info.subscriptions:
                return info.subscriptions[topic]
        return None

    async def _on_close(self, conn) -> None:
        await conn.closed.wait()
        self._watched.discard(id(conn))
        self._drop_producers(lambda info: info.conn is conn)
        for group, members in list(self.groups.items()):
            for cid in [c for c, info in members.items() if info.conn is conn]:
                log.info("consumer %s of %s left (connection closed)", cid, group)
                self.unregister(cid, group)

    def _notify(self, group: str) -> None:
        for info in list(self.groups.get(group, {}).values()):
            if info.conn.closed.is_set():
                continue
            req = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
            )
            self._spawn(self._send_quietly(info.conn, req))

    @staticmethod
    async def _send_quietly(conn, req: RemotingCommand) -> None:
        try:
            await conn.invoke_oneway(req)
        except RemotingError as exc:
            log.info("consumer notification to %s failed: %s", conn.peer, exc)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class AdminProcessor:
    """Offsets, heartbeats and table dumps over ``store`` and ``consumers``; creates retry
    topics and subscription groups (``config``: autoCreateSubscriptionGroup) and registers them
    through ``registration``; topic admin needs the node's ``role``."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        role: BrokerRoleState,
        consumers: ConsumerManager,
        registration: NamesrvRegistration,
        *,
        offset_log: OffsetLogService | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.gate = gate  # closed: commits refused as sends are (controller mode: no role; lease)
        self.consumers = consumers
        self.registration = registration
        self.offset_log = offset_log  # offsetCommitThroughLog: commits are records

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_by_time,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._dump(lambda s: s.topic_config.to_json()),
            RequestCode.GET_ALL_CONSUMER_OFFSET: self._dump(lambda s: s.consumer_offsets.to_json()),
            RequestCode.GET_ALL_DELAY_OFFSET: self._dump(lambda s: s.delay_offsets.to_json()),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self._dump(
                lambda s: s.subscription_groups.to_json()
            ),
            **TopicAdminProcessor(self.store, self.role, self.registration).handlers(),
        }

    async def query_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        store = self.store
        group, topic, qid = req.field("consumerGroup"), req.field("topic"), req.int_field("queueId")
        if self.offset_log is not None:  # the table holds what the log holds
            self.offset_log.catch_up()
            unknown = self.offset_log.not_known()
            if unknown is not None:  # never an answer below one given before
                return req.make_response(
                    ResponseCode.SYSTEM_ERROR, remark=f"committed offsets not known yet: {unknown}"
                )
        offset = store.consumer_offsets.query(group, topic, qid)
        if offset >= 0:
            return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})
        # RocketMQ: no committed offset and the queue still starts at 0 → consume from 0.
        if store.get_min_offset_in_queue(topic, qid) <= 0:
            return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": 0})
        return req.make_response(
            ResponseCode.QUERY_NOT_FOUND, remark=f"no committed offset for {group} on {topic}/{qid}"
        )

    async def update_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        """Forward-only: a commit below the committed offset is ignored and answered SUCCESS
        (clients commit oneway and periodically; only an admin reset moves back); a commit
        above the queue's max offset is refused with SYSTEM_ERROR and logged; a node that takes
        no writes now (``offset_commit_refusal``) answers SERVICE_NOT_AVAILABLE, as to a send:
        the client keeps the offset and commits it again to the master it finds next."""
        store = self.store
        group, topic, qid = req.field("consumerGroup"), req.field("topic"), req.int_field("queueId")
        offset = req.int_field("commitOffset")
        closed = offset_commit_refusal(self.gate, self.role, self.offset_log is not None)
        if closed is not None:
            return req.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, remark=closed)
        refusal = self._offset_refusal(req, topic, qid, offset)
        if refusal is not None:
            return refusal
        writer = None if self.offset_log is None else self.offset_log.master_writer()
        try:
            if writer is not None:
                await writer.commit(group, topic, qid, offset, conn.peer)
            else:
                store.consumer_offsets.commit(group, topic, qid, offset)
        except StoreError as exc:  # OffsetOutOfRangeError, or the record not appended
            log.warning("UPDATE_CONSUMER_OFFSET from %s refused: %s", conn.peer, exc)
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=f"refused: {exc}")
        return req.make_response(ResponseCode.SUCCESS)

    def _offset_refusal(self, req, topic: str, qid: int, offset: int) -> RemotingCommand | None:
        """A commit names a queue the topic has and an offset >= 0. A topic this node does not
        know (yet: a slave syncs topic configs every slaveSyncIntervalMs) is accepted, as
        RocketMQ 4.x does, with any queueId >= 0."""
        if qid < 0 or offset < 0:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"queueId {qid} and commitOffset {offset} must be >= 0",
            )
        tc = self.store.topic_config.get(topic)
        if tc is None:
            return None
        nums = max(int(tc.get("readQueueNums", 0)), int(tc.get("writeQueueNums", 0)))
        if qid >= nums:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"queueId {qid} is invalid: {topic} has {nums}"
            )
        return None

    async def max_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        off = self.store.get_max_offset_in_queue(req.field("topic"), req.int_field("queueId"))
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    async def min_offset(self, conn, req: RemotingCommand) -> RemotingCommand:
        off = self.store.get_min_offset_in_queue(req.field("topic"), req.int_field("queueId"))
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    async def search_by_time(self, conn, req: RemotingCommand) -> RemotingCommand:
        off = self.store.get_offset_in_queue_by_time(
            req.field("topic"), req.int_field("queueId"), req.int_field("timestamp")
        )
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    async def heartbeat(self, conn, req: RemotingCommand) -> RemotingCommand:
        try:
            doc = loads_fastjson(req.body)
            client_id = doc["clientID"]
            groups: list[tuple[str, dict[str, str]]] = []
            producer_groups = [d["groupName"] for d in doc.get("producerDataSet") or []]
            for data in doc.get("consumerDataSet") or []:
                subs = {
                    s["topic"]: s.get("subString") or "*"
                    for s in data.get("subscriptionDataSet") or []
                }
                groups.append((data["groupName"], subs))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RemotingError(
                f"HEART_BEAT from {conn.peer}: body is not HeartbeatData: {exc!r}"
            ) from exc
        for group in producer_groups:
            self.consumers.producer_heartbeat(conn, req, str(client_id), str(group))
        created = False
        for group, subs in groups:
            # RocketMQ (ClientManageProcessor.heartBeat): a consumer group's retry topic exists
            # from its first heartbeat on, so clients can route %RETRY%{group} before anything
            # was sent back; a new one is registered with the name servers before the answer.
            sub = find_subscription_group(self.store, self.config, group)
            if sub is not None:
                created |= create_topic_in_send_back(
                    self.store, retry_topic(group), int(sub.get("retryQueueNums", 1)), PERM_RW
                )
            self.consumers.heartbeat(conn, client_id, group, subs)
        if created:
            await self.registration.register_all()
        return req.make_response(ResponseCode.SUCCESS)

    async def unregister(self, conn, req: RemotingCommand) -> RemotingCommand:
        group = req.opt_field("consumerGroup")
        if group:
            self.consumers.unregister(req.field("clientID"), group)
        return req.make_response(ResponseCode.SUCCESS)

    async def consumer_list(self, conn, req: RemotingCommand) -> RemotingCommand:
        group = req.field("consumerGroup")
        ids = self.consumers.ids(group)
        if not ids:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"no consumer of group {group} is online"
            )
        return req.make_response(
            ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode()
        )

    def _dump(self, doc_of):
        async def handler(conn, req: RemotingCommand) -> RemotingCommand:
            body = json.dumps(doc_of(self.store)).encode()
            return req.make_response(ResponseCode.SUCCESS, body=body)

        return handler
