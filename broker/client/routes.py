"""Topic routes from the name server, shared by producer and consumer."""

from __future__ import annotations

from dataclasses import dataclass

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError
from contracts.fastjson import loads_fastjson

PERM_READ = 0x4
PERM_WRITE = 0x2


class TopicNotExistError(RemotingError):
    retriable = False


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


@dataclass
class TopicRoute:
    topic: str
    queue_datas: list[dict]
    broker_addrs: dict[str, dict[int, str]]  # brokerName -> {brokerId: addr}

    @classmethod
    def from_json(cls, topic: str, body: bytes) -> TopicRoute:
        doc = loads_fastjson(body)
        addrs = {
            bd["brokerName"]: {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            for bd in doc.get("brokerDatas") or []
        }
        return cls(topic, list(doc.get("queueDatas") or []), addrs)

    def queues(self, perm: int) -> list[MessageQueue]:
        """The queues with ``perm``, computed once per route (a route is replaced, not
        changed, when it is fetched again)."""
        cache = self.__dict__.setdefault("_queue_cache", {})
        found = cache.get(perm)
        if found is None:
            found = cache[perm] = self._queues(perm)
        return found

    def _queues(self, perm: int) -> list[MessageQueue]:
        out = []
        for qd in sorted(self.queue_datas, key=lambda q: q["brokerName"]):
            if not int(qd.get("perm", 6)) & perm or qd["brokerName"] not in self.broker_addrs:
                continue
            nums = qd["writeQueueNums"] if perm == PERM_WRITE else qd["readQueueNums"]
            out += [MessageQueue(self.topic, qd["brokerName"], i) for i in range(int(nums))]
        return out

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(0)


async def fetch_route(
    client: RemotingClient, namesrv_addrs: list[str], topic: str, timeout_ms: int = 3000
) -> TopicRoute:
    """Ask each name server in turn; TopicNotExistError if one says the topic is unknown."""
    last: Exception | None = None
    for addr in namesrv_addrs:
        try:
            resp = await client.invoke(
                addr,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
                timeout_ms,
            )
        except RemotingError as exc:
            last = exc
            continue
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExistError(f"topic {topic!r}: {resp.remark}")
        if resp.code != ResponseCode.SUCCESS:
            last = RemotingError(f"{addr}: route for {topic!r} failed: {resp.code} {resp.remark}")
            continue
        return TopicRoute.from_json(topic, resp.body)
    raise RemotingError(f"no name server answered for topic {topic!r}: {last}") from last
