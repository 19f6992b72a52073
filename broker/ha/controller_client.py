"""The broker side of controller mode (RocketMQ's ReplicasManager), as one service on the loop
base: every ``heartbeat_interval_ms`` it

1. finds the controller leader (1005) and, once, gets its broker id (crash-safe:
   ``broker_identity.py``) and registers (1003);
2. heartbeats every controller (904) with its epoch, max and confirm offsets and priority
   (the round waits for the leader's answer only);
3. every ``sync_metadata_period_ms`` (or at once when it knows no master) pulls its set's
   replica info (1004) and, with no master anywhere, asks the controller to elect (1002);
4. applies a role only when the controller's masterEpoch is newer than its own (or equal, for
   a newer SyncStateSet), through the injected role owner, in a switch of its own that a newer
   epoch preempts (``broker/ha/role_switch.py``): the controller decides roles;
5. keeps a **master lease**: a master whose last heartbeat acknowledged by the controller
   leader (one saying it still leads, renewing from its send time less the leader's fallback:
   ``broker/ha/lease_ack.py``) was sent over ``lease_ms`` ago stops taking writes and records
   ``lease_lost``, by a watch of its own (a round may wait on a silent controller longer than
   a lease); the lease is at most 80 % of the controller's heartbeat timeout, so the master
   stops before it may elect another (RocketMQ has no lease: #7017). Contact again under the
   same epoch lifts it.

``on_notify`` answers NOTIFY_BROKER_ROLE_CHANGED (1008), behind the request validation;
``alter_sync_state_set`` (1001) is what ``broker/ha/sync_state_keeper.py`` calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Callable

from broker import planted_bugs
from broker.clock import Clock
from broker.ha.broker_identity import BrokerIdentityStore, IdentityError, Invoke, allocate_broker_id
from broker.ha.controller_types import ClientConfig, OffsetReader, Replica, RoleOwner
from broker.ha.lease_ack import lease_ack
from broker.ha.role_switch import RoleSwitch
from broker.loop_service import LoopService, Periodic
from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError

log = logging.getLogger(__name__)
TIMEOUT_MS = 3_000


class ControllerClient(LoopService):
    def __init__(
        self,
        config: ClientConfig,
        identity: BrokerIdentityStore,
        invoke: Invoke,
        role: RoleOwner,
        offsets: OffsetReader,
        clock: Clock,
        on_event: Callable[[str, dict], None] = lambda kind, fields: None,
    ) -> None:
        super().__init__(
            "controller-client",
            period_ms=config.heartbeat_interval_ms,
            clock=clock,
            run_first_round_at_once=True,
        )
        self.cfg, self.identity, self.invoke = config, identity, invoke
        self.role, self.offsets, self.on_event = role, offsets, on_event
        self.broker_id: int | None = None
        self.leader: str | None = None
        self.replica = Replica()
        self.last_leader_ack_ms: float | None = None  # monotonic send time of the acked beat
        self.last_contact_wall_ms: int | None = None
        self.fenced = False
        self._next_pull_ms = 0.0
        self._role_lock = asyncio.Lock()  # held while deciding, not while switching
        self._switching = RoleSwitch(clock, config.switch_timeout_ms)
        # named master under an epoch this node's log already holds (it restarted as the
        # master): it asks for a new epoch instead of resuming one whose tail it may have lost
        self._renew_epoch = False
        watch = {"round_": self._watch_lease, "clock": clock, "stop_timeout_ms": 0}
        self._lease_watch = Periodic("controller-lease", period_ms=config.lease_ms, **watch)
        # a heartbeat to a controller that is not the leader, still out: a round waits for the
        # leader's answer only, so one hung controller of three does not slow every round to
        # the remoting timeout, and never has more than one beat out
        self._side_beats: dict[str, asyncio.Task] = {}
        # each controller's last refusal of a heartbeat (logged once per controller and remark:
        # the beats go out side by side, and controllers may be configured apart)
        self._beat_refused: dict[str, str | None] = {}

    def start(self) -> None:
        super().start()
        self._lease_watch.start()

    async def stop(self) -> None:
        await self._lease_watch.stop()
        await super().stop()
        await self._switching.cancel()
        for task in self._side_beats.values():
            task.cancel()
        await asyncio.gather(*self._side_beats.values(), return_exceptions=True)

    @property
    def is_master(self) -> bool:
        return self.broker_id is not None and self.replica.master_broker_id == self.broker_id

    async def run_once(self) -> None:
        try:
            await self._ensure_leader()
            if self.broker_id is None:
                try:
                    await self._register()
                except HaproofError:
                    self.leader = None  # refused or gone mid-way: ask who leads next round
                    raise
            await self._heartbeat_all()
            now = self.clock.monotonic_ms()
            due = now >= self._next_pull_ms or self.replica.master_broker_id is None
            if due and self.leader is not None:  # None: its heartbeat failed, look next round
                self._next_pull_ms = now + self.cfg.sync_metadata_period_ms
                await self._pull()
        finally:
            self._check_lease()

    def pull_now(self) -> None:
        """Pull the replica info at the next round, and run it now (a 1008 hint)."""
        self._next_pull_ms = 0.0
        self.wakeup()

    async def _call(self, addr: str, code: int, fields: dict, body=None) -> RemotingCommand:
        raw = b"" if body is None else json.dumps(body).encode()
        return await self.invoke(addr, RemotingCommand.request(code, fields, raw), TIMEOUT_MS)

    async def _ask_leader(self, code: int, fields: dict, body=None) -> RemotingCommand:
        """One request to the controller leader as this client knows it; a refusal as not the
        leader (2007) or no answer at all forgets it, so the next round asks who leads (a kept
        address is asked again every round, forever, once the Raft leader moved)."""
        if self.leader is None:  # forgotten earlier in this round (its heartbeat failed)
            raise HaproofError("no controller leader known: asking again next round")
        try:
            resp = await self._call(self.leader, code, fields, body)
        except HaproofError:
            self.leader = None
            raise
        if resp.code == RC.CONTROLLER_NOT_LEADER:
            self.leader = None
        return resp

    async def _ensure_leader(self) -> None:
        if self.leader is not None:
            return
        for addr in self.cfg.controller_addrs:
            try:
                resp = await self._call(addr, Q.CONTROLLER_GET_METADATA_INFO, {})
            except HaproofError as exc:
                log.info("controller %s unreachable: %s", addr, exc)
                continue
            if resp.ext_fields.get("isLeader") == "true":
                self.leader = addr
                return
        raise HaproofError(f"no controller leader among {';'.join(self.cfg.controller_addrs)}")

    async def _register(self) -> None:
        bid = await allocate_broker_id(
            self.identity, self.invoke, self.leader, self.cfg.broker_addr, self.clock.wall_ms()
        )
        resp = await self._ask_leader(
            Q.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": self.cfg.cluster,
                "brokerName": self.cfg.broker_name,
                "brokerId": bid,
                "brokerAddress": self.cfg.broker_addr,
            },
        )
        if resp.code != RC.SUCCESS:
            raise IdentityError(f"REGISTER to controller: {resp.code} {resp.remark}")
        self.broker_id = bid
        await self._apply_response(resp)

    async def _heartbeat_all(self) -> None:
        fields = {
            "clusterName": self.cfg.cluster,
            "brokerName": self.cfg.broker_name,
            "brokerAddr": self.cfg.broker_addr,
            "brokerId": self.broker_id,
            "epoch": self.role.master_epoch(),
            "maxOffset": self.offsets.max_offset(),
            "confirmOffset": self.offsets.confirm_offset(),
            "heartbeatTimeoutMills": self.cfg.heartbeat_timeout_ms,
            "electionPriority": self.cfg.election_priority,
        }
        sent_ms, sent_wall = self.clock.monotonic_ms(), self.clock.wall_ms()

        async def beat(addr: str) -> bool:
            """The leader's ack renews the lease when it comes, not when the slowest
            controller has answered, and only when it still leads (``lease_ack.py``)."""
            resp = await self._call(addr, Q.BROKER_HEARTBEAT, fields)
            refused = resp.remark if resp.code != RC.SUCCESS else None
            if refused is not None and refused != self._beat_refused.get(addr):
                log.warning("controller %s refused a heartbeat: %s", addr, refused)
            self._beat_refused[addr] = refused
            ack = lease_ack(resp, sent_ms, self.cfg.lease_ms)
            if addr == self.leader and ack.renews_from_ms is not None:
                last = self.last_leader_ack_ms
                if last is None or ack.renews_from_ms > last:
                    self.last_leader_ack_ms = ack.renews_from_ms
                    self.last_contact_wall_ms = int(sent_wall - (sent_ms - ack.renews_from_ms))
            return ack.leading

        leader = self.leader
        for addr in self.cfg.controller_addrs:  # the others' answers wait for nobody
            out = self._side_beats.get(addr)
            if addr != leader and (out is None or out.done()):  # one out per controller
                task = asyncio.get_running_loop().create_task(beat(addr))
                task.add_done_callback(_retrieved)
                self._side_beats[addr] = task
        try:
            ok = leader is not None and await beat(leader)
        except Exception as exc:  # noqa: BLE001 - no answer, or one that is not an ack
            log.debug("heartbeat to the controller leader %s: %s", leader, exc)
            ok = False
        if not ok and self.leader == leader:  # gone, moved or deposed: look again
            self.leader = None

    async def _pull(self) -> None:
        resp = await self._ask_leader(
            Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.cfg.broker_name}
        )
        if resp.code != RC.SUCCESS:
            return
        await self._apply_response(resp)
        # nobody leads (never did, or the controller's last election failed while this node
        # still remembers the master before it), or this node restarted as the master
        no_master = _opt_int(resp.ext_fields.get("masterBrokerId")) is None
        if no_master or self.replica.master_broker_id is None or self._renew_epoch:
            resp = await self._ask_leader(
                Q.CONTROLLER_ELECT_MASTER,
                {
                    "clusterName": self.cfg.cluster,
                    "brokerName": self.cfg.broker_name,
                    "brokerId": self.broker_id,
                },
            )
            if resp.code in (RC.SUCCESS, RC.CONTROLLER_MASTER_STILL_EXIST):
                await self._apply_response(resp)

    async def _apply_response(self, resp: RemotingCommand) -> None:
        h = resp.ext_fields
        body = json.loads(resp.body) if resp.body else {}
        await self.apply_role(
            _opt_int(h.get("masterBrokerId")),
            h.get("masterAddress"),
            _opt_int(h.get("masterEpoch")) or 0,
            body.get("syncStateSet"),
            _opt_int(body.get("syncStateSetEpoch", h.get("syncStateSetEpoch"))),
        )

    async def apply_role(
        self,
        master_id: int | None,
        master_addr: str | None,
        master_epoch: int,
        sync_set: list[int] | None,
        set_epoch: int | None,
    ) -> None:
        """Apply the controller's view when it is newer than this broker's."""
        async with self._role_lock:
            r, me = self.replica, self.broker_id
            if master_id is None or me is None:
                return
            own = self.role.master_epoch()
            self._renew_epoch = master_id == me and not self.is_master and master_epoch <= own
            if self._renew_epoch:
                self._next_pull_ms = 0.0
                return
            if master_epoch > r.master_epoch:
                await self._switch(master_id, master_addr, master_epoch, sync_set, set_epoch)
            elif master_epoch == r.master_epoch and set_epoch is not None and sync_set is not None:
                if set_epoch > r.sync_state_set_epoch:
                    r.sync_state_set, r.sync_state_set_epoch = frozenset(sync_set), set_epoch
            if (
                self.fenced
                and master_epoch == r.master_epoch
                and master_id == me == r.master_broker_id
            ):
                if not self._lease_expired():
                    self.fenced = False
                    self.role.unfence_writes()
                    log.warning("master lease renewed under epoch %d: writes resume", master_epoch)

    async def _switch(self, master_id, master_addr, master_epoch, sync_set, set_epoch) -> None:
        """Take a newer master epoch in a switch of its own; a failed one forgets the role (the
        next pull applies it again) rather than believe one this node does not have."""
        await self._switching.cancel()
        r, me = self.replica, self.broker_id
        before = dataclasses.replace(r)
        r.master_broker_id, r.master_addr, r.master_epoch = master_id, master_addr, master_epoch
        if sync_set is not None and set_epoch is not None:
            r.sync_state_set, r.sync_state_set_epoch = frozenset(sync_set), set_epoch

        def failed(_exc: BaseException) -> None:
            self.replica = before
            self._next_pull_ms = 0.0

        if master_id == me:
            run = functools.partial(
                self.role.become_master,
                broker_id=me,
                master_epoch=master_epoch,
                sync_state_set=set(r.sync_state_set),
                sync_state_set_epoch=r.sync_state_set_epoch,
            )
        else:
            run = functools.partial(
                self.role.become_slave,
                broker_id=me,
                master_epoch=master_epoch,
                master_broker_id=master_id,
                master_addr=master_addr or "",
            )
        self._switching.begin(master_epoch, run, failed, bounded=master_id != me)

    def _lease_expired(self) -> bool:
        last = self.last_leader_ack_ms
        return last is None or self.clock.monotonic_ms() - last > self.cfg.lease_ms

    async def _watch_lease(self) -> None:
        """Fence at the lease's end; look again when the lease as renewed now would end."""
        self._check_lease()
        last, left_ms = self.last_leader_ack_ms, self.cfg.lease_ms
        if last is not None and self.is_master and not self.fenced:
            left_ms = last + self.cfg.lease_ms - self.clock.monotonic_ms()
        self._lease_watch.period_ms = max(1.0, left_ms + 1)

    def _check_lease(self) -> None:
        if not self.is_master or self.fenced or not self._lease_expired():
            return
        if planted_bugs.active("write-after-lease"):  # the master keeps taking writes
            return
        self.fenced = True
        self.role.fence_writes(
            f"master lease of {self.cfg.lease_ms} ms ended: no heartbeat "
            "acknowledged by the controller leader"
        )
        self.leader = None  # find the leader again
        self.on_event(
            "lease_lost",
            {"epoch": self.replica.master_epoch, "lastContactAt": self.last_contact_wall_ms or 0},
        )

    async def on_notify(self, conn, req: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008), one-way; applied only when newer."""
        await self._apply_response(req)  # the same fields as a 1004 answer
        return None

    async def alter_sync_state_set(self, new_set: set[int]) -> bool:
        """The master proposes a new SyncStateSet (1001); True when the controller took it."""
        r = self.replica
        if not self.is_master or self.leader is None:
            return False
        resp = await self._ask_leader(
            Q.CONTROLLER_ALTER_SYNC_STATE_SET,
            {
                "brokerName": self.cfg.broker_name,
                "masterBrokerId": self.broker_id,
                "masterEpoch": r.master_epoch,
            },
            {"syncStateSet": sorted(new_set), "syncStateSetEpoch": r.sync_state_set_epoch},
        )
        if resp.code != RC.SUCCESS:
            return False
        r.sync_state_set = frozenset(new_set)
        r.sync_state_set_epoch = int(resp.ext_fields["newSyncStateSetEpoch"])
        return True  # the caller (the master's SyncStateSet keeper) records the change


def _retrieved(task: asyncio.Task) -> None:
    """A side beat's failure is news to nobody: the next round sends another."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("heartbeat to a controller: %s", task.exception())


def _opt_int(value) -> int | None:
    if value is None or value == "" or value == "null":
        return None
    return int(value)
