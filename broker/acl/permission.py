"""Who may do what: RocketMQ's PlainAccessValidator.parse (which topics and groups a request
names, and how) and PlainPermissionManager.validate (whitelists, signature, admin, PUB/SUB).

``request_resources(req)`` is also what the name check (broker/processors/names.py) validates,
so every name a request carries is looked at once, before any handler runs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from broker.acl.accounts import ANY, DENY, PUB, SUB, Account, PlainAcl, group_resource
from broker.acl.replay import ReplayGuard
from broker.acl.signing import (
    ACCESS_KEY,
    REMOTING_PURPOSE,
    SIGN_NONCE,
    SIGN_TIMESTAMP,
    SIGNATURE_VERSION,
    V2,
    signature_matches,
    signature_v2_matches,
)
from broker.clock import SYSTEM_CLOCK
from broker.processors.group_body import group_body
from broker.processors.send_header import SEND_CODES, SendHeaderError, send_header
from broker.remoting.codes import RequestCode as R
from broker.remoting.command import RemotingCommand
from contracts.errors import ConfigError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)

# Requests only an admin account may make (RocketMQ's Permission.ADMIN_CODE, plus what haproof
# adds: offset resets, promotion, the broker-to-broker config dumps and registration).
ADMIN_CODES = frozenset(
    {
        R.UPDATE_AND_CREATE_TOPIC,
        25,  # UPDATE_BROKER_CONFIG
        R.GET_BROKER_CONFIG,  # the whole broker.conf: paths, addresses, limits
        R.UPDATE_NAMESRV_CONFIG,
        R.GET_NAMESRV_CONFIG,  # the name server's settings, as GET_BROKER_CONFIG
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.DELETE_SUBSCRIPTIONGROUP,
        R.DELETE_TOPIC_IN_BROKER,
        R.DELETE_TOPIC_IN_NAMESRV,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        R.NOTIFY_BROKER_ROLE_CHANGED,
        R.EXCHANGE_BROKER_HA_INFO,
        R.GET_ALL_TOPIC_CONFIG,
        R.GET_ALL_CONSUMER_OFFSET,
        R.GET_ALL_DELAY_OFFSET,
        R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        R.REGISTER_BROKER,
        R.UNREGISTER_BROKER,
        R.PUT_KV_CONFIG,
        R.DELETE_KV_CONFIG,
    }
)
MAX_LOGGED_REFUSALS = 1024  # distinct (peer host, reason) pairs logged; then silence


@dataclass(frozen=True)
class Resource:
    kind: str  # "topic" or "group"
    name: str
    perm: int  # what the request needs: PUB, SUB or ANY
    source: str  # where the name came from: a header field, or "body"


def _fields(req: RemotingCommand, kind: str, perm: int, *names: str) -> list[Resource]:
    out = []
    for name in names:
        value = req.ext_fields.get(name)
        if value is not None:
            out.append(Resource(kind, value, perm, name))
    return out


def _heartbeat(req: RemotingCommand) -> list[Resource]:
    try:
        doc = loads_fastjson(req.body)
        out = []
        for data in doc.get("consumerDataSet") or []:
            out.append(Resource("group", str(data["groupName"]), SUB, "body"))
            for sub in data.get("subscriptionDataSet") or []:
                out.append(Resource("topic", str(sub["topic"]), SUB, "body"))
        return out
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return []  # the handler refuses a body that is not HeartbeatData


def request_resources(req: RemotingCommand) -> list[Resource]:
    """The topics and groups ``req`` names and the permission each needs."""
    code = req.code
    if code in SEND_CODES:
        try:
            header = send_header(req)  # the same parse the handler uses (send_header.py)
        except SendHeaderError:
            return []  # refused by the name check: MESSAGE_ILLEGAL
        return [Resource("topic", header.topic, PUB, header.topic_field)]
    if code == R.CONSUMER_SEND_MSG_BACK:
        return _fields(req, "topic", PUB, "originTopic") + _fields(req, "group", SUB, "group")
    if code in (R.PULL_MESSAGE, R.QUERY_CONSUMER_OFFSET, R.UPDATE_CONSUMER_OFFSET):
        return _fields(req, "topic", SUB, "topic") + _fields(req, "group", SUB, "consumerGroup")
    if code in (R.QUERY_MESSAGE, R.VIEW_MESSAGE_BY_ID):
        return _fields(req, "topic", SUB, "topic")
    if code == R.HEART_BEAT:
        return _heartbeat(req)
    if code in (R.GET_CONSUMER_CONNECTION_LIST, R.GET_CONSUMER_RUNNING_INFO):
        return _fields(req, "group", SUB, "consumerGroup")
    if code in (R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP):
        return [r for r in _fields(req, "group", SUB, "consumerGroup") if r.name]
    if code in (R.GET_MAX_OFFSET, R.GET_MIN_OFFSET, R.SEARCH_OFFSET_BY_TIMESTAMP):
        return _fields(req, "topic", ANY, "topic")
    if code in (R.GET_EARLIEST_MSG_STORETIME, R.GET_TOPIC_STATS_INFO, R.QUERY_TOPIC_CONSUME_BY_WHO):
        return _fields(req, "topic", ANY, "topic")
    if code == R.INVOKE_BROKER_TO_RESET_OFFSET:
        return _fields(req, "topic", SUB, "topic") + _fields(req, "group", SUB, "group")
    if code == R.GET_CONSUME_STATS:
        topics = [r for r in _fields(req, "topic", SUB, "topic") if r.name]
        return topics + _fields(req, "group", SUB, "consumerGroup")
    if code in (R.UPDATE_AND_CREATE_TOPIC, R.DELETE_TOPIC_IN_BROKER, R.DELETE_TOPIC_IN_NAMESRV):
        return _fields(req, "topic", PUB, "topic")
    if code == R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        body = group_body(req)  # the same parse the handler uses (group_body.py)
        return [] if body is None else [Resource("group", body["groupName"], SUB, "body")]
    if code == R.DELETE_SUBSCRIPTIONGROUP:
        return _fields(req, "group", SUB, "groupName")
    return []


def check_permission(needed: int, owned: int) -> bool:
    """RocketMQ Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


class AclChecker:
    """``refusal(req, host)``: None when ``req`` from ``host`` may run, else why not (one line,
    no secret in it). Made with ``from_file``, it re-reads plain_acl.yml when the file changes
    (looked at every ``RELOAD_CHECK_MS``), as RocketMQ watches it; a changed file that does not
    parse is logged and the accounts in force stay."""

    RELOAD_CHECK_MS = 1000

    def __init__(self, acl: PlainAcl, admin_codes: frozenset[int] = ADMIN_CODES) -> None:
        self.acl = acl
        self.admin_codes = admin_codes
        self._logged: set[tuple[str, str]] = set()
        self._path: str | None = None
        self._mtime_ns = 0
        self._next_check = 0.0
        self._reload_check_s = self.RELOAD_CHECK_MS / 1000
        self.replay = ReplayGuard()

    @classmethod
    def from_file(cls, path: str, reload_check_ms: int = RELOAD_CHECK_MS) -> AclChecker:
        checker = cls(PlainAcl.from_file(path))
        checker._path = path
        checker._mtime_ns = _mtime_ns(path)
        checker._reload_check_s = reload_check_ms / 1000
        checker._next_check = SYSTEM_CLOCK.monotonic_ms() / 1000 + checker._reload_check_s
        return checker

    def _maybe_reload(self) -> None:
        now = SYSTEM_CLOCK.monotonic_ms() / 1000
        if self._path is None or now < self._next_check:
            return
        self._next_check = now + self._reload_check_s
        mtime = _mtime_ns(self._path)
        if mtime == self._mtime_ns:
            return
        self._mtime_ns = mtime
        try:
            self.acl = PlainAcl.from_file(self._path)
        except ConfigError as exc:
            log.error(
                "ACL: %s changed but cannot be used (the previous accounts stay): %s",
                self._path,
                exc,
            )
            return
        log.warning("ACL: reloaded %s (%d accounts)", self._path, len(self.acl.accounts))

    def refusal(self, req: RemotingCommand, host: str) -> str | None:
        self._maybe_reload()
        if self.acl.globally_white(host):
            return None
        ak = req.ext_fields.get(ACCESS_KEY)
        if not ak:
            return "the request is not signed (no AccessKey)"
        account = self.acl.accounts.get(ak)
        if account is None:
            return f"no ACL account for accessKey {ak[:64]!r}"
        white = account.white_remote_address
        if white is not None and white.matches(host):
            return None
        problem = self._signature_refusal(req, account)
        if problem is not None:
            return problem
        if req.code in self.admin_codes and not account.admin:
            return f"request code {req.code} needs an admin account; {ak!r} is not one"
        return self._resource_refusal(req, account)

    def _signature_refusal(self, req: RemotingCommand, account: Account) -> str | None:
        """Scheme 2 (bound to the code, every field and the body; once, within the window), or
        RocketMQ's scheme for RocketMQ's clients: only when the file allows it
        (``legacySignatures``, default true) and never for an admin request code."""
        f, ak = req.ext_fields, account.access_key
        if f.get(SIGNATURE_VERSION) == V2:
            if not signature_v2_matches(
                REMOTING_PURPOSE, req.code, f, req.body, account.secret_key
            ):
                return f"signature mismatch for accessKey {ak!r}"
            return self.replay.refusal(ak, f.get(SIGN_TIMESTAMP), f.get(SIGN_NONCE))
        if not self.acl.legacy_signatures:
            return (
                "RocketMQ-scheme signatures are off (legacySignatures: false); sign with scheme 2"
            )
        if req.code in self.admin_codes:
            return f"request code {req.code} needs a request-bound signature (scheme 2)"
        if not signature_matches(f, req.body, account.secret_key):
            return f"signature mismatch for accessKey {ak!r}"
        return None

    def _resource_refusal(self, req: RemotingCommand, account: Account) -> str | None:
        if account.admin and not account.resource_perms:
            return None  # RocketMQ: an admin without any perm list may do everything
        for res in request_resources(req):
            key = group_resource(res.name) if res.kind == "group" else res.name
            owned = account.resource_perms.get(key)
            if owned is None:
                owned = (
                    account.default_group_perm
                    if res.kind == "group"
                    else (account.default_topic_perm)
                )
            if not check_permission(res.perm, owned):
                return f"{account.access_key!r} has no {_perm_name(res.perm)} on {res.kind} {res.name[:130]!r}"
        return None

    def log_refusal(self, peer: str, req: RemotingCommand, reason: str) -> None:
        """Log a refusal once per (peer host, reason): a flood of bad requests is one line."""
        host = peer.rpartition(":")[0] or peer
        key = (host, reason)
        if key in self._logged or len(self._logged) >= MAX_LOGGED_REFUSALS:
            return
        self._logged.add(key)
        log.warning("ACL: refused request code %d from %s: %s", req.code, peer, reason)


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1  # gone: keep what is loaded, reload when it is back


def _perm_name(perm: int) -> str:
    return {PUB: "PUB", SUB: "SUB", ANY: "PUB or SUB"}.get(perm, str(perm))
