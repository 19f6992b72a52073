"""The name server's route tables (RocketMQ's RouteInfoManager), clock injected for expiry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.clock import SYSTEM_CLOCK

BROKER_CHANNEL_EXPIRED_MS = 120_000  # a broker not heard from for 2 minutes is dropped
MASTER_ID = 0


def wall_clock_ms() -> int:
    return SYSTEM_CLOCK.wall_ms()


PERM_WRITE = 0x2  # RocketMQ PermName.PERM_WRITE


@dataclass
class BrokerLive:
    last_update_ms: int
    ha_server_addr: str
    data_version: dict
    cluster: str
    broker_name: str
    broker_id: int


@dataclass
class RegisterResult:
    master_addr: str | None
    ha_server_addr: str | None
    # an incremental registration from a broker whose table this name server does not hold:
    # the broker is asked for the whole table (its dataVersion is not taken until then)
    full_needed: bool = False


@dataclass
class RouteInfoManager:
    clock_ms: Callable[[], int] = wall_clock_ms
    expire_ms: int = BROKER_CHANNEL_EXPIRED_MS
    # brokerName -> {"cluster", "brokerName", "brokerAddrs": {id: addr}}
    broker_addr_table: dict[str, dict] = field(default_factory=dict)
    # topic -> brokerName -> QueueData
    topic_queue_table: dict[str, dict[str, dict]] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    live_table: dict[str, BrokerLive] = field(default_factory=dict)
    # broker groups whose write permission an operator wiped (wipeWritePerm): kept off in
    # every registration until addWritePerm, so the broker's next registration does not undo it
    write_wiped: set[str] = field(default_factory=set)

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: dict | None,
        *,
        incremental: bool = False,
    ) -> RegisterResult:
        """RouteInfoManager.registerBroker. A master's topics are taken unless its registration
        is whole and carries the dataVersion already held (isBrokerTopicConfigChanged); an
        ``incremental`` one carries only changed topics and adds them."""
        held = self.holds_table(
            broker_addr, broker_id, (topic_config_wrapper or {}).get("dataVersion")
        )
        known = self.live_table.get(broker_addr)
        full_needed = incremental and (known is None or known.broker_id != broker_id)
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        data = self.broker_addr_table.setdefault(
            broker_name, {"cluster": cluster, "brokerName": broker_name, "brokerAddrs": {}}
        )
        data["cluster"] = cluster
        addrs: dict[int, str] = data["brokerAddrs"]
        # one address holds one role: a slave promoted to master drops its old id
        for old_id, old_addr in list(addrs.items()):
            if old_addr == broker_addr and old_id != broker_id:
                del addrs[old_id]
        replaced = addrs.get(broker_id)
        if replaced is not None and replaced != broker_addr:
            self.live_table.pop(replaced, None)
        addrs[broker_id] = broker_addr
        wrapper = topic_config_wrapper or {}
        self.live_table[broker_addr] = BrokerLive(
            self.clock_ms(),
            ha_server_addr,
            {} if full_needed else wrapper.get("dataVersion") or {},
            cluster,
            broker_name,
            broker_id,
        )
        if broker_id == MASTER_ID:
            if held and not incremental:
                return RegisterResult(None, None)
            for topic, cfg in (wrapper.get("topicConfigTable") or {}).items():
                self.topic_queue_table.setdefault(topic, {})[broker_name] = {
                    "brokerName": broker_name,
                    "readQueueNums": int(cfg.get("readQueueNums", 0)),
                    "writeQueueNums": int(cfg.get("writeQueueNums", 0)),
                    "perm": self._perm(broker_name, int(cfg.get("perm", 6))),
                    "topicSysFlag": int(cfg.get("topicSysFlag", 0)),
                }
            return RegisterResult(None, None, full_needed)
        master_addr = addrs.get(MASTER_ID)
        master = self.live_table.get(master_addr) if master_addr else None
        return RegisterResult(master_addr, master.ha_server_addr if master else None, full_needed)

    def holds_table(self, broker_addr: str, broker_id: int, data_version: object) -> bool:
        """Whether the broker's last registration with this id carried ``data_version`` (a
        whole table registered again: nothing in it is new)."""
        live = self.live_table.get(broker_addr)
        return (
            bool(data_version)
            and live is not None
            and live.broker_id == broker_id
            and (live.data_version == data_version)
        )

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int):
        self.live_table.pop(broker_addr, None)
        data = self.broker_addr_table.get(broker_name)
        if data is not None and data["brokerAddrs"].get(broker_id) == broker_addr:
            del data["brokerAddrs"][broker_id]
        self._drop_empty(broker_name, cluster)

    def _drop_empty(self, broker_name: str, cluster: str | None) -> None:
        data = self.broker_addr_table.get(broker_name)
        if data is not None and data["brokerAddrs"]:
            return
        self.broker_addr_table.pop(broker_name, None)
        for name in [cluster] if cluster else list(self.cluster_addr_table):
            names = self.cluster_addr_table.get(name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[name]
        for topic in list(self.topic_queue_table):
            queues = self.topic_queue_table[topic]
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """RouteInfoManager.deleteTopic: ``topic``'s queues on every broker group (on those of
        ``cluster`` only when given); False when it had none there."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        names = (
            set(queues)
            if cluster is None
            else set(queues) & self.cluster_addr_table.get(cluster, set())
        )
        for name in names:
            del queues[name]
        if not queues:
            del self.topic_queue_table[topic]
        return bool(names)

    def _perm(self, broker_name: str, perm: int) -> int:
        return perm & ~PERM_WRITE if broker_name in self.write_wiped else perm

    def wipe_write_perm(self, broker_name: str) -> int:
        """RouteInfoManager.wipeWritePermOfBrokerByLock: PERM_WRITE off in ``broker_name``'s
        queues of every topic, and in its later registrations; the number of topics."""
        self.write_wiped.add(broker_name)
        return self._set_write(broker_name, False)

    def add_write_perm(self, broker_name: str) -> int:
        """RouteInfoManager.addWritePermOfBrokerByLock: PERM_WRITE back on; the topics."""
        self.write_wiped.discard(broker_name)
        return self._set_write(broker_name, True)

    def _set_write(self, broker_name: str, on: bool) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                qd["perm"] = qd["perm"] | PERM_WRITE if on else qd["perm"] & ~PERM_WRITE
                count += 1
        return count

    def scan_not_active(self) -> list[str]:
        """Drop brokers silent for more than expire_ms; returns the dropped addresses."""
        now = self.clock_ms()
        dropped = [
            a for a, live in self.live_table.items() if live.last_update_ms + self.expire_ms < now
        ]
        for addr in dropped:
            live = self.live_table.pop(addr)
            data = self.broker_addr_table.get(live.broker_name)
            if data is not None:
                for bid, a in list(data["brokerAddrs"].items()):
                    if a == addr:
                        del data["brokerAddrs"][bid]
            self._drop_empty(live.broker_name, live.cluster)
        return dropped

    def topic_route(self, topic: str) -> dict | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = []
        for name in sorted(queues):
            data = self.broker_addr_table.get(name)
            if data is not None:
                broker_datas.append(_broker_data_json(data))
        if not broker_datas:
            return None
        return {
            "queueDatas": [queues[n] for n in sorted(queues)],
            "brokerDatas": broker_datas,
            "filterServerTable": {},
        }

    def cluster_info(self) -> dict:
        return {
            "brokerAddrTable": {
                n: _broker_data_json(d) for n, d in sorted(self.broker_addr_table.items())
            },
            "clusterAddrTable": {c: sorted(n) for c, n in sorted(self.cluster_addr_table.items())},
        }


def _broker_data_json(data: dict) -> dict:
    # integer broker ids become quoted keys: strict JSON, which fastjson and jsoncpp both read
    return {
        "cluster": data["cluster"],
        "brokerName": data["brokerName"],
        "brokerAddrs": {str(i): a for i, a in sorted(data["brokerAddrs"].items())},
    }
