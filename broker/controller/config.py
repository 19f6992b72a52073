"""The controller's settings (RocketMQ's ControllerConfig key names), read from
``controller.conf`` (standalone) or from the name server's config file
(``enableControllerInNamesrv=true``). Strict: an unknown key is an error naming the line.

``controllerType``: ``journal`` (default: one controller, its events in an fsynced journal
under ``controllerStorePath``) or ``jRaft`` (a group on PySyncObj's Raft, with RocketMQ's JRaft
keys: ``jRaftInitConf`` the Raft addresses ``host:port,host:port,...``, ``jRaftServerId`` this
controller's Raft address, ``jRaftControllerRPCAddr`` the remoting addresses in the same order).

``jRaftLeaderFallbackTimeoutMs`` (haproof's own key; PySyncObj's ``leaderFallbackTimeout``,
whose default is 30 s): a Raft leader that heard from no majority for this long steps down.
0 (the default) is half of ``jRaftElectionTimeoutMs``. It must be at least two of the leader's
append periods (one lost ping does not depose it) and below ``jRaftElectionTimeoutMs``: a leader
cut off from the majority stops leading before the majority can elect another (a follower waits
at least the election timeout after the last ping it heard). While it leads it vouches for the
masters' leases (``isLeader`` in its heartbeat answers, ``broker/controller/processor.py``): see
docs/controller.md, "Leases and the Raft leader".

``brokerHeartbeatTimeoutMaxMs`` (haproof's own key, default 10,000 ms as RocketMQ's brokers'
timeout): the longest ``controllerHeartBeatTimeoutMills`` a broker may use. A controller that
starts, or begins to lead, holds a master it has not heard from as possibly leased this long;
a heartbeat with a longer timeout is refused, naming this key (its lease could outlast that).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from broker.config_file import closest_key, parse_properties
from broker.metrics.exporter import MetricsSettings
from contracts.errors import ConfigError

_TYPES = ("journal", "jRaft")
_BOOL = {"true": True, "false": False}


@dataclass
class ControllerConfig:
    listenHost: str = "127.0.0.1"
    listenPort: int = 9878  # RocketMQ's quick start standalone controller
    controllerType: str = "journal"
    controllerStorePath: str = str(Path.home() / "haproof-controller")
    enableElectUncleanMaster: bool = False
    notifyBrokerRoleChanged: bool = True
    scanNotActiveBrokerInterval: int = 5_000  # ms
    scanInactiveMasterInterval: int = 5_000  # ms
    snapshotEveryEvents: int = 1_000  # journal: a snapshot after this many events
    jRaftGroupId: str = "jRaft-Controller"
    jRaftServerId: str = ""
    jRaftInitConf: str = ""
    jRaftControllerRPCAddr: str = ""
    jRaftElectionTimeoutMs: int = 1_000
    jRaftLeaderFallbackTimeoutMs: int = 0  # 0: half of jRaftElectionTimeoutMs
    # haproof's own: the longest heartbeatTimeoutMills a broker may heartbeat with (its
    # controllerHeartBeatTimeoutMills); a master this controller has not heard from since it
    # started or began to lead may hold a lease this long (broker/controller/heartbeat.py)
    brokerHeartbeatTimeoutMaxMs: int = 10_000  # RocketMQ's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
    # the controller's records shipped to the archive (broker/controller/archiver.py); the
    # same key names as a broker's archive keys
    archiveEnable: bool = False
    archiveRoot: str = ""  # s3://bucket/prefix or file:///path
    archiveIntervalMs: int = 1_000
    archiveS3Endpoint: str = ""  # default: HAPROOF_S3_ENDPOINT, else AWS's
    archiveS3Region: str = ""
    # RocketMQ 5's metrics keys (broker/metrics/exporter.py): PROM serves Prometheus (standalone)
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = ""
    metricsPromExporterPort: int = 5557
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def raft_peers(self) -> list[str]:
        return [p.strip() for p in self.jRaftInitConf.split(",") if p.strip()]

    @property
    def rpc_addrs(self) -> list[str]:
        return [p.strip() for p in self.jRaftControllerRPCAddr.split(",") if p.strip()]

    def rpc_addr_of(self, raft_addr: str | None) -> str | None:
        """The remoting address of the controller whose Raft address is ``raft_addr``."""
        peers, rpcs = self.raft_peers, self.rpc_addrs
        if raft_addr in peers and len(rpcs) == len(peers):
            return rpcs[peers.index(raft_addr)]
        return None

    @property
    def append_period_ms(self) -> float:
        """The Raft leader's ping period (PySyncObj's ``appendEntriesPeriod``)."""
        return min(100.0, self.jRaftElectionTimeoutMs / 5)

    @property
    def leader_fallback_ms(self) -> int:
        """How long a leader may go on leading without hearing from a majority: PySyncObj's
        ``leaderFallbackTimeout`` (jRaft); 0 for the journal's single controller, which leads
        alone and has no majority to lose."""
        if self.controllerType != "jRaft":
            return 0
        return self.jRaftLeaderFallbackTimeoutMs or self.jRaftElectionTimeoutMs // 2

    def metrics_settings(self, where: str) -> MetricsSettings:
        from broker.metrics.exporter import settings_from_properties

        values = {
            "metricsExporterType": self.metricsExporterType,
            "metricsPromExporterHost": self.metricsPromExporterHost,
            "metricsPromExporterPort": str(self.metricsPromExporterPort),
        }
        return settings_from_properties(values, where)

    def check(self, where: str) -> None:
        if self.controllerType not in _TYPES:
            raise ConfigError(
                f"{where}: controllerType {self.controllerType!r} is not one of {', '.join(_TYPES)}"
            )
        if not 0 < self.listenPort < 65536:
            raise ConfigError(f"{where}: listenPort {self.listenPort} is not a TCP port")
        scans = {
            "scanNotActiveBrokerInterval": self.scanNotActiveBrokerInterval,
            "scanInactiveMasterInterval": self.scanInactiveMasterInterval,
        }
        for name, value in scans.items():
            if value <= 0:
                raise ConfigError(f"{where}: {name} must be > 0 ms")
        from broker.controller.heartbeat import HEARTBEAT_TIMEOUT_RANGE_MS

        low, high = HEARTBEAT_TIMEOUT_RANGE_MS
        if not low <= self.brokerHeartbeatTimeoutMaxMs <= high:
            raise ConfigError(
                f"{where}: brokerHeartbeatTimeoutMaxMs {self.brokerHeartbeatTimeoutMaxMs} is "
                f"outside [{low}, {high}] ms"
            )
        if self.archiveEnable and not self.archiveRoot:
            raise ConfigError(
                f"{where}: archiveEnable=true needs archiveRoot (s3://... or file://...)"
            )
        self.metrics_settings(where)
        if self.archiveIntervalMs <= 0:
            raise ConfigError(f"{where}: archiveIntervalMs must be > 0 ms")
        if self.controllerType == "jRaft":
            peers = self.raft_peers
            if self.jRaftServerId not in peers:
                raise ConfigError(
                    f"{where}: jRaftServerId {self.jRaftServerId!r} is not one of "
                    f"jRaftInitConf {peers}"
                )
            if len(self.rpc_addrs) != len(peers):
                raise ConfigError(
                    f"{where}: jRaftControllerRPCAddr needs one remoting address "
                    f"per jRaftInitConf peer ({len(peers)})"
                )
            self._check_fallback(where)

    def _check_fallback(self, where: str) -> None:
        fallback, election = self.leader_fallback_ms, self.jRaftElectionTimeoutMs
        low = 2 * self.append_period_ms
        if self.jRaftLeaderFallbackTimeoutMs < 0 or not low <= fallback < election:
            raise ConfigError(
                f"{where}: jRaftLeaderFallbackTimeoutMs {fallback} must be at least {low:.0f} "
                f"(two Raft pings) and below jRaftElectionTimeoutMs {election}: a leader cut "
                "off from the majority must stop vouching for master leases before another "
                "can be elected"
            )


_KEYS = {f.name: f for f in fields(ControllerConfig) if f.name != "extra"}


def apply_setting(cfg: ControllerConfig, key: str, value: str, where: str) -> None:
    f = _KEYS[key]
    default = f.default
    if isinstance(default, bool):
        if value.lower() not in _BOOL:
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
        setattr(cfg, key, _BOOL[value.lower()])
    elif isinstance(default, int):
        try:
            setattr(cfg, key, int(value))
        except ValueError as exc:
            raise ConfigError(f"{where}: {key} must be an integer, got {value!r}") from exc
    else:
        setattr(cfg, f.name, value)


def is_controller_key(key: str) -> bool:
    return key in _KEYS


def load_controller_config(path: str, ignored: frozenset[str] = frozenset()) -> ControllerConfig:
    """``ignored``: keys another part of the file owns (the name server's, when embedded)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the controller config: {exc}") from exc
    cfg = ControllerConfig()
    for line in parse_properties(text, path):
        where = f"{path}:{line.lineno}"
        if line.key in ignored:
            continue
        if line.key not in _KEYS:
            hint = closest_key(line.key, _KEYS)
            raise ConfigError(
                f"{where}: unknown controller key {line.key!r}"
                + (f"; did you mean {hint}?" if hint else "")
            )
        apply_setting(cfg, line.key, line.value, where)
    cfg.check(path)
    return cfg
