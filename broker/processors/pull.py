"""PULL_MESSAGE (11): records from a consume queue, tag filtering, long polling, and the
commit-offset flag (honoured on a master only)."""

from __future__ import annotations

import asyncio
import logging

from broker.clock import SYSTEM_CLOCK, Clock, sleep_unless_set
from broker.ha.read_advice import MASTER_ID, suggest_which_broker_id, total_physical_memory_bytes
from broker.live_config import LiveConfig
from broker.offset_log.service import OffsetLogService
from broker.processors.admin import ConsumerManager
from broker.processors.runtime import BrokerStats
from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.results import GetMessageResult, GetMessageStatus
from broker.write_gate import WriteGate, offset_commit_refusal
from contracts.errors import StoreError
from contracts.record.properties import tags_hash_code

log = logging.getLogger(__name__)

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

MAX_SUSPEND_MS = 60_000


def parse_tag_codes(expression: str | None) -> set[int] | None:
    """Subscription "a || b" → tag hash codes; "*" or empty → None (everything)."""
    if expression is None:
        return None
    tags = [t.strip() for t in expression.split("||")]
    tags = [t for t in tags if t]
    if not tags or "*" in tags:
        return None
    return {tags_hash_code(t) for t in tags}


def pull_code(status: GetMessageStatus, offset: int, is_master: bool) -> ResponseCode:
    """GetMessageStatus → the response code RocketMQ's PullMessageProcessor answers."""
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND
    if status is GetMessageStatus.OFFSET_OVERFLOW_BADLY:
        return ResponseCode.PULL_OFFSET_MOVED if is_master else ResponseCode.PULL_RETRY_IMMEDIATELY
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL


def _opt_int(req: RemotingCommand, name: str, default: int = 0) -> int:
    """An optional integer header field; a malformed one is an error naming it."""
    if req.opt_field(name) in (None, ""):
        return default
    return req.int_field(name)


class LongPollWaiters:
    """Pull requests parked until their queue grows or their suspension ends on ``clock``
    (RocketMQ's PullRequestHoldService). ``on_dispatch`` runs on any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock = SYSTEM_CLOCK) -> None:
        self.loop = loop
        self.clock = clock
        self.closed = False  # the node is stopping: a woken pull answers at once
        self._waiters: dict[tuple[str, int], set[asyncio.Event]] = {}

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if (topic, queue_id) in self._waiters:  # cheap check first: most appends have no waiter
            try:
                self.loop.call_soon_threadsafe(self._wake, (topic, queue_id))
            except RuntimeError:  # loop closed during shutdown
                pass

    def on_read_end_advanced(self) -> None:
        """The store's read end (confirmOffset) moved: every suspended pull looks again."""
        if self._waiters:
            try:
                self.loop.call_soon_threadsafe(self.wake_all)
            except RuntimeError:  # loop closed during shutdown
                pass

    def _wake(self, key: tuple[str, int]) -> None:
        for event in self._waiters.pop(key, ()):
            event.set()

    async def wait(self, key: tuple[str, int], grown, timeout_ms: int) -> None:
        """Park until ``grown()`` holds (checked after registering: no lost wake-up)."""
        deadline_ms = self.clock.monotonic_ms() + timeout_ms
        while not grown():
            remaining_ms = deadline_ms - self.clock.monotonic_ms()
            if remaining_ms <= 0:
                return
            event = asyncio.Event()
            self._waiters.setdefault(key, set()).add(event)
            try:
                if grown():
                    return
                if not await sleep_unless_set(self.clock, event, remaining_ms):
                    return
            finally:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self._wake(key)

    def close(self) -> None:
        """The node stops: every suspended pull answers now, and none waits again."""
        self.closed = True
        self.wake_all()


class PullProcessor:
    """Reads ``store``; ``consumers`` hold the subscriptions, ``long_poll`` the suspended pulls;
    ``config`` is read at every pull (read-from-slave advice keys change at runtime); counts
    gets in ``stats`` when given."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        consumers: ConsumerManager,
        long_poll: LongPollWaiters,
        stats: BrokerStats | None = None,
        *,
        offset_log: OffsetLogService | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.consumers = consumers
        self.long_poll = long_poll
        self.stats = stats
        self.offset_log = offset_log  # offsetCommitThroughLog: a pull's commit is a record
        self.gate = gate  # closed: a pull's commit is dropped (a fenced master; no role yet)
        # The machine's memory, for read-from-slave advice (tests inject a small one).
        self.physical_memory_bytes = total_physical_memory_bytes()

    async def pull(self, conn, req: RemotingCommand) -> RemotingCommand:
        store = self.store
        group = req.field("consumerGroup")
        topic = req.field("topic")
        queue_id = req.int_field("queueId")
        offset = req.int_field("queueOffset")
        max_msgs = max(1, min(req.int_field("maxMsgNums"), 1024))
        sys_flag = _opt_int(req, "sysFlag")
        suspend_ms = min(_opt_int(req, "suspendTimeoutMillis"), MAX_SUSPEND_MS)
        if topic not in store.topic_config:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!",
            )
        if sys_flag & PULL_FLAG_SUBSCRIPTION or req.opt_field("subscription") is not None:
            expression = req.opt_field("subscription", "*")
        else:
            expression = self.consumers.subscription(group, topic)
        tag_codes = parse_tag_codes(expression)
        is_master = store.role.is_master

        result = store.get_message(topic, queue_id, offset, max_msgs, tag_codes)
        code = pull_code(result.status, offset, is_master)
        if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PULL_FLAG_SUSPEND and suspend_ms > 0:
            long_poll = self.long_poll
            await long_poll.wait(
                (topic, queue_id),
                lambda: store.get_max_offset_in_queue(topic, queue_id) > offset or long_poll.closed,
                suspend_ms,
            )
            result = store.get_message(topic, queue_id, offset, max_msgs, tag_codes)
            code = pull_code(result.status, offset, is_master)
        if self.stats is not None:
            self.stats.on_get(result.found, len(result.records), topic, group)
        if sys_flag & PULL_FLAG_COMMIT_OFFSET and is_master:
            self._commit(conn, req, group, topic, queue_id)
        suggest = MASTER_ID
        if is_master:
            suggest = suggest_which_broker_id(
                self.config,
                store.max_phy_offset,
                result.max_phy_offset_pulled,
                self.physical_memory_bytes,
            )
        return self._response(req, code, result, offset, suggest)

    def _commit(self, conn, req: RemotingCommand, group: str, topic: str, queue_id: int) -> None:
        """The commit a master's pull carries (RocketMQ: none on a slave), dropped while the
        node takes no writes (``offset_commit_refusal``): the pull is still answered and the
        client commits again with its next pull or UPDATE_CONSUMER_OFFSET."""
        commit = _opt_int(req, "commitOffset", -1)
        if commit < 0:
            return
        closed = offset_commit_refusal(
            self.gate, self.store.role_state, self.offset_log is not None
        )
        if closed is not None:
            log.debug("PULL_MESSAGE commit from %s dropped: %s", conn.peer, closed)
            return
        writer = None if self.offset_log is None else self.offset_log.master_writer()
        if writer is not None:
            writer.commit_soon(group, topic, queue_id, commit, conn.peer)
            return
        try:
            self.store.consumer_offsets.commit(group, topic, queue_id, commit)
        except StoreError as exc:  # beyond the queue's max offset: refused, logged
            log.warning("PULL_MESSAGE commit from %s refused: %s", conn.peer, exc)

    @staticmethod
    def _response(
        req: RemotingCommand,
        code: ResponseCode,
        result: GetMessageResult,
        offset: int,
        suggest_broker_id: int = MASTER_ID,
    ) -> RemotingCommand:
        next_offset = result.next_begin_offset
        if result.status in (
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        ):
            next_offset = 0
        body = b"".join(result.records) if code == ResponseCode.SUCCESS else b""
        return req.make_response(
            code,
            remark=None if code == ResponseCode.SUCCESS else result.status.value,
            ext_fields={
                "nextBeginOffset": next_offset,
                "minOffset": result.min_offset,
                "maxOffset": result.max_offset,
                "suggestWhichBrokerId": suggest_broker_id,
            },
            body=body,
        )
