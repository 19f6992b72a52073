"""The controller's remoting processor (RocketMQ's ControllerRequestProcessor): request codes
904, 1001-1006, 1011-1013 with RocketMQ's header field names, fastjson-compatible bodies and the
controller response codes 2000-2016. Nothing from the network is trusted: names, addresses and
numbers are checked and a bad one is answered CONTROLLER_INVALID_REQUEST (2005) naming the field.
"""

from __future__ import annotations

import asyncio
import json
import re

from broker.controller.controller import Controller
from broker.controller.heartbeat import HEARTBEAT_TIMEOUT_RANGE_MS
from broker.controller.manager import Result
from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Connection
from contracts.fastjson import loads_fastjson

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.%-]{0,126}$")
_ADDR = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,250}:\d{1,5}$")
MAX_BODY_BYTES = 1 << 20
MAX_SET_SIZE = 1024
_I64 = 2**63
MIN_HEARTBEAT_TIMEOUT_MS, MAX_HEARTBEAT_TIMEOUT_MS = HEARTBEAT_TIMEOUT_RANGE_MS


class BadRequest(ValueError):
    pass


def _name(req: RemotingCommand, field: str, required: bool = True) -> str | None:
    value = req.ext_fields.get(field)
    if value is None or value == "":
        if required:
            raise BadRequest(f"missing header field {field}")
        return None
    if not _NAME.match(value):
        raise BadRequest(f"header field {field} {value[:60]!r} is not a valid name")
    return value


def _addr(req: RemotingCommand, field: str) -> str:
    value = req.ext_fields.get(field) or ""
    if not _ADDR.match(value):
        raise BadRequest(f"header field {field} {value[:60]!r} is not host:port")
    return value


def _int(req: RemotingCommand, field: str, default: int | None = None) -> int | None:
    raw = req.ext_fields.get(field)
    if raw is None or raw == "" or raw == "null":
        if default is None:
            raise BadRequest(f"missing header field {field}")
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise BadRequest(f"header field {field} {raw[:40]!r} is not an integer") from exc
    if not -_I64 <= value < _I64:
        raise BadRequest(f"header field {field} {value} is out of range")
    return value


def _bool(req: RemotingCommand, field: str) -> bool:
    return (req.ext_fields.get(field) or "false").lower() == "true"


def _body(req: RemotingCommand):
    if not req.body:
        raise BadRequest("missing body")
    if len(req.body) > MAX_BODY_BYTES:
        raise BadRequest(f"body of {len(req.body)} bytes is over {MAX_BODY_BYTES}")
    try:
        return loads_fastjson(req.body, f"request {req.code} body")
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc


def _sync_state_set(req: RemotingCommand) -> tuple[set[int], int]:
    doc = _body(req)
    ids, epoch = (
        (doc.get("syncStateSet"), doc.get("syncStateSetEpoch"))
        if isinstance(doc, dict)
        else (None, None)
    )
    if not isinstance(ids, list) or not isinstance(epoch, int) or len(ids) > MAX_SET_SIZE:
        raise BadRequest("body is not a SyncStateSet {syncStateSet: [ids], syncStateSetEpoch}")
    if not all(isinstance(i, int) and 0 <= i < _I64 for i in ids):
        raise BadRequest("syncStateSet holds a non-id")
    return set(ids), epoch


def respond(req: RemotingCommand, result: Result) -> RemotingCommand:
    body = b"" if result.body is None else json.dumps(result.body).encode()
    return req.make_response(result.code, result.remark, ext_fields=result.header, body=body)


class ControllerProcessor:
    """``handlers()``: request code -> handler, for a RemotingServer (standalone or namesrv)."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def handlers(self) -> dict:
        return {
            Q.BROKER_HEARTBEAT: self._wrap(self.heartbeat),
            Q.CONTROLLER_ALTER_SYNC_STATE_SET: self._wrap(self.alter_sync_state_set),
            Q.CONTROLLER_ELECT_MASTER: self._wrap(self.elect_master),
            Q.CONTROLLER_REGISTER_BROKER: self._wrap(self.register_broker),
            Q.CONTROLLER_GET_REPLICA_INFO: self._wrap(self.get_replica_info),
            Q.CONTROLLER_GET_METADATA_INFO: self._wrap(self.get_metadata),
            Q.CONTROLLER_GET_SYNC_STATE_DATA: self._wrap(self.get_sync_state_data),
            Q.CLEAN_BROKER_DATA: self._wrap(self.clean_broker_data),
            Q.CONTROLLER_GET_NEXT_BROKER_ID: self._wrap(self.get_next_broker_id),
            Q.CONTROLLER_APPLY_BROKER_ID: self._wrap(self.apply_broker_id),
        }

    def _wrap(self, fn):
        async def handler(conn, req: RemotingCommand) -> RemotingCommand:
            try:
                return respond(req, await fn(conn, req))
            except BadRequest as exc:
                return req.make_response(
                    RC.CONTROLLER_INVALID_REQUEST, f"request {req.code}: {exc}"
                )

        return handler

    async def heartbeat(self, conn, req: RemotingCommand) -> Result:
        if req.ext_fields.get("brokerId") in (None, "", "null"):
            return Result(
                code=RC.CONTROLLER_INVALID_REQUEST, remark="Heart beat with empty brokerId"
            )
        timeout_ms = _int(req, "heartbeatTimeoutMills", 10_000)
        epoch, priority = _int(req, "epoch", -1), _int(req, "electionPriority", 2**31 - 1)
        if not MIN_HEARTBEAT_TIMEOUT_MS <= timeout_ms <= MAX_HEARTBEAT_TIMEOUT_MS:
            raise BadRequest(
                f"heartbeatTimeoutMills {timeout_ms} is outside "
                f"[{MIN_HEARTBEAT_TIMEOUT_MS}, {MAX_HEARTBEAT_TIMEOUT_MS}]"
            )
        if timeout_ms > self.c.heartbeats.grace_ms:  # its lease could outlast a restart's grace
            raise BadRequest(
                f"heartbeatTimeoutMills {timeout_ms} is above this controller's "
                f"brokerHeartbeatTimeoutMaxMs {self.c.heartbeats.grace_ms}: lower the broker's "
                "controllerHeartBeatTimeoutMills or raise the controller's key"
            )
        if not -1 <= epoch < 2**31 or not -(2**31) <= priority < 2**31:
            raise BadRequest("epoch or electionPriority is not a Java int")
        accepted = self.c.heartbeats.on_heartbeat(
            _name(req, "clusterName"),
            _name(req, "brokerName"),
            _addr(req, "brokerAddr"),
            _int(req, "brokerId"),
            timeout_ms=timeout_ms,
            epoch=epoch,
            max_offset=_int(req, "maxOffset", -1),
            confirm_offset=_int(req, "confirmOffset", -1),
            priority=priority,
            channel=conn,
        )
        if not accepted:
            return Result(code=RC.SYSTEM_BUSY, remark="too many brokers heartbeating")
        _watch(self.c, conn)
        return Result(remark="Heart beat success", header=self.leadership())

    def leadership(self) -> dict:
        """What a heartbeat's answer adds to RocketMQ's (whose brokers ignore it): whether this
        controller leads at answer time (``isLeader``, as in 1005's answer) and how long a
        leader may go on leading after it last heard from a majority (``leaderFallbackMs``).
        A master renews its lease only on ``isLeader=true`` from the leader, counted from the
        heartbeat's send time less that fallback (``broker/ha/lease_ack.py``)."""
        return {
            "isLeader": self.c.log.is_leader(),
            "leaderFallbackMs": self.c.config.leader_fallback_ms,
        }

    async def alter_sync_state_set(self, conn, req: RemotingCommand) -> Result:
        name, master = _name(req, "brokerName"), _int(req, "masterBrokerId")
        epoch = _int(req, "masterEpoch")
        ids, set_epoch = _sync_state_set(req)
        now = self.c.clock.wall_ms()
        return await self.c.submit(
            lambda m: m.alter_sync_state_set(
                name, master, epoch, ids, set_epoch, self.c.heartbeats, now
            )
        )

    async def elect_master(self, conn, req: RemotingCommand) -> Result:
        name = _name(req, "brokerName")
        return await self.c.elect(name, _int(req, "brokerId", -1), _bool(req, "designateElect"))

    async def register_broker(self, conn, req: RemotingCommand) -> Result:
        cluster, name = _name(req, "clusterName"), _name(req, "brokerName")
        bid, addr = _int(req, "brokerId"), _addr(req, "brokerAddress")
        return await self.c.submit(
            lambda m: m.register_broker(cluster, name, bid, addr, self.c.heartbeats)
        )

    async def get_replica_info(self, conn, req: RemotingCommand) -> Result:
        name = _name(req, "brokerName")
        return await self.c.read(lambda m: m.get_replica_info(name))

    async def get_metadata(self, conn, req: RemotingCommand) -> Result:
        cfg, leader = self.c.config, self.c.log.leader_addr()
        if leader is None and self.c.log.is_leader():
            leader = self.c.self_addr
        return Result(
            header={
                "group": cfg.jRaftGroupId if cfg.controllerType == "jRaft" else "journal",
                "controllerLeaderId": leader or "",
                "controllerLeaderAddress": leader or "",
                "isLeader": self.c.log.is_leader(),
                "peers": ";".join(cfg.rpc_addrs) if cfg.rpc_addrs else self.c.self_addr,
            }
        )

    async def get_sync_state_data(self, conn, req: RemotingCommand) -> Result:
        names = _body(req)
        if not isinstance(names, list) or not names or len(names) > MAX_SET_SIZE:
            raise BadRequest("body is not a JSON list of broker names")
        if not all(isinstance(n, str) and _NAME.match(n) for n in names):
            raise BadRequest("body holds an invalid broker name")
        return await self.c.read(lambda m: m.get_sync_state_data(names, self.c.heartbeats))

    async def clean_broker_data(self, conn, req: RemotingCommand) -> Result:
        cluster, name = _name(req, "clusterName", False) or "", _name(req, "brokerName")
        ids = req.ext_fields.get("brokerControllerIdsToClean")
        living = _bool(req, "isCleanLivingBroker") or _bool(req, "cleanLivingBroker")
        return await self.c.submit(
            lambda m: m.clean_broker_data(cluster, name, ids, living, self.c.heartbeats)
        )

    async def get_next_broker_id(self, conn, req: RemotingCommand) -> Result:
        cluster, name = _name(req, "clusterName"), _name(req, "brokerName")
        return await self.c.read(lambda m: m.get_next_broker_id(cluster, name))

    async def apply_broker_id(self, conn, req: RemotingCommand) -> Result:
        cluster, name = _name(req, "clusterName"), _name(req, "brokerName")
        bid, code = _int(req, "appliedBrokerId"), req.ext_fields.get("registerCheckCode") or ""
        addr = code.split(";")[0]
        if bid is None or bid < 1 or not _ADDR.match(addr) or len(code) > 300:
            raise BadRequest("appliedBrokerId must be >= 1 and registerCheckCode '<addr>;<ms>'")
        return await self.c.submit(lambda m: m.apply_broker_id(cluster, name, bid, code))


def _watch(controller: Controller, conn) -> None:
    """A broker's channel closing makes it not alive at once (BrokerHousekeepingService);
    a request that came some other way (an in-process caller) has no channel to watch."""
    if not isinstance(conn, Connection) or conn in controller.watched_channels:
        return
    controller.watched_channels.add(conn)
    closed = conn.closed

    async def on_close() -> None:
        await closed.wait()
        controller.on_channel_close(conn)

    task = asyncio.get_running_loop().create_task(on_close())
    controller.housekeeping_tasks.add(task)
    task.add_done_callback(controller.housekeeping_tasks.discard)
