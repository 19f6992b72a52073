"""asyncio pull consumer: clustering (rebalance + broker offsets) or broadcasting (local file)."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
import zlib

from broker.client.offsets import (
    LocalFileOffsetStore,
    OffsetTable,
    RemoteOffsetSchedule,
    allocate_averagely,
)
from broker.client.routes import (
    PERM_READ,
    MessageQueue,
    TopicNotExistError,
    TopicRoute,
    fetch_route,
)
from broker.client.running_info import running_info_handler
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError
from contracts.record.layout import SYSFLAG_COMPRESSED
from contracts.record.model import Record
from contracts.record.properties import PROPERTY_RETRY_TOPIC
from contracts.record.reader import decode_record

log = logging.getLogger(__name__)

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
REBALANCE_INTERVAL_MS = 20_000  # RocketMQ RebalanceService's wait between rounds


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def decode_pull_body(body: bytes, source: str) -> list[Record]:
    records, pos = [], 0
    while pos < len(body):
        rec = decode_record(body, pos, source=source)
        records.append(rec)
        pos += rec.total_size
    return records


def as_delivered(rec: Record, group: str) -> Record:
    """What RocketMQ's client hands to the application: a compressed body inflated
    (MessageDecoder), and a message that came back through ``%RETRY%{group}`` under its
    original topic (RETRY_TOPIC; DefaultMQPushConsumerImpl.resetRetryAndNamespace)."""
    if rec.sysflag & SYSFLAG_COMPRESSED:
        try:
            rec.body = zlib.decompress(rec.body)
        except zlib.error as exc:
            raise RemotingError(
                f"message {rec.msg_id} of {rec.topic}: compressed body does not inflate: {exc}"
            ) from exc
    original = rec.properties.get(PROPERTY_RETRY_TOPIC)
    if original and rec.topic == retry_topic(group):
        rec.topic = original
    return rec


class Consumer:
    """No I/O here. ``await poll()`` rebalances when needed, pulls every owned queue once.

    In clustering mode the consumer also subscribes its group's retry topic
    ``%RETRY%{group}`` (``*``), as RocketMQ's client does: messages handed back with
    :meth:`send_back` return through it after their delay level, under their original topic."""

    def __init__(
        self,
        group: str,
        namesrv_addrs: list[str],
        topic: str,
        sub_expression: str = "*",
        mode: str = CLUSTERING,
        client_id: str | None = None,
        persist_interval_ms: int = 5000,
        offset_file: str | None = None,
        max_msg_nums: int = 32,
        timeout_ms: int = 3000,
        clock_ms=lambda: int(time.time() * 1000),
        rebalance_interval_ms: int = REBALANCE_INTERVAL_MS,
        rpc_hook=None,  # signs every request, e.g. AclSigner(access_key, secret_key)
    ) -> None:
        self.group, self.topic, self.sub_expression, self.mode = group, topic, sub_expression, mode
        # topic -> subscription expression, the application's topic first
        self.subscriptions: dict[str, str] = {topic: sub_expression}
        if mode == CLUSTERING:
            self.subscriptions.setdefault(retry_topic(group), "*")
        self.namesrv_addrs = list(namesrv_addrs)
        self.client_id = client_id or f"127.0.0.1@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self.max_msg_nums, self.timeout_ms = max_msg_nums, timeout_ms
        self.sub_version = clock_ms()
        self.client = RemotingClient(
            {
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_notify,
                RequestCode.GET_CONSUMER_RUNNING_INFO: running_info_handler(self),  # 307
            },
            rpc_hook=rpc_hook,
        )
        self.schedule = RemoteOffsetSchedule(persist_interval_ms, clock_ms)
        # RocketMQ's client rebalances every 20 s besides when told: routes change, and a
        # retry topic missing at the first rebalance is picked up at a later one.
        self.rebalance_schedule = RemoteOffsetSchedule(rebalance_interval_ms, clock_ms)
        if mode == BROADCASTING:
            if offset_file is None:
                raise ValueError("broadcasting mode needs offset_file")
            self.offsets: OffsetTable = LocalFileOffsetStore(offset_file)
        else:
            self.offsets = OffsetTable()
        self.routes: dict[str, TopicRoute] = {}  # the subscribed topics that have a route
        self.assigned: list[MessageQueue] = []
        self.rebalance_needed = True
        self.failing: dict[MessageQueue, int] = {}  # queue -> polls in a row its pull failed

    @property
    def route(self) -> TopicRoute | None:
        """The application topic's route."""
        return self.routes.get(self.topic)

    async def _on_notify(self, conn, req: RemotingCommand) -> None:
        self.rebalance_needed = True
        return None

    def _heartbeat_body(self) -> bytes:
        subs = [
            {
                "classFilterMode": False,
                "topic": topic,
                "subString": expression,
                "tagsSet": [] if expression == "*" else expression.split("||"),
                "codeSet": [],
                "subVersion": self.sub_version,
                "expressionType": "TAG",
            }
            for topic, expression in self.subscriptions.items()
        ]
        data = {
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": self.mode,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": subs,
            "unitMode": False,
        }
        return json.dumps(
            {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [data]}
        ).encode()

    def _broker_addrs(self) -> dict[str, dict[int, str]]:
        """brokerName -> {brokerId: addr} over every subscribed topic's route."""
        out: dict[str, dict[int, str]] = {}
        for route in self.routes.values():
            for name, addrs in route.broker_addrs.items():
                out.setdefault(name, {}).update(addrs)
        return out

    def _addrs(self, broker_name: str) -> list[str]:
        """A group's addresses, master first, then its slaves by brokerId (RocketMQ's client
        reads from a slave when the master is gone)."""
        addrs = self._broker_addrs().get(broker_name) or {}
        return [addrs[i] for i in sorted(addrs)]

    async def _fetch_routes(self) -> None:
        """Every subscribed topic's route. The application's topic must exist; the retry topic
        may not yet (a broker creates it at the group's first heartbeat): it is then left out
        until a later rebalance, as RocketMQ's client does."""
        routes = {self.topic: await fetch_route(self.client, self.namesrv_addrs, self.topic)}
        for topic in self.subscriptions:
            if topic == self.topic:
                continue
            try:
                routes[topic] = await fetch_route(self.client, self.namesrv_addrs, topic)
            except TopicNotExistError:
                log.debug("%s: no route for %s yet", self.group, topic)
        self.routes = routes

    async def heartbeat(self) -> None:
        """To every node of every group, as RocketMQ's client does (a slave must know the
        group's consumers to serve them when its master is down); fails only when no node of
        a group answers."""
        await self._fetch_routes()
        await self._send_heartbeats()
        if len(self.routes) < len(self.subscriptions):
            # the first heartbeat made the brokers create the retry topic: route it now
            await self._fetch_routes()

    async def _send_heartbeats(self) -> None:
        for name in sorted(self._broker_addrs()):
            ok, last = False, None
            for addr in self._addrs(name):
                req = RemotingCommand.request(RequestCode.HEART_BEAT, body=self._heartbeat_body())
                try:
                    resp = await self.client.invoke(addr, req, self.timeout_ms)
                except RemotingError as exc:
                    last = exc
                    continue
                if resp.code != ResponseCode.SUCCESS:
                    last = RemotingError(f"{addr}: heartbeat refused: {resp.code} {resp.remark}")
                    continue
                ok = True
            if not ok:
                raise RemotingError(f"{name}: no node took the heartbeat: {last}")

    async def _invoke_any(self, broker_name: str, req: RemotingCommand) -> tuple[str, object]:
        """Send to the group's master, else to its slaves in turn; the first answer wins."""
        last: Exception | None = None
        for addr in self._addrs(broker_name):
            try:
                return addr, await self.client.invoke(addr, req, self.timeout_ms)
            except RemotingError as exc:
                last = exc
        self.rebalance_needed = True  # the route may have changed: read it again next poll
        raise RemotingError(f"{broker_name}: no node answered: {last}") from last

    async def rebalance(self) -> list[MessageQueue]:
        await self.heartbeat()
        if self.mode == BROADCASTING:
            self.assigned = sorted(q for r in self.routes.values() for q in r.queues(PERM_READ))
        else:
            req = RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group}
            )
            addr, resp = await self._invoke_any(sorted(self.route.broker_addrs)[0], req)
            if resp.code != ResponseCode.SUCCESS:
                raise RemotingError(f"{addr}: consumer list refused: {resp.code} {resp.remark}")
            cids = json.loads(resp.body).get("consumerIdList") or []
            # per topic, as RocketMQ's rebalanceByTopic: the application's topic first
            self.assigned = [
                mq
                for topic in self.subscriptions
                if topic in self.routes
                for mq in allocate_averagely(
                    self.routes[topic].queues(PERM_READ), cids, self.client_id
                )
            ]
        self.rebalance_needed = False
        self.failing = {mq: n for mq, n in self.failing.items() if mq in self.assigned}
        return self.assigned

    async def _initial_offset(self, mq: MessageQueue) -> int:
        if self.mode == BROADCASTING:
            return 0
        req = RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id},
        )
        addr, resp = await self._invoke_any(mq.broker_name, req)
        if resp.code == ResponseCode.SUCCESS:
            return resp.int_field("offset")
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return 0
        raise RemotingError(f"{addr}: offset query refused: {resp.code} {resp.remark}")

    async def pull(self, mq: MessageQueue) -> list[Record]:
        offset = self.offsets.read(mq)
        if offset is None:
            offset = await self._initial_offset(mq)
            self.offsets.update(mq, offset)
        commit = self.offsets.read(mq) if self.mode == CLUSTERING else 0
        sys_flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_COMMIT_OFFSET if commit else 0)
        header = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": self.max_msg_nums,
            "sysFlag": sys_flag,
            "commitOffset": commit,
            "suspendTimeoutMillis": 0,
            "subscription": self.subscriptions.get(mq.topic, "*"),
            "subVersion": self.sub_version,
            "expressionType": "TAG",
        }
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
        addr, resp = await self._invoke_any(mq.broker_name, req)
        if resp.code == ResponseCode.SUCCESS:
            records = decode_pull_body(resp.body, f"pull {addr} {mq}")
            delivered = [as_delivered(rec, self.group) for rec in records]
            self.offsets.update(mq, resp.int_field("nextBeginOffset"))  # only once delivered
            return delivered
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            self.offsets.update(mq, resp.int_field("nextBeginOffset"))
            return []
        if resp.code == ResponseCode.PULL_OFFSET_MOVED:
            self.offsets.update(mq, resp.int_field("nextBeginOffset"), increase_only=False)
            return []
        raise RemotingError(f"{addr}: pull {mq} refused: {resp.code} {resp.remark}")

    async def poll(self) -> list[Record]:
        if self.rebalance_schedule.due():
            self.rebalance_needed = True
        if self.rebalance_needed:
            await self.rebalance()
        records: list[Record] = []
        failed: RemotingError | None = None
        n_failed = 0
        for mq in self.assigned:
            # one queue's failed pull must not cost the records already pulled from the others
            # (their offsets have moved on): as RocketMQ's client retries a failed pull
            # request later on its own, the queue is pulled again at the next poll
            try:
                records += await self.pull(mq)
            except RemotingError as exc:
                self._pull_failed(mq, exc)
                failed, n_failed = exc, n_failed + 1  # (no node answering: rebalance_needed)
            else:
                if (streak := self.failing.pop(mq, 0)) > 0:
                    log.info(
                        "%s: pull %s works again after %d failed polls", self.group, mq, streak
                    )
        if failed is not None and n_failed == len(self.assigned):
            raise failed  # no queue could be pulled: the caller hears of it
        if self.schedule.due():
            await self.persist()
        return records

    def _pull_failed(self, mq: MessageQueue, exc: RemotingError) -> None:
        """A WARNING when a queue starts failing, then DEBUG while it keeps failing (a poll
        loop would otherwise repeat the same warning many times a second)."""
        streak = self.failing[mq] = self.failing.get(mq, 0) + 1
        level = logging.WARNING if streak == 1 else logging.DEBUG
        log.log(
            level,
            "%s: pull %s failed (%d in a row), retried at the next poll: %s",
            self.group,
            mq,
            streak,
            exc,
        )

    async def send_back(
        self, rec: Record, delay_level: int = 0, max_reconsume_times: int = 16
    ) -> None:
        """Hand a message this consumer failed to process back to its broker
        (CONSUMER_SEND_MSG_BACK): it returns through ``%RETRY%{group}`` after the delay level
        (0: the broker's choice, 3 + reconsumeTimes), or to ``%DLQ%{group}`` once
        ``max_reconsume_times`` is reached or with ``delay_level`` < 0. As RocketMQ's client,
        the broker is the record's store host."""
        host, port = rec.store_host
        header = {
            "offset": rec.stored_physical_offset,
            "group": self.group,
            "delayLevel": delay_level,
            "originMsgId": rec.properties.get("UNIQ_KEY") or rec.msg_id,
            "originTopic": rec.properties.get("RETRY_TOPIC") or rec.topic,
            "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times,
        }
        req = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header)
        resp = await self.client.invoke(f"{host}:{port}", req, self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(
                f"{host}:{port}: send back of {rec.msg_id} refused: {resp.code} {resp.remark}"
            )

    async def persist(self) -> None:
        if isinstance(self.offsets, LocalFileOffsetStore):
            self.offsets.persist()
            return
        for mq, offset in sorted(self.offsets.offsets.items()):
            if mq not in self.assigned:
                continue
            header = {
                "consumerGroup": self.group,
                "topic": mq.topic,
                "queueId": mq.queue_id,
                "commitOffset": offset,
            }
            req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header)
            try:
                addr, resp = await self._invoke_any(mq.broker_name, req)
            except RemotingError as exc:
                log.warning("offset commit of %s failed: %s", mq, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:  # a fenced master; a slave under the log
                self.rebalance_needed = True  # kept; committed again to the master found next
                log.info("offset commit of %s refused by %s: %s", mq, addr, resp.remark)

    async def close(self) -> None:
        try:
            await self.persist()
        finally:
            await self.client.close()
