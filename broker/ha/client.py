"""The slave side of classic HA: HAClient.

Connects to the master's HA address (``haMasterAddress``, else the ``haServerAddr`` the name
server returns when this slave registers), reports its max physical offset at once, after every
append and every ``haSendHeartbeatInterval``, and appends each frame's body to its own commit
log with the store's ``append_raw`` (which dispatches complete records into the consume
queues, so consumers can read from the slave).

A frame whose offset is not this slave's log end is refused — the connection is dropped and made
again (RocketMQ does the same), except on an empty log, which takes the master's start (the
start of its last file). ``haHousekeepingInterval`` without a frame (the master heartbeats)
drops the connection too. Reconnects back off from 100 ms to 5 s. In controller mode every
frame carries the master's confirmOffset (``wire.CONFIRM_HEADER``): consumers of this slave read
up to it only (nothing before the first frame), unless ``readUnCommitted``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl

from broker import planted_bugs
from broker.acl.signing import AclSigner
from broker.clock import SYSTEM_CLOCK, Clock, sleep_unless_set
from broker.config import BrokerConfig, FlushDiskType
from broker.ha import wire
from broker.ha.admission import HANDSHAKE_TIMEOUT_MS, handshake_frame
from broker.ha.reconcile import EpochReconciler
from broker.live_config import LiveConfig
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from broker.store.role import BrokerRoleState
from contracts.errors import HaproofError, RemotingError, StoreError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
LEARN_MASTER_TIMEOUT_S = 10.0


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"HA master address {addr!r} is not host:port")
    return host, int(port)


class HAClient:
    """Build with ``HAClient(store, config, role, ...)``; ``await start()`` runs it,
    ``await stop()`` ends it. ``reconciler`` (the node's, None: no epoch check) reconciles
    before replicating; ``signer`` (None: no keys) signs the ACL handshake; ``clock`` gives the
    heartbeats' and back-offs' time."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig | LiveConfig,
        role: BrokerRoleState,
        *,
        node_name: str,
        namesrv_addrs: list[str],
        reconciler: EpochReconciler | None = None,
        signer: AclSigner | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.ssl_context = ssl_context  # TLS to the master (tlsMode=enforcing): PeerLinks.ha_tls
        self.config = config
        self.node_name = node_name
        self.namesrv_addrs = namesrv_addrs
        self.reconciler = reconciler
        self.signer = signer
        self.clock = clock
        self.master_ha_addr: str | None = role.master_ha_addr
        self.master_addr: str | None = None  # the master's remoting address, when known
        self.connected = False
        self.connects = 0  # connections made so far
        self.last_frame_at_ms: float | None = None  # clock's monotonic ms of the last frame
        self.last_report = -1
        self._task: asyncio.Task | None = None
        self._addr_changed = asyncio.Event()
        self._writer = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        gate = self.config.enable_controller_mode and not self.config.read_uncommitted
        if gate and self.store.queries.read_end is None:
            self.store.queries.set_read_end(0)  # nothing confirmed until the master says
        self._task = asyncio.create_task(self._run(), name="ha-client")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def handlers(self) -> dict:
        return {}

    def known_master(self) -> str | None:
        """The master's remoting address when known (SlaveSynchronize copies from it)."""
        return self.master_addr

    def set_master(self, ha_addr: str | None, broker_addr: str | None = None) -> None:
        """Point at another master (learned from the name server, or after a failover)."""
        if broker_addr and broker_addr != self.master_addr:
            self.master_addr = broker_addr
            self._addr_changed.set()
        if ha_addr and ha_addr != self.master_ha_addr:
            log.info("HA: master is now %s (was %s)", ha_addr, self.master_ha_addr)
            self.master_ha_addr = ha_addr
            self._addr_changed.set()
            if self._writer is not None:
                self._writer.close()  # the read loop ends; _run reconnects to the new address

    # -- the connection -------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            addr = self.master_ha_addr
            if addr is None:
                self._addr_changed.clear()
                await self._addr_changed.wait()
                continue
            if not await self._reconcile():
                await self._backoff(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            try:
                host, port = _split(addr)
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(
                        host,
                        port,
                        ssl=self.ssl_context,
                        server_hostname=host if self.ssl_context else None,
                    )
            except (OSError, TimeoutError, ValueError) as exc:
                log.info("HA: cannot connect to master %s: %s", addr, exc)
                await self._backoff(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if not await self._still_reconciled():
                writer.close()
                await self._backoff(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            self._writer = writer
            self.connected = True
            self.connects += 1
            log.info("HA: connected to master %s", addr)
            introduce = asyncio.create_task(self._introduce(writer))
            try:
                await self._serve(reader, writer)
            except wire.HAProtocolError as exc:
                log.warning("HA: dropping connection to master %s: %s", addr, exc)
            except TimeoutError:
                log.warning(
                    "HA: nothing from master %s for %d ms, reconnecting",
                    addr,
                    self.config.ha_housekeeping_interval_ms,
                )
            except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
                log.info("HA: connection to master %s lost: %s", addr, exc or type(exc).__name__)
            finally:
                introduce.cancel()
                self.connected = False
                self._writer = None
                writer.close()
            backoff = BACKOFF_MIN_S
            await self._backoff(backoff)

    async def _reconcile(self) -> bool:
        """Before replicating: agree with the master on epochs, truncating a divergent tail
        (broker/ha/failover.py). Needs the master's remoting address, which the name server
        tells a registered slave; without a name server there is nothing to ask."""
        reconciler = self.reconciler
        if reconciler is None:
            return True
        if self.master_addr is None and self.namesrv_addrs:
            self._addr_changed.clear()
            await sleep_unless_set(self.clock, self._addr_changed, LEARN_MASTER_TIMEOUT_S * 1000)
        if self.master_addr is None and self.master_ha_addr:
            await self._guess_master_addr(reconciler)
        if self.master_addr is None:
            if reconciler.role.epoch_entries:
                # a log with epochs replicated unchecked could hold a newer epoch's bytes
                # under older epochs, and a later rejoin would cut them as its own tail
                log.warning(
                    "HA: master's broker address unknown (not answering?): waiting to "
                    "check epochs before replicating into a log that has them"
                )
                return False
            log.info("HA: master's broker address unknown: replicating without an epoch check")
            return True
        try:
            await reconciler.reconcile(self.master_addr)
        except HaproofError as exc:
            log.warning("HA: cannot reconcile with master %s: %s", self.master_addr, exc)
            return False
        return True

    async def _still_reconciled(self) -> bool:
        """On a new connection, before the first report (the master sends nothing before it):
        whether the master's epochs are still the ones this node adopted (see
        ``EpochReconciler.still_reconciled``); if not, reconcile again on a new connection."""
        reconciler, master = self.reconciler, self.master_addr
        if reconciler is None or master is None or reconciler.reconciled_with is None:
            return True  # nothing adopted to keep (no epochs to check, or no master to ask)
        try:
            if await reconciler.still_reconciled(master):
                return True
            log.info("HA: master %s changed its epochs since this slave reconciled", master)
        except HaproofError as exc:
            log.info("HA: cannot check master %s's epochs again: %s", master, exc)
        return False

    async def _introduce(self, writer) -> None:
        """Tell the master which node this HA connection is (EXCHANGE_BROKER_HA_INFO, 906);
        a master that does not know the request (RocketMQ 4.x) just refuses it. A request
        that fails (a peer connection gone stale when the master restarted) is tried again
        while the HA connection lasts: a master that never learns the slave's id never counts
        it in its SyncStateSet."""
        reconciler = self.reconciler
        if reconciler is None or self.master_addr is None:
            return
        host, port = writer.get_extra_info("sockname")[:2]
        req = RemotingCommand.request(
            RequestCode.EXCHANGE_BROKER_HA_INFO,
            {
                "nodeName": self.node_name,
                "haClientAddr": f"{host}:{port}",
                "brokerId": reconciler.role.broker_id,  # controller mode: its SyncStateSet id
            },
        )
        backoff = BACKOFF_MIN_S
        while not writer.is_closing():
            try:
                await reconciler.client.invoke(self.master_addr, req, 3000)
                return
            except RemotingError as exc:
                log.info("HA: could not introduce this slave to %s: %s", self.master_addr, exc)
            await self.clock.sleep_ms(backoff * 1000)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _guess_master_addr(self, reconciler: EpochReconciler) -> None:
        """No name server: try RocketMQ's default layout (haListenPort = listenPort + 1) and
        accept the guess only when that broker says its HA address is the one we use."""
        try:
            host, port = _split(self.master_ha_addr)
            doc = await reconciler.fetch_epochs(f"{host}:{port - 1}")
        except (HaproofError, ValueError):
            return
        if doc.get("haServerAddr", "").rpartition(":")[2] == str(port):
            self.master_addr = f"{host}:{port - 1}"

    async def _backoff(self, seconds: float) -> None:
        """Wait before reconnecting, cut short when the master address changes."""
        self._addr_changed.clear()
        await sleep_unless_set(
            self.clock, self._addr_changed, seconds * 1000 * random.uniform(0.8, 1.2)
        )

    def _ack_offset(self) -> int:
        """What this slave acknowledges: under ``flushDiskType=SYNC_FLUSH`` only what is flushed
        (one fdatasync per report, so a SYNC_MASTER's answer means the bytes are on two disks),
        otherwise what it wrote, as RocketMQ does."""
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            if not planted_bugs.active("early-ack"):
                return self.store.commit_log.flush(0)
        return self.store.max_phy_offset

    async def _report(self, writer) -> None:
        offset = self._ack_offset()
        writer.write(wire.build_report(offset))
        await writer.drain()
        self.last_report = offset

    async def _heartbeat(self, writer) -> None:
        """Report every ``haSendHeartbeatInterval`` and watch the master's silence: nothing for
        ``haHousekeepingInterval`` (the master heartbeats) closes the connection and raises
        TimeoutError. Both on this client's clock."""
        clock, cfg = self.clock, self.config
        connected_ms = clock.monotonic_ms()
        next_report_ms = connected_ms + cfg.ha_send_heartbeat_interval_ms
        while True:
            now = clock.monotonic_ms()
            heard = self.last_frame_at_ms
            silent_since = heard if heard is not None and heard >= connected_ms else connected_ms
            deadline_ms = silent_since + cfg.ha_housekeeping_interval_ms
            if now >= deadline_ms:
                writer.close()  # the read loop ends and reports this task's TimeoutError
                raise TimeoutError(f"nothing from the master for {now - silent_since:.0f} ms")
            if now >= next_report_ms:
                await self._report(writer)
                next_report_ms = now + cfg.ha_send_heartbeat_interval_ms
            await clock.sleep_ms(min(next_report_ms, deadline_ms) - now)

    async def _handshake(self, reader) -> bytes:
        """With ACL, the signed answer to the master's challenge, wanted before the first
        report."""
        if not self.config.acl_enable:
            return b""
        if self.signer is None:
            log.warning("HA: aclEnable without accessKey/secretKey: the master will refuse us")
            return b""
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_MS / 1000):
            nonce = wire.read_challenge(await reader.readexactly(wire.CHALLENGE_SIZE))
        return handshake_frame(self.signer, self.node_name, nonce)

    async def _serve(self, reader, writer) -> None:
        hello = await self._handshake(reader)
        if hello:
            writer.write(hello)
        await self._report(writer)
        heartbeat = asyncio.create_task(self._heartbeat(writer))
        try:
            while True:
                if heartbeat.done():
                    heartbeat.result()  # raises what ended it (a dead connection, a silence)
                try:
                    offset, size, confirm = await self._read_header(reader)
                    body = await reader.readexactly(size) if size else b""
                except (ConnectionError, asyncio.IncompleteReadError, OSError):
                    if heartbeat.done() and isinstance(heartbeat.exception(), TimeoutError):
                        heartbeat.result()  # the silence closed it: say so
                    raise
                self.last_frame_at_ms = self.clock.monotonic_ms()
                if size:
                    self._append(offset, body)
                if confirm is not None and not self.config.read_uncommitted:
                    self.store.queries.set_read_end(confirm)  # what the master confirmed
                if size:  # else a heartbeat
                    await self._report(writer)
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def _read_header(self, reader) -> tuple[int, int, int | None]:
        """A frame's offset and size; in controller mode the master's confirmOffset too."""
        if not self.config.enable_controller_mode:
            return (*wire.read_header(await reader.readexactly(wire.TRANSFER_HEADER.size)), None)
        return wire.read_confirm_header(await reader.readexactly(wire.CONFIRM_HEADER.size))

    def _append(self, offset: int, body: bytes) -> None:
        mine = self.store.max_phy_offset
        empty = mine == 0 and self.store.commit_log.queue.last_file() is None
        if not empty and offset != mine:
            raise wire.HAProtocolError(
                f"master sent bytes at {offset}, but this slave's log ends at {mine}"
            )
        if empty and offset % self.config.mapped_file_size_commit_log:
            raise wire.HAProtocolError(
                f"master's first frame to an empty slave starts at {offset}, not at a file start"
            )
        try:
            self.store.append_raw(offset, body)
        except StoreError as exc:
            raise wire.HAProtocolError(
                f"cannot append {len(body)} bytes at {offset}: {exc}"
            ) from exc

    def runtime_info(self) -> dict[str, object]:
        return {
            "haMasterAddress": self.master_ha_addr or "",
            "haConnected": self.connected,
            "slaveMaxPhyOffset": self.store.max_phy_offset,
        }
