"""Whether this node takes writes now, apart from its role: closed for named reasons (a node in
controller mode before the controller gave it a role; a master whose lease ended). The send
path refuses while any reason holds (SERVICE_NOT_AVAILABLE, so producers retry elsewhere), and
so do offset commits (``offset_commit_refusal``): a commit is a write too."""

from __future__ import annotations

from broker.store.role import BrokerRoleState


class WriteGate:
    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def close(self, key: str, reason: str) -> None:
        self._reasons[key] = reason

    def open(self, key: str) -> None:
        self._reasons.pop(key, None)

    def restate(self, key: str, reason: str) -> None:
        """Word ``key``'s refusal as what is true now (the facts behind it changed while it
        holds: a fenced master that is a slave now); an open key stays open."""
        if key in self._reasons:
            self._reasons[key] = reason

    @property
    def refusal(self) -> str | None:
        """Why writes are refused now; None: they are not (by this gate)."""
        return next(iter(self._reasons.values()), None)


def offset_commit_refusal(
    gate: WriteGate | None, role: BrokerRoleState, through_log: bool
) -> str | None:
    """Why an offset commit (UPDATE_CONSUMER_OFFSET, a pull's commit) is refused now, answered
    SERVICE_NOT_AVAILABLE as a send is; None: taken. The gate's reason first (a fenced master,
    a node without a role); then, with commits through the log (``through_log``), a node that
    is not the master: its table holds what its log holds, so a commit it took would be
    acknowledged without being replicated (a failover takes it back). RocketMQ's slave takes
    commits into its own table (ConsumerManageProcessor has no role check): with the log off,
    so does haproof's (OffsetPreOnline takes them back to the master, broker/ha/offset_sync.py)."""
    if gate is not None and gate.refusal is not None:
        return gate.refusal
    if through_log and not role.role.is_master:
        return "a slave takes no offset commits (offsetCommitThroughLog): commit on the master"
    return None
