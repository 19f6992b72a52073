"""The name server's settings as mqadmin sees them (RocketMQ's NamesrvConfig):
GET_NAMESRV_CONFIG (319) answers them as ``key=value`` lines, UPDATE_NAMESRV_CONFIG (318)
changes the ones haproof's name server reads at use time, both admin-only under ACL.

The settings are what the name server was started with: ``--host``/``--listen-port`` and the
connection options, then namesrv.conf's keys (``-c``). ``RUNTIME_KEYS`` may change while it
runs: ``scanNotActiveBrokerInterval`` (the expiry scan's period, read between rounds). Another
key haproof's name server knows is refused as "cannot be changed at runtime"; a key it does not
know is "unknown key; did you mean ...". An accepted change is written to namesrv.conf first
(the ``key=value`` line replaced or appended; temp file, fsync, rename), then applied; a name
server started without ``-c`` refuses updates (a change gone at the next start would surprise).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

from broker.config_file import closest_key
from broker.loop_service import Periodic
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.runtime_config import (
    MAX_BODY_BYTES,
    REDACTED,
    is_secret,
    parse_properties,
    properties_text,
    rewrite_config_text,
)
from broker.store.checkpoint import atomic_write
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

SCAN_KEY = "scanNotActiveBrokerInterval"


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


RUNTIME_KEYS: dict[str, Callable[[str], int]] = {SCAN_KEY: _positive_int}
# the rest of what the name server reads (fixed once it runs); RocketMQ's NamesrvConfig keys
# it accepts without using are listed with the controller's (broker/controller/cli.py)
STATIC_KEYS = frozenset(
    "listenHost listenPort serverChannelMaxIdleTimeSeconds enableControllerInNamesrv "
    "metricsExporterType metricsPromExporterHost metricsPromExporterPort configStorePath "
    "rocketmqHome kvConfigPath orderMessageEnable clusterTest productEnvName "
    "returnOrderTopicConfigToBroker".split()
)


def check_namesrv_updates(updates: Mapping[str, str]) -> dict[str, int]:
    """Typed values; ConfigError naming the first bad key (unknown, static or a bad value)."""
    if not updates:
        raise ConfigError("no key=value to update")
    typed = {}
    for key, raw in updates.items():
        if key not in RUNTIME_KEYS:
            changeable = ", ".join(sorted(RUNTIME_KEYS))
            if key in STATIC_KEYS:
                raise ConfigError(
                    f"{key!r} cannot be changed at runtime (changeable: {changeable})"
                )
            hint = closest_key(key, sorted(STATIC_KEYS | set(RUNTIME_KEYS)))
            raise ConfigError(
                f"unknown key {key!r}"
                + (f"; did you mean {hint}?" if hint else "")
                + f" (changeable at runtime: {changeable})"
            )
        try:
            typed[key] = RUNTIME_KEYS[key](raw)
        except ValueError as exc:
            raise ConfigError(f"{key}={raw!r}: {exc}") from exc
    return typed


def scan_interval_of(values: Mapping[str, str], where: str) -> int | None:
    """``scanNotActiveBrokerInterval`` from namesrv.conf's values (None: not set)."""
    if SCAN_KEY not in values:
        return None
    try:
        return _positive_int(values[SCAN_KEY])
    except ValueError as exc:
        raise ConfigError(f"{where}: {SCAN_KEY}={values[SCAN_KEY]!r}: {exc}") from exc


def namesrv_conf_values(path: str) -> dict[str, str]:
    """namesrv.conf's ``key=value`` pairs (the last of a key wins)."""
    from pathlib import Path

    from broker.config_file import parse_properties as parse_lines

    try:
        return {line.key: line.value for line in parse_lines(Path(path).read_text(), path)}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the name server config: {exc}") from exc


class NamesrvConfigService:
    """Answers 318 and 319 over ``values`` (the settings as text); an update sets the scan
    loop's period."""

    def __init__(
        self, values: dict[str, str], scanner: Periodic, config_path: str | None = None
    ) -> None:
        self.values = values
        self.scanner = scanner
        self.config_path = config_path

    def handlers(self) -> dict:
        return {
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
        }

    async def get_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        shown = {k: REDACTED if is_secret(k) else v for k, v in sorted(self.values.items())}
        body = properties_text(shown).encode("utf-8")
        return req.make_response(ResponseCode.SUCCESS, body=body)

    async def update_config(self, conn, req: RemotingCommand) -> RemotingCommand:
        where = f"UPDATE_NAMESRV_CONFIG from {conn.peer}"
        if not req.body or len(req.body) > MAX_BODY_BYTES:
            remark = f"{where}: a body of 1 to {MAX_BODY_BYTES} bytes of key=value lines"
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        try:
            updates = parse_properties(req.body.decode("utf-8", errors="strict"), where)
            changes = self.update(updates)
        except (ConfigError, UnicodeDecodeError) as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except OSError as exc:
            log.error("%s: namesrv.conf not written: %s", where, exc)
            remark = f"namesrv.conf not written, nothing changed: {exc}"
            return req.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)
        body = {k: {"from": a, "to": b} for k, (a, b) in changes.items()}
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    def update(self, updates: Mapping[str, str]) -> dict[str, tuple[str, str]]:
        """Check, persist, apply; ``{key: (old, new)}``. ConfigError or OSError: nothing
        changed."""
        typed = check_namesrv_updates(updates)
        if not self.config_path:
            raise ConfigError(
                "this name server was started without -c namesrv.conf: a change could not persist"
            )
        with open(self.config_path, encoding="utf-8") as fh:
            text = fh.read()
        atomic_write(self.config_path, rewrite_config_text(text, typed).encode("utf-8"))
        changes = {k: (self.values.get(k, ""), str(v)) for k, v in typed.items()}
        for key, value in typed.items():
            self.values[key] = str(value)
        self.scanner.period_ms = typed.get(SCAN_KEY, self.scanner.period_ms)
        log.warning(
            "name server config updated at runtime (persisted to %s): %s",
            self.config_path,
            ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changes.items()),
        )
        return changes
