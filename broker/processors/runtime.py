"""GET_BROKER_RUNTIME_INFO (28) and the counters behind it (RocketMQ StoreStatsService and
BrokerStats, reduced to what haproof keeps).

The answer's body is a KVTable, ``{"table": {key: string}}``, with RocketMQ's key names where
they apply (AdminBrokerProcessor.prepareRuntimeInfo / DefaultMessageStore.getRuntimeInfo) plus
what the node's services add through its ``RuntimeInfoTable`` (HA, archive lag, delay offsets).
TPS values are RocketMQ's "10 s, 1 min, 10 min" triple ("%.2f %.2f %.2f") over once-a-second
samples.
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import shutil
from collections.abc import Callable

from broker.clock import SYSTEM_CLOCK, Clock
from broker.live_config import LiveConfig
from broker.loop_service import Periodic
from broker.node_service import RuntimeInfoTable
from broker.processors.stats_windows import KeyedStats
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState

log = logging.getLogger(__name__)

BROKER_VERSION_DESC = "V4_9_4"  # the RocketMQ protocol level haproof speaks
SAMPLE_INTERVAL_MS = 1000
TPS_WINDOWS_S = (10, 60, 600)


def time_ms() -> int:
    return SYSTEM_CLOCK.wall_ms()


class BrokerStats:
    """Message counters (puts, gets found / missed / transferred) with per-second samples."""

    def __init__(self, clock_ms: Callable[[], int] = time_ms) -> None:
        self.clock_ms = clock_ms
        self.boot_ms = clock_ms()
        self.put_times = 0
        self.put_bytes = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred = 0  # messages handed to consumers
        self.put_by_topic: dict[str, list[int]] = {}  # topic -> [messages, bytes] (metrics)
        self.topic_puts = KeyedStats("TOPIC_PUT_NUMS")  # statsAll's windows
        self.group_gets = KeyedStats("GROUP_GET_NUMS")  # key topic@group
        self._samples: collections.deque = collections.deque(maxlen=max(TPS_WINDOWS_S) + 2)
        self.samples_taken = 0
        self._day = self._today()
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0
        self.sample()

    def on_put(self, topic: str, count: int, size_bytes: int) -> None:
        self.put_times += count
        self.put_bytes += size_bytes
        per_topic = self.put_by_topic.setdefault(topic, [0, 0])
        per_topic[0] += count
        per_topic[1] += size_bytes
        self.topic_puts.add(topic, count, self.clock_ms())

    def on_get(self, found: bool, messages: int, topic: str = "", group: str = "") -> None:
        if found:
            self.get_found += 1
            self.get_transferred += messages
            if topic:
                self.group_gets.add(f"{topic}@{group}", messages, self.clock_ms())
        else:
            self.get_miss += 1

    def _today(self) -> datetime.date:
        return datetime.datetime.fromtimestamp(self.clock_ms() / 1000).date()

    def sample(self) -> None:
        """Record the counters now (call once a second); rolls the day's morning totals."""
        now = self.clock_ms()
        day = self._today()
        if day != self._day:
            self._day = day
            self.put_yesterday_morning, self.put_today_morning = (
                self.put_today_morning,
                self.put_times,
            )
            self.get_yesterday_morning, self.get_today_morning = (
                self.get_today_morning,
                self.get_transferred,
            )
        self._samples.append(
            (now, self.put_times, self.get_found, self.get_miss, self.get_transferred)
        )
        self.samples_taken += 1
        self.topic_puts.sample(now)
        self.group_gets.sample(now)

    def tps(self, index: int) -> list[float]:
        """Per-second rate of the sampled counter ``index`` over each of TPS_WINDOWS_S."""
        if len(self._samples) < 2:
            return [0.0 for _ in TPS_WINDOWS_S]
        last = self._samples[-1]
        out = []
        for window_s in TPS_WINDOWS_S:
            first = self._samples[0]
            for s in self._samples:  # the oldest sample inside the window
                if last[0] - s[0] <= window_s * 1000:
                    first = s
                    break
            span_ms = last[0] - first[0]
            out.append((last[index] - first[index]) * 1000 / span_ms if span_ms else 0.0)
        return out

    def _tps(self, index: int) -> str:
        return " ".join(f"{v:.2f}" for v in self.tps(index))

    def runtime_info(self) -> dict[str, str]:
        up_s = (self.clock_ms() - self.boot_ms) // 1000
        days, rest = divmod(up_s, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        found_tps, miss_tps = self._tps(2), self._tps(3)
        total_tps = " ".join(
            f"{float(a) + float(b):.2f}"
            for a, b in zip(found_tps.split(), miss_tps.split(), strict=True)
        )
        return {
            "bootTimestamp": str(self.boot_ms),
            "runtime": f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]",
            "putMessageTimesTotal": str(self.put_times),
            "putMessageSizeTotal": str(self.put_bytes),
            "putMessageAverageSize": (
                f"{self.put_bytes / self.put_times:.2f}" if self.put_times else "0.00"
            ),
            "msgPutTotalYesterdayMorning": str(self.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.put_today_morning),
            "msgPutTotalTodayNow": str(self.put_times),
            "msgGetTotalYesterdayMorning": str(self.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.get_today_morning),
            "msgGetTotalTodayNow": str(self.get_transferred),
            "putTps": self._tps(1),
            "getFoundTps": found_tps,
            "getMissTps": miss_tps,
            "getTotalTps": total_tps,
            "getTransferedTps": self._tps(4),  # sic: RocketMQ's spelling
        }


class RuntimeInfoService:
    """A node service: samples ``stats`` every second on ``clock``, answers code 28 with the
    store's figures and every service's keys (``info``, the node's table)."""

    def __init__(
        self,
        store: MessageStore,
        config: LiveConfig,
        role: BrokerRoleState,
        stats: BrokerStats,
        info: RuntimeInfoTable,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.config = config
        self.role = role
        self.stats = stats
        self.info = info
        self._sampler = Periodic(
            "runtime-stats", period_ms=SAMPLE_INTERVAL_MS, round_=self._sample, clock=clock
        )

    def handlers(self) -> dict:
        return {RequestCode.GET_BROKER_RUNTIME_INFO: self.get_runtime_info}

    async def start(self) -> None:
        self._sampler.start()

    async def _sample(self) -> None:
        self.stats.sample()

    async def stop(self) -> None:
        await self._sampler.stop()

    def table(self) -> dict[str, str]:
        store = self.store
        table = {
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerName": self.config.broker_name,
            "brokerRole": self.role.role.value,
            "epoch": str(self.role.epoch),
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogMinOffset": str(store.min_phy_offset),
            "dispatchBehindBytes": str(max(0, store.max_phy_offset - store.dispatched_offset)),
            # as RocketMQ's DefaultMessageStore.getRuntimeInfo (mqadmin clusterList reads them)
            "earliestMessageTimeStamp": str(self._earliest_store_time_ms()),
            "commitLogDiskRatio": self._disk_ratio(self.config.store_path_commit_log),
            "consumeQueueDiskRatio": self._disk_ratio(self.config.store_path_root_dir),
        }
        table.update(self.info.table())  # every service's keys, this one's included
        return table

    def runtime_info(self) -> dict[str, str]:
        return self.stats.runtime_info()

    def _earliest_store_time_ms(self) -> int:
        """Store time of the first record the commit log holds (0: empty or unreadable)."""
        store = self.store
        if store.max_phy_offset <= store.min_phy_offset:
            return 0
        try:
            return store.look_message_by_offset(store.min_phy_offset).store_timestamp
        except Exception as exc:  # a BLANK or torn head: no time to show, never a failed answer
            log.debug("earliest store time unavailable: %s", exc)
            return 0

    @staticmethod
    def _disk_ratio(path: str | None) -> str:
        """Used fraction of the file system holding ``path`` ("-1" when it cannot be read)."""
        try:
            usage = shutil.disk_usage(path or ".")
        except OSError:
            return "-1"
        return f"{usage.used / usage.total:.4f}" if usage.total else "-1"

    async def get_runtime_info(self, conn, req: RemotingCommand) -> RemotingCommand:
        body = json.dumps({"table": self.table()}).encode()
        return req.make_response(ResponseCode.SUCCESS, body=body)
