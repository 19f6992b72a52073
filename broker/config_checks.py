"""What makes a ``BrokerConfig`` valid, and the value parsers its checks share (addresses,
networks, delay levels). Each error names the RocketMQ property (``ConfigError.key``) so the
file reader can say on which line it was set. ``broker/config.py`` holds the key table and the
config object; this module knows no property but through the table it is given."""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from broker.remoting.server import exposure_refusal
from broker.remoting.tls import TlsMode
from broker.store.delay import parse_delay_levels as parse_delay_levels  # re-exported
from contracts import archive_layout as layout
from contracts.errors import ArchiveError, ConfigError
from contracts.object_store.spec import check_root

MAPPED_FILE_MAX_BYTES = (1 << 31) - 1  # RocketMQ's mapped file sizes are Java ints
NAME_MAX_CHARS = 127  # cluster, group and node names: archive path components


def name_problem(name: str) -> str | None:
    """Why a cluster, group or node name cannot be used (it becomes a store and archive path
    component), or None."""
    if len(name) > NAME_MAX_CHARS:
        return f"longer than {NAME_MAX_CHARS} characters"
    try:
        layout.check_name("name", name)
    except layout.LayoutError:
        return "must be letters, digits, '.', '_', '%' or '-', not starting with a symbol"
    return None


# fields that must be > 0 (intervals, timeouts, sizes, limits)
POSITIVE_FIELDS = (
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
    "auto_create_topic_max_per_client",
    "remoting_max_connections_per_host",
    "ha_max_connections",
    "broker_heartbeat_interval_ms",
    "controller_heartbeat_timeout_ms",
    "sync_broker_metadata_period_ms",
    "controller_lease_ms",
    "min_in_sync_replicas",
    "ha_max_time_slave_not_catchup_ms",
)


def check_config(cfg: Any, field_to_property: Mapping[str, str]) -> None:
    """Raise a keyed ConfigError for the first rule ``cfg`` (a BrokerConfig) breaks."""

    def bad(fname: str, why: str) -> ConfigError:
        key = field_to_property[fname]
        shown = repr(getattr(cfg, fname))
        if len(shown) > 80:  # a 100k-character value is named, not printed
            shown = f"{shown[:60]}...({len(shown)} characters)"
        return keyed_error(f"{key}={shown}: {why}", key)

    _check_numbers(cfg, bad)
    _check_addresses_and_features(cfg, bad)


def _check_numbers(cfg: Any, bad: Callable[[str, str], ConfigError]) -> None:
    """Ids, ports, sizes, intervals, ratios."""
    if cfg.broker_id < 0:
        raise bad("broker_id", "must be >= 0")
    if not cfg.broker_role.is_master and cfg.broker_id == 0:
        raise bad("broker_id", "a SLAVE needs brokerId > 0 (0 is the master's id)")
    if cfg.broker_role.is_master and cfg.broker_id != 0:
        raise bad("broker_id", f"a {cfg.broker_role.value} must have brokerId 0")
    for fname in ("listen_port", "ha_listen_port"):
        if not 0 <= getattr(cfg, fname) <= 65535:
            raise bad(fname, "not a TCP port")
    try:
        ipaddress.ip_address(cfg.broker_ip1)
    except ValueError:
        raise bad(
            "broker_ip1", "must be an IP address (it is written into every record's STOREHOST)"
        ) from None
    if not 4096 <= cfg.mapped_file_size_commit_log <= MAPPED_FILE_MAX_BYTES:
        raise bad("mapped_file_size_commit_log", f"must be 4096 to {MAPPED_FILE_MAX_BYTES} bytes")
    if not 20 <= cfg.mapped_file_size_consume_queue <= MAPPED_FILE_MAX_BYTES or (
        cfg.mapped_file_size_consume_queue % 20
    ):
        raise bad("mapped_file_size_consume_queue", "must be a positive multiple of 20 (< 2 GiB)")
    if cfg.listen_port and cfg.listen_port == cfg.ha_listen_port:
        raise bad("ha_listen_port", "must differ from listenPort (both would bind one port)")
    for fname in POSITIVE_FIELDS:
        if getattr(cfg, fname) <= 0:
            raise bad(fname, "must be positive")
    if cfg.remoting_max_pending_bytes < 64 * 1024:
        raise bad("remoting_max_pending_bytes", "must be at least 65536")
    if cfg.tls_mode is not TlsMode.DISABLED and not (
        cfg.tls_server_cert_path and cfg.tls_server_key_path
    ):
        raise bad("tls_mode", "needs tlsServerCertPath and tlsServerKeyPath")
    for fname in ("archive_chunk_min_bytes", "archive_chunk_max_age_ms"):
        if getattr(cfg, fname) < 0:
            raise bad(fname, "must not be negative")
    if not 0 <= cfg.archive_nice <= 19:
        raise bad("archive_nice", "must be a nice increment 0-19")
    if not 0 <= cfg.access_message_in_memory_max_ratio <= 100:
        raise bad("access_message_in_memory_max_ratio", "must be a percentage 0-100")


def _check_addresses_and_features(cfg: Any, bad: Callable[[str, str], ConfigError]) -> None:
    """Addresses, and the settings a feature (archive, ACL, delay levels) needs together."""
    _check_controller_mode(cfg, bad)
    for fname in ("namesrv_addr", "ha_master_address", "controller_addr"):
        value = getattr(cfg, fname)
        for addr in (a.strip() for a in (value or "").split(";")):
            if addr and not _is_host_port(addr):
                raise bad(fname, f"{addr!r} is not host:port (port 1-65535)")
    for fname in ("broker_cluster_name", "broker_name", "node_name"):
        problem = name_problem(getattr(cfg, fname))
        if problem is not None:
            raise bad(fname, problem)
    if cfg.archive_root:
        try:
            check_root(cfg.archive_root)
        except ArchiveError as exc:
            raise bad("archive_root", str(exc)) from None
    if cfg.archive_enable and not cfg.archive_root:
        raise keyed_error(
            "archiveEnable=true needs archiveRoot (s3://bucket/prefix or file://)",
            "archiveEnable",
        )
    try:
        parse_delay_levels(cfg.message_delay_level)
    except ConfigError as exc:
        raise keyed_error(str(exc), "messageDelayLevel") from None
    exposed = exposure_refusal("the broker", cfg.listen_host, cfg.acl_enable, cfg.insecure)
    if exposed is not None:
        raise keyed_error(f"listenHost={cfg.listen_host!r}: {exposed}", "listenHost")
    if cfg.acl_enable and not cfg.acl_file:
        raise keyed_error("aclEnable=true needs aclFile (the path of plain_acl.yml)", "aclEnable")
    if bool(cfg.access_key) != bool(cfg.secret_key):
        raise keyed_error("accessKey and secretKey go together: set both or neither", "accessKey")
    if cfg.ha_allowed_slaves:
        try:
            ha_allowed_networks(cfg.ha_allowed_slaves)
        except ValueError as exc:
            raise bad("ha_allowed_slaves", str(exc)) from None


def _check_controller_mode(cfg: Any, bad: Callable[[str, str], ConfigError]) -> None:
    if not cfg.enable_controller_mode:
        return
    if not (cfg.controller_addr or "").strip():
        raise bad("controller_addr", "enableControllerMode=true needs controllerAddr=host:port")
    if cfg.controller_lease_ms > cfg.controller_heartbeat_timeout_ms * 0.8:
        raise bad(
            "controller_lease_ms",
            f"must be at most 80% of controllerHeartBeatTimeoutMills "
            f"({cfg.controller_heartbeat_timeout_ms}): the master must stop writing before "
            "the controller may elect another",
        )
    lease_ms, beat_ms = cfg.controller_lease_ms, cfg.broker_heartbeat_interval_ms
    if lease_ms + beat_ms > cfg.controller_heartbeat_timeout_ms * 0.9:
        raise bad(
            "controller_lease_ms",
            f"plus brokerHeartbeatInterval ({beat_ms}) must be at most 90% of "
            f"controllerHeartBeatTimeoutMills ({cfg.controller_heartbeat_timeout_ms}): a "
            "controller cut off with the master may have last heard it one interval before "
            "the lease's last renewal (docs/controller.md, Leases and the Raft leader)",
        )
    if cfg.broker_election_priority < 0:
        raise bad("broker_election_priority", "must not be negative")


def keyed_error(message: str, key: str | None) -> ConfigError:
    """A ConfigError that remembers which property it is about (``.key``)."""
    err = ConfigError(message)
    err.key = key  # type: ignore[attr-defined]
    return err


def convert_value(raw: Any, kind: type) -> Any:
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
        if len(text.lstrip("+-")) > 19:  # a Java long, as RocketMQ reads it
            raise ValueError("out of range (a 64-bit integer)")
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
