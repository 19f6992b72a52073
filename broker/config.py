"""One frozen, validated configuration object per broker node, read from RocketMQ's broker.conf.

Property names are RocketMQ's (``brokerRole``, ``flushDiskType``, ``mappedFileSizeCommitLog``...);
fields are snake_case with their unit in the name. Our own keys (archive, snapshots) follow the
same style.

Strict by default: a key that is neither ours nor one of RocketMQ's broker settings this node
accepts without using (``ROCKETMQ_IGNORED_KEYS``, kept in ``extra``) is an error naming the file,
line and key, with the closest known key suggested (``brokerrole`` -> ``brokerRole``): a typo must
never silently downgrade durability. ``strictConfig=false`` turns unknown keys into a warning.

A config says what was *configured*: after a failover the node's current role, broker id and
master are in its role state (``broker/store/role.py``), not here. Validation rules and value
parsers: ``broker/config_checks.py``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.aio import EventLoop
from broker.config_checks import check_config, convert_value, keyed_error
from broker.config_checks import ha_allowed_networks as ha_allowed_networks  # re-exported
from broker.config_checks import parse_delay_levels as parse_delay_levels  # re-exported
from broker.config_file import ROCKETMQ_IGNORED_KEYS, parse_properties, unknown_key_message
from broker.metrics.exporter import MetricsExporterType, MetricsSettings, metrics_problem
from broker.remoting.tls import TlsMode
from broker.store.store_config import BrokerRole as BrokerRole  # re-exported
from broker.store.store_config import FlushDiskType as FlushDiskType  # re-exported
from contracts.errors import ConfigError

log = logging.getLogger(__name__)


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
    "autoCreateTopicMaxPerClient": ("auto_create_topic_max_per_client", 1000),
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
    "listenHost": ("listen_host", "127.0.0.1"),
    "insecure": ("insecure", False),
    "serverChannelMaxIdleTimeSeconds": ("server_channel_max_idle_time_s", 120),
    "remotingFrameReadTimeoutMs": ("remoting_frame_read_timeout_ms", 30_000),
    "remotingMaxConnections": ("remoting_max_connections", 4096),
    "remotingMaxConnectionsPerHost": ("remoting_max_connections_per_host", 1024),
    "remotingMaxPendingBytes": ("remoting_max_pending_bytes", 64 * 1024 * 1024),
    "haMaxConnections": ("ha_max_connections", 16),
    "tlsMode": ("tls_mode", TlsMode.DISABLED),
    "tlsServerCertPath": ("tls_server_cert_path", None),
    "tlsServerKeyPath": ("tls_server_key_path", None),
    "tlsServerKeyPassword": ("tls_server_key_password", None),
    "tlsServerKeyPasswordFile": ("tls_server_key_password_file", None),
    "tlsEnable": ("tls_enable", False),
    "tlsClientTrustCertPath": ("tls_client_trust_cert_path", None),
    "strictConfig": ("strict_config", True),
    "checkCRCOnRecover": ("check_crc_on_recover", True),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", True),
    "aclEnable": ("acl_enable", False),
    "aclFile": ("acl_file", None),
    "accessKey": ("access_key", None),
    "secretKey": ("secret_key", None),
    "haAllowedSlaves": ("ha_allowed_slaves", None),
    "offsetCommitThroughLog": ("offset_commit_through_log", True),
    "offsetCommitCoalesceMs": ("offset_commit_coalesce_ms", 20),
    "enableControllerMode": ("enable_controller_mode", False),
    "controllerAddr": ("controller_addr", None),
    "brokerHeartbeatInterval": ("broker_heartbeat_interval_ms", 1000),
    "controllerHeartBeatTimeoutMills": ("controller_heartbeat_timeout_ms", 10_000),
    "syncBrokerMetadataPeriod": ("sync_broker_metadata_period_ms", 5000),
    "brokerElectionPriority": ("broker_election_priority", 2**31 - 1),
    "controllerLeaseMills": ("controller_lease_ms", 8000),
    "allAckInSyncStateSet": ("all_ack_in_sync_state_set", False),
    "minInSyncReplicas": ("min_in_sync_replicas", 1),
    "haMaxTimeSlaveNotCatchup": ("ha_max_time_slave_not_catchup_ms", 15_000),
    "readUnCommitted": ("read_uncommitted", False),
    "syncFromLastFile": ("sync_from_last_file", False),
    "metricsExporterType": ("metrics_exporter_type", MetricsExporterType.DISABLE),
    "metricsPromExporterHost": ("metrics_prom_exporter_host", ""),
    "metricsPromExporterPort": ("metrics_prom_exporter_port", 5557),
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
    # topics one client address may auto-create by sending (a flood of new names is refused)
    auto_create_topic_max_per_client: int = 1000
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
    # remoting transport (broker/remoting/limits.py, tls.py): loopback unless configured; an
    # address beyond loopback needs aclEnable, or insecure=true (then a loud warning at start)
    listen_host: str = "127.0.0.1"
    insecure: bool = False
    server_channel_max_idle_time_s: int = 120
    remoting_frame_read_timeout_ms: int = 30_000
    remoting_max_connections: int = 4096
    remoting_max_connections_per_host: int = 1024  # one remote address, so it cannot take all
    remoting_max_pending_bytes: int = 64 * 1024 * 1024
    ha_max_connections: int = 16
    tls_mode: TlsMode = TlsMode.DISABLED
    tls_server_cert_path: str | None = None
    tls_server_key_path: str | None = None
    tls_server_key_password: str | None = field(default=None, repr=False)
    # the key's pass phrase in a file (first line), else $HAPROOF_TLS_KEY_PASSWORD
    tls_server_key_password_file: str | None = None
    # this node's own connections (name server, master, peers) over TLS, servers verified
    # against tlsClientTrustCertPath (else the system's trust store)
    tls_enable: bool = False
    tls_client_trust_cert_path: str | None = None
    # unknown keys in broker.conf are an error (false: a warning, the key is ignored)
    strict_config: bool = True
    # recovery checks every record's body CRC (RocketMQ's checkCRCOnRecover, default true)
    check_crc_on_recover: bool = True
    # every record ends with the property __CRC32# (a CRC of the whole record: topic and
    # properties too), checked by recovery where present (RocketMQ 5's enabledAppendPropCRC;
    # its default is false, haproof's true: a record torn inside its properties is a torn tail)
    enabled_append_prop_crc: bool = True
    # RocketMQ's plain ACL (broker/acl): aclEnable checks every request against aclFile
    # (plain_acl.yml); accessKey/secretKey are this broker's own account, used to sign what it
    # sends (registration, slave sync, the HA handshake)
    acl_enable: bool = False
    acl_file: str | None = None
    # consumer offset commits go through the commit log as records of RMQ_SYS_CONSUMER_OFFSETS
    # (broker/offset_log, DESIGN.md 3b), coalesced per (group, topic) within
    # offsetCommitCoalesceMs; false: RocketMQ's table copied by SlaveSynchronize
    offset_commit_through_log: bool = True
    offset_commit_coalesce_ms: int = 20
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    # who may connect to the HA port: IPs or networks separated by ';' or ','
    # (default: loopback only without ACL, anyone who signs the handshake with ACL)
    ha_allowed_slaves: str | None = None
    # RocketMQ 5's controller mode (docs/controller.md): the controllers at controllerAddr
    # decide this node's role and id, not brokerRole/brokerId; controllerLeaseMills (ours) is
    # the master lease, at most 80 % of controllerHeartBeatTimeoutMills
    enable_controller_mode: bool = False
    controller_addr: str | None = None
    broker_heartbeat_interval_ms: int = 1000
    controller_heartbeat_timeout_ms: int = 10_000
    sync_broker_metadata_period_ms: int = 5000
    broker_election_priority: int = 2**31 - 1  # lower wins
    controller_lease_ms: int = 8000
    # the master's SyncStateSet in controller mode (broker/ha/sync_state.py): a SYNC_MASTER put
    # waits for every member (allAckInSyncStateSet), is refused below minInSyncReplicas, and a
    # slave not caught up for haMaxTimeSlaveNotCatchup leaves the set
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup_ms: int = 15_000
    # consumers may read past the master's confirmOffset (RocketMQ's MessageStoreConfig key)
    read_uncommitted: bool = False
    # controller mode: a master serves an empty slave from the start of its last commit log
    # file, not its first byte (RocketMQ 5's key, there the slave's; here the master's): such a
    # slave lacks the history, and electing it loses what only the others hold
    sync_from_last_file: bool = False
    # RocketMQ 5's metrics keys (broker/metrics/exporter.py): PROM serves Prometheus on
    # metricsPromExporterHost (default 127.0.0.1, not RocketMQ's brokerIP1) and Port
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
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
        check_config(self, _FIELD_TO_PROPERTY)
        bad = metrics_problem(self.metrics_exporter_type, self.metrics_prom_exporter_port)
        if bad is not None:
            raise keyed_error(f"{bad[0]}: {bad[1]}", bad[0])

    @property
    def metrics(self) -> MetricsSettings:
        return MetricsSettings(
            self.metrics_exporter_type,
            self.metrics_prom_exporter_host,
            self.metrics_prom_exporter_port,
        )

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
    def controller_addrs(self) -> list[str]:
        """``controllerAddr`` split at ``;``."""
        return [a.strip() for a in (self.controller_addr or "").split(";") if a.strip()]

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
                kwargs[fname] = convert_value(raw, _field_type(fname))
            except (ValueError, KeyError) as exc:
                raise keyed_error(f"{where(key)}: {key}={raw!r}: {exc}", key) from exc
        strict = kwargs.get("strict_config", True)
        for key in unknown:
            message = unknown_key_message(key, _PROPERTIES)
            if strict:
                raise keyed_error(f"{where(key)}: {message}", key)
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
            raise keyed_error(f"{where(key)}: {exc}", key) from exc

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
