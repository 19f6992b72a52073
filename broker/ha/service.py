"""The master side of classic HA: HAService, one HAConnection per slave, GroupTransferService.

- A slave connects to ``haListenPort`` and reports its max physical offset (8 bytes) after each
  append and every ``haSendHeartbeatInterval``. Its first report says where to start: there; on
  0 (fresh), the start of the master's last commit log file (classic, as RocketMQ), or in
  controller mode its first byte (RocketMQ 5's AutoSwitch; ``syncFromLastFile=true``: the last).
- The master sends the commit log's written bytes in frames of at most ``haTransferBatchSize``,
  never across a file end, and a heartbeat frame (size 0) when it has had nothing to send for
  ``haSendHeartbeatInterval``. ``haHousekeepingInterval`` without a report closes the connection.
- A report that is negative or beyond the master's log end is garbage (or an old master that
  must truncate first): the connection is dropped, the reason logged. After the first, a report
  beyond what the connection was sent (an ack for bytes the peer cannot hold) is a lie too.
- Only slaves get in (broker/ha/admission.py): an address allow-list, with ACL a signed handshake,
  under tlsMode=enforcing TLS only; anyone else is closed before a byte is sent.
- ``wait_replicated`` is GroupTransferService: a SYNC_MASTER send is answered once a slave's
  ack reaches its end, FLUSH_SLAVE_TIMEOUT after ``syncFlushTimeout``, SLAVE_NOT_AVAILABLE at
  once when no slave is connected or the best lags by over ``haSlaveFallbehindMax``. Controller
  mode (``sync_state``, ``broker/ha/sync_state_keeper.py``): transfers, idles, acks and closes
  go to the SyncStateSet, a put waits for its members (``allAckInSyncStateSet``; else for one
  slave), frames carry the confirmOffset (``wire.CONFIRM_HEADER``, sent at once as it moves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from typing import TYPE_CHECKING

from broker.clock import SYSTEM_CLOCK, Clock, monotonic_seconds, sleep_unless_set
from broker.config import BrokerConfig, BrokerRole
from broker.ha import wire
from broker.ha.admission import HANDSHAKE_TIMEOUT_MS, HAAdmission
from broker.ha.confirm_watch import ConfirmWatch
from broker.ha.group_transfer import GroupTransferService
from broker.remoting.limits import RefusalLog
from broker.store.results import PutMessageStatus
from broker.store.role import BrokerRoleState

if TYPE_CHECKING:
    from broker.acl.permission import AclChecker
    from broker.ha.sync_state_keeper import SyncStateKeeper
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

SPEED_WINDOW_S = 5.0
ACK_HISTORY_LEN = 500_000
# What a slave's stream may buffer on the master: reports are 8 bytes, so a few KiB is plenty
# (asyncio pauses reading at twice this).
HA_READ_BUFFER_BYTES = 4096


class HAConnection:
    """One slave's connection. Built by HAService on accept; ``run()`` serves it until it ends."""

    def __init__(self, service: HAService, reader, writer, peer: str) -> None:
        self.service = service
        self.reader, self.writer, self.peer = reader, writer, peer
        self.ack_offset = -1  # the slave's last report
        self.request_offset = -1  # its first report: where the transfer starts
        self.next_transfer = -1
        self.sent_end = -1  # end of what this connection was given: no ack may pass it
        self.connected_at = service.clock.monotonic_ms() / 1000
        self.last_read_ms = service.clock.monotonic_ms()  # the slave's last report (housekeeping)
        self._first_report = asyncio.Event()
        self.new_data = asyncio.Event()  # set by the service on every put
        self._sent: deque[tuple[float, int]] = deque()  # (monotonic s, bytes) for the speed
        self.closed = False

    def transfer_speed(self) -> float:
        now = self.service.clock.monotonic_ms() / 1000
        while self._sent and now - self._sent[0][0] > SPEED_WINDOW_S:
            self._sent.popleft()
        span = max(min(now - self.connected_at, SPEED_WINDOW_S), 1e-3)
        return sum(n for _, n in self._sent) / span

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._read_loop(), name=f"ha-read-{self.peer}"),
            asyncio.create_task(self._write_loop(), name=f"ha-write-{self.peer}"),
            asyncio.create_task(self._housekeeping(), name=f"ha-housekeeping-{self.peer}"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = t.exception()
                if isinstance(exc, wire.HAProtocolError):
                    log.warning("HA: dropping slave %s: %s", self.peer, exc)
                elif isinstance(exc, (ConnectionError, asyncio.IncompleteReadError, OSError)):
                    log.info("HA: slave %s disconnected (%s)", self.peer, exc or type(exc).__name__)
                elif isinstance(exc, TimeoutError):  # (the housekeeping's: names the peer)
                    log.warning("HA: closing the connection: %s", exc)
                elif exc is not None:
                    log.error("HA: connection to slave %s failed", self.peer, exc_info=exc)
        finally:
            self.closed = True
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.wait_closed()

    async def _housekeeping(self) -> None:
        """A slave silent for ``haHousekeepingInterval`` of the service's clock: TimeoutError
        (the connection closes)."""
        clock = self.service.clock
        limit_ms = self.service.config.ha_housekeeping_interval_ms
        while True:
            silent_ms = clock.monotonic_ms() - self.last_read_ms
            if silent_ms >= limit_ms:
                raise TimeoutError(f"slave {self.peer} silent for {silent_ms:.0f} ms")
            await clock.sleep_ms(limit_ms - silent_ms)

    async def _read_loop(self) -> None:
        clock = self.service.clock
        while True:
            data = await self.reader.readexactly(wire.REPORT.size)
            self.last_read_ms = clock.monotonic_ms()
            offset = wire.read_report(data)
            master_max = self.service.store.max_phy_offset
            if offset > master_max:
                raise wire.HAProtocolError(
                    f"reported offset {offset} is beyond the master's log end {master_max}"
                    " (garbage, or an old master that must truncate before it replicates)"
                )
            if self.request_offset < 0:
                self.request_offset = offset
                self.next_transfer = self.sent_end = self._start_offset()
                log.info("HA: slave %s connected, its log ends at %d", self.peer, offset)
                self._first_report.set()
            elif offset > self.sent_end:
                raise wire.HAProtocolError(
                    f"acknowledged offset {offset}, beyond the {self.sent_end} this connection "
                    "was sent (an ack for bytes it cannot hold)"
                )
            self.ack_offset = offset
            self.service.on_ack(offset, self)

    def _start_offset(self) -> int:
        if self.request_offset > 0:
            return self.request_offset
        store, cfg = self.service.store, self.service.config
        if self.service.sync_state is not None and not cfg.sync_from_last_file:
            return store.min_phy_offset  # controller mode: the whole log, as RocketMQ 5
        master_max, file_size = store.max_phy_offset, cfg.mapped_file_size_commit_log
        return max(0, master_max - master_max % file_size)

    async def _write_loop(self) -> None:
        await self._first_report.wait()
        cfg = self.service.config
        heartbeat_ms = cfg.ha_send_heartbeat_interval_ms
        batch = cfg.ha_transfer_batch_size_bytes
        store, clock = self.service.store, self.service.clock
        keeper = self.service.sync_state  # controller mode: the master's SyncStateSet
        header = wire.build_header if keeper is None else keeper.header_for(self)
        last_write = clock.monotonic_ms()
        while True:
            self.new_data.clear()  # before reading: a put after the read wakes the wait below
            data = store.commit_log.read(self.next_transfer, batch)
            if data:
                self.writer.write(header(self.next_transfer, len(data)))
                self.writer.write(data)
                # before the drain: the slave's ack may arrive while we wait for the socket
                self.sent_end = self.next_transfer + len(data)
                await self.writer.drain()
                self.next_transfer += len(data)
                last_write = clock.monotonic_ms()
                self._sent.append((last_write / 1000, len(data)))
                if keeper is not None:
                    keeper.conn_transfer(self, store.max_phy_offset)
                continue
            if keeper is not None:
                keeper.conn_idle(self)
            moved = keeper is not None and keeper.confirm_moved(self)  # tell the slave
            if moved or clock.monotonic_ms() - last_write >= heartbeat_ms:
                self.writer.write(header(self.next_transfer, 0))
                await self.writer.drain()
                last_write = clock.monotonic_ms()
            await sleep_unless_set(clock, self.new_data, heartbeat_ms)


class HAService:
    """Build with ``HAService(store, config, role, host, acl)``; ``await start()`` listens on
    ``host``, ``await stop()`` closes. ``acl`` (None: aclEnable off) checks the slaves'
    handshakes; ``role`` is the node's role state (only a SYNC_MASTER's puts wait)."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        role: BrokerRoleState,
        host: str,
        acl: AclChecker | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sync_state: SyncStateKeeper | None = None,
        ssl_context: ssl.SSLContext | None = None,
        confirm_watch: ConfirmWatch | None = None,
    ) -> None:
        self.store = store
        self.confirm_watch = confirm_watch or ConfirmWatch()  # told as the confirm may move
        self.sync_state = sync_state  # controller mode: the master's SyncStateSet (else None)
        self.config = config
        self.role = role
        self.clock = clock
        self.host = host
        self.ssl_context = ssl_context  # TLS only (tlsMode=enforcing): PeerLinks.ha_tls
        self.connections: list[HAConnection] = []
        self.push2slave_max = 0  # the best ack over all slaves (RocketMQ's push2SlaveMaxOffset)
        self._server: asyncio.Server | None = None
        self.port = self.config.ha_listen_port  # the bound port once started
        self.peer_names: dict[str, str] = {}  # HA connection peer -> the slave's node name
        self.peer_ids: dict[str, int] = {}  # HA connection peer -> the slave's broker id
        # (clock's monotonic s, push2slave_max) each time the best ack rose: replication lag
        # measured where the ack lands, without a poller's granularity (bench, haStatus)
        self.ack_history: deque[tuple[float, int]] = deque(maxlen=ACK_HISTORY_LEN)
        self._tasks: set[asyncio.Task] = set()
        self.admission = HAAdmission(self.config, acl)
        self.transfer = GroupTransferService(clock)  # SYNC_MASTER puts waiting for an ack
        self.refusals = RefusalLog(monotonic_seconds(clock))  # refused, logged 1/min per host

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self.store.add_dispatch_listener(self._on_put)
        self._server = await asyncio.start_server(
            self._accept,
            host=self.host,
            port=self.config.ha_listen_port,
            limit=HA_READ_BUFFER_BYTES,
            ssl=self.ssl_context,  # a plain peer fails the TLS handshake: never accepted
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_MS / 1000 if self.ssl_context else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.transfer.start()
        if self.sync_state is not None:
            self.sync_state.attach(self)
        log.info("HA: port %d (%s)", self.port, "TLS only" if self.ssl_context else "plain")

    async def stop(self) -> None:
        self.store.remove_dispatch_listener(self._on_put)
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await self.transfer.stop()

    async def _accept(self, reader, writer) -> None:
        host, port = writer.get_extra_info("peername")[:2]
        peer = f"{host}:{port}"
        cap = self.config.ha_max_connections
        if len(self.connections) >= cap:
            self.refusals.refuse(
                "HA refused", peer, f"{cap} HA connections open (haMaxConnections)"
            )
            writer.transport.abort()
            return
        task = asyncio.current_task()
        self._tasks.add(task)
        conn = None
        try:
            if not await self._admit(reader, writer, host, peer):
                return
            conn = HAConnection(self, reader, writer, peer)
            self.connections.append(conn)
            await conn.run()
        except asyncio.CancelledError:
            pass  # stop(): the top of this connection's task, nothing above it to tell
        finally:
            if conn is not None:
                self.connections.remove(conn)
                if self.sync_state is not None:
                    self.sync_state.conn_closed(peer)
                self.confirm_watch.moved()  # one in-sync slave fewer: the min may rise
            else:
                writer.close()  # stopped during the handshake
            self.peer_names.pop(peer, None)
            self.peer_ids.pop(peer, None)
            self._tasks.discard(task)

    async def _admit(self, reader, writer, host: str, peer: str) -> bool:
        """Whether ``peer`` is one of our slaves; if not it is closed, having been sent nothing."""
        admission = self.admission
        reason = admission.address_refusal(host)
        if reason is None and admission.acl is not None:
            try:
                name = await admission.handshake(reader, writer)
            except wire.HAProtocolError as exc:
                reason = str(exc)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                reason = f"no signed HA handshake ({type(exc).__name__})"
            else:
                if name:
                    self.peer_names[peer] = name
        if reason is None:
            return True
        admission.log_refusal(peer, host, reason)
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
        return False

    # -- transfer -------------------------------------------------------------------------------

    def _on_put(self, topic: str, queue_id: int, max_offset: int) -> None:
        for conn in self.connections:
            conn.new_data.set()

    # -- acknowledgements (GroupTransferService) ------------------------------------------------

    def on_ack(self, offset: int, conn: HAConnection | None = None) -> None:
        if offset > self.push2slave_max:
            self.push2slave_max = offset
            self.ack_history.append((self.clock.monotonic_ms() / 1000, offset))
        keeper = self.sync_state
        if keeper is not None and keeper.active and conn is not None:
            keeper.conn_ack(conn, offset)  # releases the puts the set's acks now cover
        else:
            self.transfer.on_ack(self.push2slave_max)
        self.confirm_watch.moved()

    def slave_ok(self, master_put_where: int) -> bool:
        """RocketMQ's isSlaveOK: a slave is connected and does not lag too far behind."""
        live = [c for c in self.connections if not c.closed]
        return bool(live) and (
            master_put_where - self.push2slave_max < self.config.ha_slave_fallbehind_max_bytes
        )

    async def wait_replicated(self, result, timeout_ms: int) -> PutMessageStatus:
        if self.role.role is not BrokerRole.SYNC_MASTER:
            return result.status
        end, keeper = result.end_offset, self.sync_state
        if keeper is not None and keeper.active:  # controller mode: the SyncStateSet's acks
            keeper.flushed()  # the put's bytes are on the master's disk: the confirm may rise
            if not keeper.state.config.all_ack_in_sync_state_set and not self.slave_ok(end):
                return PutMessageStatus.SLAVE_NOT_AVAILABLE
            if keeper.acknowledged_offset() >= end:
                return PutMessageStatus.PUT_OK
            return await self.transfer.wait(end, timeout_ms)
        if not self.slave_ok(end):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if self.push2slave_max >= end:
            return PutMessageStatus.PUT_OK
        return await self.transfer.wait(end, timeout_ms)

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> dict:
        master_max = self.store.max_phy_offset
        fallbehind = self.config.ha_slave_fallbehind_max_bytes
        slaves = []
        for c in self.connections:
            if c.ack_offset < 0:
                continue
            diff = master_max - c.ack_offset
            slaves.append(
                {
                    "node": self.peer_names.get(c.peer),
                    "brokerId": self.peer_ids.get(c.peer),
                    "addr": c.peer,
                    "ackOffset": c.ack_offset,
                    "diff": diff,
                    "transferSpeedBytesPerS": round(c.transfer_speed(), 1),
                    "inSync": not c.closed and diff < fallbehind,
                }
            )
        in_sync = [s["ackOffset"] for s in slaves if s["inSync"]]
        doc = {
            "masterMaxOffset": master_max,
            "confirmOffset": min(in_sync) if in_sync else master_max,
            "slaves": slaves,
        }
        keeper = self.sync_state
        if keeper is not None and keeper.active:  # controller mode: the SyncStateSet's view
            doc.update(keeper.status())
            if keeper.state.config.all_ack_in_sync_state_set:  # else RocketMQ claims the log
                doc["confirmOffset"] = keeper.confirm_offset(master_max)  # end: keep ours
            for s in slaves:
                s["inSyncStateSet"] = s["brokerId"] in doc["syncStateSet"]
        return doc

    def handlers(self) -> dict:
        return {}

    def runtime_info(self) -> dict[str, object]:
        st = self.status()
        return {
            "haConnections": len(st["slaves"]),
            "haPush2SlaveMaxOffset": self.push2slave_max,
            "haConfirmOffset": st["confirmOffset"],
            "haSlaveDiffBytes": max((s["diff"] for s in st["slaves"]), default=0),
        }
