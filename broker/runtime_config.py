"""Broker configuration changed at runtime (``haproof admin updateBrokerConfig``, RocketMQ's
UPDATE_BROKER_CONFIG 25) and shown (GET_BROKER_CONFIG 26).

Only keys that every reader looks up at use time can change on a running node; the others
(ports, paths, role, flush type, file sizes...) are read once at start, so changing them here
would lie. ``RUNTIME_KEYS`` names them with a check of their value; anything else is refused
with a message naming the key.

An accepted change is written first to the node's config file (one ``key=value`` line replaced
or appended, the rest of the file untouched; temp file, fsync, rename, fsync the directory),
then applied: the new config is assigned to the node's one ``LiveConfig`` holder, which every
part reads through (``broker/live_config.py``). A config says what was configured, never the node's current
role (``broker/store/role.py``). A node started without a config file refuses updates, since a
change that is gone after a restart would surprise the operator.

This module is the only place that knows how ``broker.config`` maps property names to fields.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Mapping
from typing import NamedTuple

from broker.config import _PROPERTIES, BrokerConfig
from broker.live_config import LiveConfig
from broker.store.checkpoint import atomic_write
from contracts.errors import ConfigError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024  # an UPDATE_BROKER_CONFIG body larger than this is refused
MAX_VALUE_CHARS = 1024


class NotRuntimeKeyError(ConfigError):
    """The key cannot be changed by an update: on the black list (``reason`` says why), a
    RocketMQ key haproof does not use, or not a key at all."""

    def __init__(self, key: str, reason: str | None = None) -> None:
        from broker.config_file import ROCKETMQ_IGNORED_KEYS, closest_key

        changeable = ", ".join(sorted(RUNTIME_KEYS))
        known = set(_PROPERTIES) | ROCKETMQ_IGNORED_KEYS
        if reason is not None:
            message = f"{key!r} cannot be changed by an update: {reason}"
        elif key in known:
            message = f"{key!r} is a RocketMQ key haproof does not use: nothing to change"
        else:
            # a typo is not a refusal: say so, and the key most likely meant
            hint = closest_key(key, sorted(known | set(RUNTIME_KEYS)))
            message = f"unknown key {key!r}" + (f"; did you mean {hint}?" if hint else "")
            message += f" (changeable at once: {changeable})"
        super().__init__(message)
        self.key = key


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _percentage(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 100:
        raise ValueError("must be a percentage 0-100")
    return value


def _boolean(raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError("must be true or false")


# property name -> parser of its text value (raises ValueError saying what is wrong)
RUNTIME_KEYS: dict[str, Callable[[str], object]] = {
    "autoCreateTopicEnable": _boolean,  # node.ensure_topic, at every send to a new topic
    "slaveReadEnable": _boolean,  # read advice, at every pull
    "accessMessageInMemoryMaxRatio": _percentage,  # read advice, at every pull
    "haSlaveFallbehindMax": _positive_int,  # HAService.slave_ok, at every SYNC_MASTER put
    "maxMessageSize": _positive_int,  # send processor and store, at every put
    "archiveChunkMinBytes": _positive_int,  # NodeArchiver._hold, at every shipping round
    "archiveChunkMaxAgeMs": _non_negative_int,  # NodeArchiver._hold, at every shipping round
}


_IDENTITY = "the node's identity or role: edit broker.conf and restart (failover: promote)"
_LISTEN = "a listen address: edit broker.conf and restart"
_STORE = "the store's location or file layout: edit broker.conf and restart"
_SECURITY = "security settings are changed in broker.conf by its owner, never over the network"
# keys an update refuses (RocketMQ's configBlackList default is "configBlackList;brokerConfigPath";
# rocketmqHome and the rest are what haproof keeps to the file's owner)
BLACKLIST: dict[str, str] = {
    "configBlackList": "RocketMQ's black list itself",
    "brokerConfigPath": "the config file's own path",
    "rocketmqHome": "the installation directory",
    **dict.fromkeys(
        "brokerClusterName brokerName brokerId brokerRole nodeName enableControllerMode".split(),
        _IDENTITY,
    ),
    **dict.fromkeys("listenPort listenHost haListenPort brokerIP1".split(), _LISTEN),
    **dict.fromkeys(
        """storePathRootDir storePathCommitLog archiveRoot mappedFileSizeCommitLog
        mappedFileSizeConsumeQueue""".split(),
        _STORE,
    ),
    **dict.fromkeys(
        """aclEnable aclFile accessKey secretKey insecure haAllowedSlaves tlsMode tlsEnable
        tlsServerCertPath tlsServerKeyPath tlsServerKeyPassword tlsServerKeyPasswordFile
        tlsClientTrustCertPath""".split(),
        _SECURITY,
    ),
}
NEXT_START = "saved; takes effect at the next start"


def parse_properties(text: str, where: str) -> dict[str, str]:
    """``key=value`` lines (RocketMQ's MixAll.string2Properties): ``#``/``!`` comments and blank
    lines skipped; ``:`` also separates. Raises ConfigError naming the line."""
    props: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        seps = [i for i in (stripped.find("="), stripped.find(":")) if i > 0]
        if not seps:
            raise ConfigError(f"{where}:{lineno}: expected key=value, got {stripped[:80]!r}")
        sep = min(seps)
        props[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return props


def check_updates(updates: Mapping[str, str]) -> dict[str, object]:
    """Each key's value: typed for a key of ``RUNTIME_KEYS`` (applied at once), the text for
    another key of the config (saved for the next start; the whole file is checked when
    written). NotRuntimeKeyError or ConfigError naming the first bad key."""
    if not updates:
        raise ConfigError("no key=value to update")
    typed: dict[str, object] = {}
    for key, raw in updates.items():
        if key in BLACKLIST:
            raise NotRuntimeKeyError(key, BLACKLIST[key])
        if key not in RUNTIME_KEYS and key not in _PROPERTIES:
            raise NotRuntimeKeyError(key)
        if len(raw) > MAX_VALUE_CHARS or "\n" in raw or "\r" in raw:
            raise ConfigError(
                f"{key}: value longer than {MAX_VALUE_CHARS} characters or not one line"
            )
        try:
            typed[key] = RUNTIME_KEYS[key](raw) if key in RUNTIME_KEYS else raw.strip()
        except ValueError as exc:
            raise ConfigError(f"{key}={raw!r}: {exc}") from exc
    return typed


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return "" if value is None else str(value)


SECRET_MARKERS = ("secret", "password", "passwd", "token", "credential")
REDACTED = "******"


def is_secret(key: str) -> bool:
    """A key whose value must never leave the node (secretKey, ...password, ...token)."""
    return any(marker in key.lower() for marker in SECRET_MARKERS)


def config_properties(config: BrokerConfig, redact: bool = False) -> dict[str, str]:
    """Every property of ``config`` by its RocketMQ name (unknown file keys included), as text;
    with ``redact`` a secret's non-empty value is replaced by ``******``."""
    props = {prop: _text(getattr(config, fname)) for prop, (fname, _d) in _PROPERTIES.items()}
    props.update({k: str(v) for k, v in config.extra.items()})
    if redact:
        props = {k: REDACTED if v and is_secret(k) else v for k, v in props.items()}
    return dict(sorted(props.items()))


def properties_text(props: Mapping[str, str]) -> str:
    """``key=value`` lines (RocketMQ's MixAll.properties2String)."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


def rewrite_config_text(text: str, typed: Mapping[str, object]) -> str:
    """``text`` with each key's last ``key=value`` line replaced (others commented out would
    be surprising: earlier duplicates are left, the last one wins when read) or appended."""
    lines = text.splitlines()
    last: dict[str, int] = {}
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        seps = [j for j in (stripped.find("="), stripped.find(":")) if j > 0]
        if seps:
            last[stripped[: min(seps)].strip()] = i
    for key, value in typed.items():
        line = f"{key}={_text(value)}"
        if key in last:
            lines[last[key]] = line
        else:
            lines.append(line)
    return "".join(f"{line}\n" for line in lines)


def _field_changes(typed: Mapping[str, object]) -> dict[str, object]:
    return {_PROPERTIES[key][0]: value for key, value in typed.items()}


class Change(NamedTuple):
    """One key's change: its text before and after; ``at_once`` False when it was only saved
    to the config file (it takes effect at the next start)."""

    before: str
    after: str
    at_once: bool


def update_node_config(
    live: LiveConfig, config_path: str | None, updates: Mapping[str, str]
) -> dict[str, Change]:
    """Validate, persist to ``config_path``, apply the runtime keys: one assignment to the
    node's ``live`` holder, which every part reads through. Other keys are only saved.

    Raises NotRuntimeKeyError / ConfigError (nothing changed) or OSError (file not written,
    nothing applied)."""
    typed = check_updates(updates)
    if not config_path:
        raise ConfigError("this node was started without a config file: a change could not persist")
    now = {k: v for k, v in typed.items() if k in RUNTIME_KEYS}
    old = live.current
    try:
        new = dataclasses.replace(old, **_field_changes(now))  # validates
    except ConfigError as exc:
        raise ConfigError(f"refused: {exc}") from exc
    with open(config_path, encoding="utf-8") as fh:
        text = fh.read()
    new_text = rewrite_config_text(text, typed)
    # the file as rewritten must pass --check-config's checks (it is what the next start reads)
    try:
        saved = BrokerConfig.from_dict(parse_properties(new_text, config_path), source=config_path)
    except ConfigError as exc:
        raise ConfigError(f"refused, {config_path} unchanged: {exc}") from exc
    atomic_write(config_path, new_text.encode("utf-8"))
    live.current = new
    before, after, later = config_properties(old), config_properties(new), config_properties(saved)
    changes = {
        k: Change(before[k], after[k], True) if k in now else Change(before[k], later[k], False)
        for k in typed
    }
    log.warning(
        "broker config updated (persisted to %s): %s",
        config_path,
        ", ".join(
            f"{k} {c.before} -> {c.after}" + ("" if c.at_once else " (at the next start)")
            for k, c in changes.items()
        ),
    )
    return changes
