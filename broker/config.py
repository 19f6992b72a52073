"""One frozen, validated configuration object per broker node, read from RocketMQ's broker.conf.

Property names are RocketMQ's (``brokerRole``, ``flushDiskType``, ``mappedFileSizeCommitLog``...);
fields are snake_case with their unit in the name. Our own keys (archive, snapshots) follow the
same style.

Strict by default: a key that is neither ours nor one of RocketMQ's broker settings this node
accepts without using (``ROCKETMQ_IGNORED_KEYS``, kept in ``extra``) is an error naming the file,
line and key, with the closest known key suggested (``brokerrole`` -> ``brokerRole``): a typo must
never silently downgrade durability. ``strictConfig=false`` turns unknown keys into a warning.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.aio import EventLoop
from broker.config_file import ROCKETMQ_IGNORED_KEYS, parse_properties, unknown_key_message
from broker.remoting.tls import TlsMode
from contracts.errors import ConfigError

log = logging.getLogger(__name__)


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# RocketMQ property name -> (field name, default). A default of None means "derived" or "unset".
_PROPERTIES: dict[str, tuple[str, Any]] = {
    "brokerClusterName": ("broker_cluster_name", "DefaultCluster"),
    "brokerName": ("broker_name", "broker-a"),
    "brokerId": ("broker_id", 0),
    "brokerRole": ("broker_role", BrokerRole.ASYNC_MASTER),
    "flushDiskType": ("flush_disk_type", FlushDiskType.ASYNC_FLUSH),
    "storePathRootDir": ("store_path_root_dir", os.path.join(os.path.expanduser("~"), "store")),
    "storePathCommitLog": ("store_path_commit_log", None),
    "listenPort": ("listen_port", 10911),
    "haListenPort": ("ha_listen_port", None),
    "haMasterAddress": ("ha_master_address", None),
    "namesrvAddr": ("namesrv_addr", None),
    "brokerIP1": ("broker_ip1", "127.0.0.1"),
    "mappedFileSizeCommitLog": ("mapped_file_size_commit_log", 1 << 30),
    "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", 300_000 * 20),
    "syncFlushTimeout": ("sync_flush_timeout_ms", 5000),
    "flushIntervalCommitLog": ("flush_interval_commit_log_ms", 500),
    "flushCommitLogLeastPages": ("flush_commit_log_least_pages", 4),
    "flushCommitLogThoroughInterval": ("flush_commit_log_thorough_interval_ms", 10_000),
    "flushIntervalConsumeQueue": ("flush_interval_consume_queue_ms", 1000),
    "haSlaveFallbehindMax": ("ha_slave_fallbehind_max_bytes", 256 * 1024 * 1024),
    "haSendHeartbeatInterval": ("ha_send_heartbeat_interval_ms", 5000),
    "haHousekeepingInterval": ("ha_housekeeping_interval_ms", 20_000),
    "haTransferBatchSize": ("ha_transfer_batch_size_bytes", 32 * 1024),
    "accessMessageInMemoryMaxRatio": ("access_message_in_memory_max_ratio", 40),
    "slaveReadEnable": ("slave_read_enable", False),
    "autoCreateTopicEnable": ("auto_create_topic_enable", True),
    "defaultTopicQueueNums": ("default_topic_queue_nums", 8),
    "messageDelayLevel": ("message_delay_level", DEFAULT_DELAY_LEVELS),
    "slaveSyncIntervalMs": ("slave_sync_interval_ms", 60_000),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval_ms", 5000),
    "maxMessageSize": ("max_message_size_bytes", 4 * 1024 * 1024),
    "nodeName": ("node_name", None),
    "archiveEnable": ("archive_enable", False),
    "archiveRoot": ("archive_root", None),
    "archiveChunkMaxBytes": ("archive_chunk_max_bytes", 64 * 1024 * 1024),
    "archiveIntervalMs": ("archive_interval_ms", 10_000),
    "archiveChunkMinBytes": ("archive_chunk_min_bytes", 4 * 1024 * 1024),
    "archiveChunkMaxAgeMs": ("archive_chunk_max_age_ms", 0),
    "archiveS3Endpoint": ("archive_s3_endpoint", None),
    "archiveS3Region": ("archive_s3_region", None),
    "archiveInProcess": ("archive_in_process", False),
    "archiveNice": ("archive_nice", 10),
    "snapshotIntervalMs": ("snapshot_interval_ms", 60_000),
    "eventLoop": ("event_loop", EventLoop.UVLOOP),
    "listenHost": ("listen_host", "0.0.0.0"),
    "serverChannelMaxIdleTimeSeconds": ("server_channel_max_idle_time_s", 120),
    "remotingFrameReadTimeoutMs": ("remoting_frame_read_timeout_ms", 30_000),
    "remotingMaxConnections": ("remoting_max_connections", 4096),
    "remotingMaxPendingBytes": ("remoting_max_pending_bytes", 64 * 1024 * 1024),
    "haMaxConnections": ("ha_max_connections", 16),
    "tlsMode": ("tls_mode", TlsMode.DISABLED),
    "tlsServerCertPath": ("tls_server_cert_path", None),
    "tlsServerKeyPath": ("tls_server_key_path", None),
    "tlsServerKeyPassword": ("tls_server_key_password", None),
    "tlsEnable": ("tls_enable", False),
    "tlsClientTrustCertPath": ("tls_client_trust_cert_path", None),
    "strictConfig": ("strict_config", True),
    "checkCRCOnRecover": ("check_crc_on_recover", True),
    "aclEnable": ("acl_enable", False),
    "aclFile": ("acl_file", None),
    "accessKey": ("access_key", None),
    "secretKey": ("secret_key", None),
    "haAllowedSlaves": ("ha_allowed_slaves", None),
}
_FIELD_TO_PROPERTY = {f: p for p, (f, _) in _PROPERTIES.items()}


@dataclass(frozen=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    store_path_commit_log: str | None = None
    listen_port: int = 10911
    ha_listen_port: int | None = None
    ha_master_address: str | None = None
    namesrv_addr: str | None = None
    broker_ip1: str = "127.0.0.1"
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    sync_flush_timeout_ms: int = 5000
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    ha_slave_fallbehind_max_bytes: int = 256 * 1024 * 1024
    ha_send_heartbeat_interval_ms: int = 5000
    ha_housekeeping_interval_ms: int = 20_000
    ha_transfer_batch_size_bytes: int = 32 * 1024
    access_message_in_memory_max_ratio: int = 40
    slave_read_enable: bool = False
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    slave_sync_interval_ms: int = 60_000
    flush_consumer_offset_interval_ms: int = 5000
    max_message_size_bytes: int = 4 * 1024 * 1024
    node_name: str | None = None
    archive_enable: bool = False
    archive_root: str | None = None
    archive_chunk_max_bytes: int = 64 * 1024 * 1024
    archive_interval_ms: int = 10_000
    # a round ships less than this many new bytes only once the oldest of them has waited
    # archive_chunk_max_age_ms (0: 6 x archive_interval_ms, one minute by default)
    archive_chunk_min_bytes: int = 4 * 1024 * 1024
    archive_chunk_max_age_ms: int = 0
    archive_s3_endpoint: str | None = None  # default: HAPROOF_S3_ENDPOINT, else AWS
    archive_s3_region: str | None = None
    # the archiver's reads, hashing and uploads run in a child process at this nice increment
    # (0-19) so they never hold the broker's interpreter lock or outrank its send path;
    # archiveInProcess=true keeps them in a thread of the broker instead
    archive_in_process: bool = False
    archive_nice: int = 10
    snapshot_interval_ms: int = 60_000
    # the node's asyncio event loop: uvloop (default) or the standard library's (asyncio)
    event_loop: EventLoop = EventLoop.UVLOOP
    # remoting transport (broker/remoting/limits.py, tls.py): 0.0.0.0 = all interfaces, loudly
    # warned about at start while ACL is off
    listen_host: str = "0.0.0.0"
    server_channel_max_idle_time_s: int = 120
    remoting_frame_read_timeout_ms: int = 30_000
    remoting_max_connections: int = 4096
    remoting_max_pending_bytes: int = 64 * 1024 * 1024
    ha_max_connections: int = 16
    tls_mode: TlsMode = TlsMode.DISABLED
    tls_server_cert_path: str | None = None
    tls_server_key_path: str | None = None
    tls_server_key_password: str | None = field(default=None, repr=False)
    # this node's own connections (name server, master, peers) over TLS, servers verified
    # against tlsClientTrustCertPath (else the system's trust store)
    tls_enable: bool = False
    tls_client_trust_cert_path: str | None = None
    # unknown keys in broker.conf are an error (false: a warning, the key is ignored)
    strict_config: bool = True
    # recovery checks every record's body CRC (RocketMQ's checkCRCOnRecover, default true)
    check_crc_on_recover: bool = True
    # RocketMQ's plain ACL (broker/acl): aclEnable checks every request against aclFile
    # (plain_acl.yml); accessKey/secretKey are this broker's own account, used to sign what it
    # sends (registration, slave sync, the HA handshake)
    acl_enable: bool = False
    acl_file: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    # who may connect to the HA port: IPs or networks separated by ';' or ','
    # (default: loopback only without ACL, anyone who signs the handshake with ACL)
    ha_allowed_slaves: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Derived defaults, then validation (errors name the RocketMQ property).
        if self.store_path_commit_log is None:
            object.__setattr__(
                self, "store_path_commit_log", os.path.join(self.store_path_root_dir, "commitlog")
            )
        if self.ha_listen_port is None:
            # RocketMQ: listenPort + 1; an ephemeral listen port (0, tests) gets an ephemeral one
            object.__setattr__(
                self, "ha_listen_port", self.listen_port + 1 if self.listen_port else 0
            )
        if self.node_name is None:
            object.__setattr__(self, "node_name", f"{self.broker_name}-{self.broker_id}")
        self._validate()

    def _validate(self) -> None:
        def bad(fname: str, why: str) -> ConfigError:
            key = _FIELD_TO_PROPERTY[fname]
            return _keyed(f"{key}={getattr(self, fname)!r}: {why}", key)

        if self.broker_id < 0:
            raise bad("broker_id", "must be >= 0")
        if self.broker_role is BrokerRole.SLAVE and self.broker_id == 0:
            raise bad("broker_id", "a SLAVE needs brokerId > 0 (0 is the master's id)")
        if self.broker_role.is_master and self.broker_id != 0:
            raise bad("broker_id", f"a {self.broker_role.value} must have brokerId 0")
        for fname in ("listen_port", "ha_listen_port"):
            if not 0 <= getattr(self, fname) <= 65535:
                raise bad(fname, "not a TCP port")
        try:
            ipaddress.ip_address(self.broker_ip1)
        except ValueError:
            raise bad(
                "broker_ip1", "must be an IP address (it is written into every record's STOREHOST)"
            ) from None
        if self.mapped_file_size_commit_log < 4096:
            raise bad("mapped_file_size_commit_log", "must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue < 20 or self.mapped_file_size_consume_queue % 20:
            raise bad("mapped_file_size_consume_queue", "must be a positive multiple of 20")
        for fname in (
            "sync_flush_timeout_ms",
            "flush_interval_commit_log_ms",
            "ha_send_heartbeat_interval_ms",
            "ha_housekeeping_interval_ms",
            "ha_transfer_batch_size_bytes",
            "slave_sync_interval_ms",
            "archive_chunk_max_bytes",
            "archive_interval_ms",
            "snapshot_interval_ms",
            "max_message_size_bytes",
            "server_channel_max_idle_time_s",
            "remoting_frame_read_timeout_ms",
            "remoting_max_connections",
            "ha_max_connections",
        ):
            if getattr(self, fname) <= 0:
                raise bad(fname, "must be positive")
        if self.remoting_max_pending_bytes < 64 * 1024:
            raise bad("remoting_max_pending_bytes", "must be at least 65536")
        if self.tls_mode is not TlsMode.DISABLED and not (
            self.tls_server_cert_path and self.tls_server_key_path
        ):
            raise bad("tls_mode", "needs tlsServerCertPath and tlsServerKeyPath")
        for fname in ("archive_chunk_min_bytes", "archive_chunk_max_age_ms"):
            if getattr(self, fname) < 0:
                raise bad(fname, "must not be negative")
        if not 0 <= self.archive_nice <= 19:
            raise bad("archive_nice", "must be a nice increment 0-19")
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise bad("access_message_in_memory_max_ratio", "must be a percentage 0-100")
        for fname in ("namesrv_addr", "ha_master_address"):
            value = getattr(self, fname)
            for addr in (a.strip() for a in (value or "").split(";")):
                if addr and not _is_host_port(addr):
                    raise bad(fname, f"{addr!r} is not host:port (port 1-65535)")
        if self.archive_enable and not self.archive_root:
            raise _keyed(
                "archiveEnable=true needs archiveRoot (s3://bucket/prefix or file://)",
                "archiveEnable",
            )
        try:
            parse_delay_levels(self.message_delay_level)
        except ConfigError as exc:
            raise _keyed(str(exc), "messageDelayLevel") from None
        if self.acl_enable and not self.acl_file:
            raise _keyed("aclEnable=true needs aclFile (the path of plain_acl.yml)", "aclEnable")
        if bool(self.access_key) != bool(self.secret_key):
            raise _keyed("accessKey and secretKey go together: set both or neither", "accessKey")
        if self.ha_allowed_slaves:
            try:
                ha_allowed_networks(self.ha_allowed_slaves)
            except ValueError as exc:
                raise bad("ha_allowed_slaves", str(exc)) from None

    @property
    def store_host(self) -> tuple[str, int]:
        return (self.broker_ip1, self.listen_port)

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip1}:{self.ha_listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        """``namesrvAddr`` split at ``;``."""
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(
        cls,
        props: Mapping[str, Any],
        *,
        source: str = "<dict>",
        lines: Mapping[str, int] | None = None,
    ) -> BrokerConfig:
        """Build from RocketMQ property names (values as strings or already typed). Errors name
        ``source``, the key and, when ``lines`` says where the key was set, its line."""
        lines = lines or {}

        def where(key: str | None) -> str:
            line = lines.get(key) if key else None
            return f"{source}:{line}" if line else source

        kwargs: dict[str, Any] = {}
        extra: dict[str, str] = {}
        unknown: list[str] = []
        for key, raw in props.items():
            if key not in _PROPERTIES:
                extra[key] = str(raw)
                if key not in ROCKETMQ_IGNORED_KEYS:
                    unknown.append(key)
                continue
            fname, _default = _PROPERTIES[key]
            try:
                kwargs[fname] = _convert(raw, _field_type(fname))
            except (ValueError, KeyError) as exc:
                raise _keyed(f"{where(key)}: {key}={raw!r}: {exc}", key) from exc
        strict = kwargs.get("strict_config", True)
        for key in unknown:
            message = unknown_key_message(key, _PROPERTIES)
            if strict:
                raise _keyed(f"{where(key)}: {message}", key)
            log.warning("%s: %s", where(key), message)
        if extra.keys() - set(unknown):
            log.info(
                "%s: RocketMQ settings this node does not use: %s",
                source,
                ", ".join(sorted(extra.keys() - set(unknown))),
            )
        try:
            return cls(extra=extra, **kwargs)
        except ConfigError as exc:
            key = getattr(exc, "key", None)
            raise _keyed(f"{where(key)}: {exc}", key) from exc

    @classmethod
    def from_file(cls, path: str) -> BrokerConfig:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"cannot read broker config {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
        parsed = parse_properties(text, path)
        props = {c.key: c.value for c in parsed}
        return cls.from_dict(props, source=path, lines={c.key: c.lineno for c in parsed})


def _keyed(message: str, key: str | None) -> ConfigError:
    """A ConfigError that remembers which property it is about (``.key``)."""
    err = ConfigError(message)
    err.key = key  # type: ignore[attr-defined]
    return err


def _field_type(fname: str) -> type:
    default = _PROPERTIES[_FIELD_TO_PROPERTY[fname]][1]
    if isinstance(default, enum.Enum):
        return type(default)
    if isinstance(default, bool):
        return bool
    if isinstance(default, int):
        return int
    if fname.endswith("_port"):
        return int
    return str


def _convert(raw: Any, kind: type) -> Any:
    if isinstance(raw, kind) and not (kind is int and isinstance(raw, bool)):
        return raw
    text = str(raw).strip()
    if kind is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ValueError("expected true or false")
    if kind is int:
        return int(text)
    if issubclass(kind, enum.Enum):
        try:
            return kind[text.upper()]
        except KeyError:
            names = ", ".join(m.name for m in kind)
            raise ValueError(f"expected one of {names}") from None
    return text


def _is_host_port(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        return False
    host = host.strip("[]")
    if any(c.isspace() for c in host) or "/" in host:
        return False
    return True


def ha_allowed_networks(spec: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``haAllowedSlaves`` ("10.0.0.5;10.1.0.0/16") as networks; ValueError names a bad item."""
    out = []
    for item in spec.replace(",", ";").split(";"):
        if item.strip():
            try:
                out.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError:
                raise ValueError(f"{item.strip()!r} is not an IP address or network") from None
    return out


_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> list[int]:
    """``messageDelayLevel`` ("1s 5s 10s 30s 1m ...") as delays in ms; level N is index N-1."""
    levels = []
    for item in spec.split():
        unit = item[-1:]
        if unit not in _UNITS_MS or not item[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel={spec!r}: bad level {item!r} (like 5s, 1m, 2h)")
        levels.append(int(item[:-1]) * _UNITS_MS[unit])
    if not levels:
        raise ConfigError("messageDelayLevel is empty")
    return levels
