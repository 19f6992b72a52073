"""plain_acl.yml, RocketMQ's plain ACL file (4.4+), read into frozen accounts::

    globalWhiteRemoteAddresses:      # requests from these addresses skip every check
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # at least 6 characters, like the secret key
        secretKey: 12345678
        whiteRemoteAddress: 192.168.0.*   # this account's requests from here skip the check
        admin: false                 # admin requests (create topic, reset offset...) need true
        defaultTopicPerm: DENY       # for topics not in topicPerms (default DENY)
        defaultGroupPerm: SUB        # for groups not in groupPerms (default DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]
    legacySignatures: true           # accept RocketMQ clients' signatures (see below)

Permissions are RocketMQ's bits: DENY 1, ANY 2, PUB 4, SUB 8 (``PUB|SUB`` = 12). Address
patterns: ``*`` (or empty for "none"), an exact IPv4/IPv6 address, IPv4 with ``*`` in trailing
parts (``10.1.*.*``), a range ``a-b`` or a list ``{a,b}`` in the last part (``10.1.1.1-5``,
``10.1.1.{3,8}``), or a CIDR network (``10.0.0.0/8``). A group's permission is kept under its
retry topic ``%RETRY%{group}``, as RocketMQ does. Anything else in the file is an error naming
the account and the key: exit 2 at start, never a half-read file. Keys holding the example's
``CHANGE-ME`` placeholder are refused.

haproof's own clients sign with the request-bound scheme 2 (broker/acl/signing.py); RocketMQ's
clients sign values only, with no time or nonce (a captured request can be replayed):
``legacySignatures: false`` refuses those, and they never authorise an admin request code.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

import yaml

from contracts.errors import ConfigError

DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"DENY": DENY, "ANY": ANY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB}
_PERMS["SUB|PUB"] = PUB | SUB
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
MAX_FILE_CHARS = 4 * 1024 * 1024  # a plain_acl.yml larger than this is not one
PLACEHOLDER = "CHANGE-ME"  # deploy/plain_acl.example.yml's keys: never loaded as they are
KEY_MIN_LENGTH = 6  # RocketMQ PlainPermissionManager: keys shorter than this are refused
_ACCOUNT_KEYS = {
    "accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
    "defaultGroupPerm", "topicPerms", "groupPerms",
}  # fmt: skip


def parse_perm(text: str | None, where: str) -> int:
    """'PUB', 'SUB', 'PUB|SUB', 'DENY', 'ANY' -> bits; None/empty -> DENY (RocketMQ's default)."""
    if text is None or str(text).strip() == "":
        return DENY
    perm = _PERMS.get(str(text).strip().upper().replace(" ", ""))
    if perm is None:
        raise ConfigError(f"{where}: permission {text!r} is not DENY, PUB, SUB or PUB|SUB")
    return perm


def group_resource(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


class AddressPattern:
    """One whitelist entry (see the module doc); ``matches(host)`` for a peer's IP."""

    _PART = re.compile(r"^(\*|\d{1,3}|\d{1,3}-\d{1,3}|\{\d{1,3}(,\d{1,3})*\})$")

    def __init__(self, text: str, where: str) -> None:
        self.text = text.strip()
        self._any = self.text in ("*", "*.*.*.*")
        self._net = None
        self._parts: list[str] | None = None
        if self._any:
            return
        try:
            self._net = ipaddress.ip_network(self.text, strict=False)
            return
        except ValueError:
            pass
        parts = self.text.split(".")
        if len(parts) != 4 or not all(self._PART.match(p) for p in parts):
            raise ConfigError(f"{where}: {self.text!r} is not an address pattern")
        self._parts = parts

    def matches(self, host: str) -> bool:
        if self._any:
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        if self._net is not None:
            return addr in self._net
        if addr.version != 4 or self._parts is None:
            return False
        octets = str(addr).split(".")
        return all(_part_matches(p, int(o)) for p, o in zip(self._parts, octets, strict=True))


def _part_matches(pattern: str, octet: int) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("{"):
        return octet in {int(x) for x in pattern[1:-1].split(",")}
    if "-" in pattern:
        low, high = (int(x) for x in pattern.split("-"))
        return low <= octet <= high
    return int(pattern) == octet


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    white_remote_address: AddressPattern | None = None
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    # topic -> perm; groups under their retry topic name (%RETRY%group)
    resource_perms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PlainAcl:
    accounts: dict[str, Account]
    global_white_addresses: tuple[AddressPattern, ...] = ()
    source: str = "<plain_acl.yml>"
    # RocketMQ-scheme signatures (RocketMQ's own clients) for non-admin requests; replayable
    legacy_signatures: bool = True

    @classmethod
    def from_file(cls, path: str) -> PlainAcl:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"cannot read ACL file {path}: {exc.strerror}") from exc
        return cls.from_text(text, path)

    @classmethod
    def from_text(cls, text: str, source: str = "<plain_acl.yml>") -> PlainAcl:
        if len(text) > MAX_FILE_CHARS:
            raise ConfigError(f"{source}: {len(text)} characters, more than {MAX_FILE_CHARS}")
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not YAML: {exc}") from exc
        except RecursionError as exc:
            raise ConfigError(f"{source}: nested too deeply to be an ACL file") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: expected a mapping at the top")
        whites = tuple(
            AddressPattern(str(a), f"{source}: globalWhiteRemoteAddresses")
            for a in _as_list(doc.get("globalWhiteRemoteAddresses"), source)
            if str(a).strip()
        )
        accounts: dict[str, Account] = {}
        for i, raw in enumerate(_as_list(doc.get("accounts"), source)):
            acc = _account(raw, f"{source}: accounts[{i}]")
            if acc.access_key in accounts:
                raise ConfigError(f"{source}: accounts[{i}]: accessKey {acc.access_key!r} twice")
            accounts[acc.access_key] = acc
        legacy = doc.get("legacySignatures", True)
        if not isinstance(legacy, bool):
            raise ConfigError(f"{source}: legacySignatures must be true or false, got {legacy!r}")
        return cls(accounts, whites, source, legacy)

    def globally_white(self, host: str) -> bool:
        return any(p.matches(host) for p in self.global_white_addresses)


def _as_list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _account(raw, where: str) -> Account:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(raw) - _ACCOUNT_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}")
    ak, sk = str(raw.get("accessKey") or ""), str(raw.get("secretKey") or "")
    if len(ak) < KEY_MIN_LENGTH or len(sk) < KEY_MIN_LENGTH:
        raise ConfigError(
            f"{where}: accessKey and secretKey must be at least {KEY_MIN_LENGTH} characters"
        )
    if PLACEHOLDER in ak.upper() or PLACEHOLDER in sk.upper():
        raise ConfigError(
            f"{where}: accessKey/secretKey still hold the example's {PLACEHOLDER} placeholder: "
            "set real keys"
        )
    where = f"{where} ({ak})"
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{where}: admin must be true or false, got {admin!r}")
    white = raw.get("whiteRemoteAddress")
    perms: dict[str, int] = {}
    for key, prefix in (("topicPerms", ""), ("groupPerms", RETRY_GROUP_TOPIC_PREFIX)):
        for entry in _as_list(raw.get(key), f"{where}: {key}"):
            name, sep, perm = str(entry).partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"{where}: {key} entry {entry!r} is not name=PERM")
            perms[prefix + name.strip()] = parse_perm(perm, f"{where}: {key} {name.strip()}")
    return Account(
        access_key=ak,
        secret_key=sk,
        admin=admin,
        white_remote_address=(
            AddressPattern(str(white), f"{where}: whiteRemoteAddress")
            if white not in (None, "")
            else None
        ),
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm"), f"{where}: defaultTopicPerm"),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm"), f"{where}: defaultGroupPerm"),
        resource_perms=perms,
    )
