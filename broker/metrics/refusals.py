"""Refused requests by reason, counted where every request's answer passes: ``counted(table)``
wraps a processor table (outside the ACL guard, so its refusals count too) and reads each
response's code. Which codes are refusals, and the reason each stands for, is the table below;
SERVICE_NOT_AVAILABLE is told apart by the remark its owners write (the store's full disk, a
slave, the write gate's lease and no-role reasons). Anything else (a pull that found nothing, a
query without a hit) is an answer, not a refusal."""

from __future__ import annotations

from collections import Counter

from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Eager, Handler

REASONS: dict[int, str] = {
    ResponseCode.SYSTEM_ERROR: "system_error",
    ResponseCode.SYSTEM_BUSY: "flow_control",
    ResponseCode.FLUSH_DISK_TIMEOUT: "flush_disk_timeout",
    ResponseCode.SLAVE_NOT_AVAILABLE: "slave_not_available",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "flush_slave_timeout",
    ResponseCode.MESSAGE_ILLEGAL: "message_illegal",
    ResponseCode.SERVICE_NOT_AVAILABLE: "service_not_available",
    ResponseCode.NO_PERMISSION: "permission",
    ResponseCode.TOPIC_NOT_EXIST: "topic_not_exist",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "group_not_exist",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "not_supported",
    ResponseCode.CONTROLLER_NOT_LEADER: "controller_not_leader",
    ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH: "fenced_epoch",
    ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: "fenced_epoch",
}
# (substring of the remark, reason): the first that matches wins
REMARK_REASONS: dict[int, tuple[tuple[str, str], ...]] = {
    ResponseCode.NO_PERMISSION: (("ACL", "acl"),),
    ResponseCode.SERVICE_NOT_AVAILABLE: (
        ("disk is full", "disk_full"),
        ("lease", "lease_fence"),
        ("no role", "no_role"),
        ("slave takes no writes", "not_master"),
    ),
}


def refusal_reason(response: RemotingCommand | None) -> str | None:
    """The reason ``response`` refuses its request (None: not a refusal)."""
    if response is None or response.code not in REASONS:
        return None
    remark = response.remark or ""
    for marker, reason in REMARK_REASONS.get(response.code, ()):
        if marker in remark:
            return reason
    return REASONS[response.code]


class Refusals:
    """Counts per (request code, reason); a node process holds one."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[int, str]] = Counter()

    def count(self, request_code: int, response: RemotingCommand | None) -> None:
        reason = refusal_reason(response)
        if reason is not None:
            self.counts[(request_code, reason)] += 1

    def counted(self, processors: dict[int, Handler]) -> dict[int, Handler]:
        """The table with every handler's answer counted (an Eager handler stays eager)."""
        return {code: self._wrap(h) for code, h in processors.items()}

    def _wrap(self, handler: Handler) -> Handler:
        inner = handler.fn if type(handler) is Eager else handler

        async def counting(conn, req: RemotingCommand):
            response = await inner(conn, req)
            self.count(req.code, response)
            return response

        return Eager(counting) if type(handler) is Eager else counting
