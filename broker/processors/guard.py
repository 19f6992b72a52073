"""The one place every request passes before its handler: the ACL check (when ``aclEnable``)
and the name check. ``guarded(processors, ...)`` wraps a processor table; the broker and the
name server build their RemotingServer from the wrapped table.

A refused request is answered NO_PERMISSION (ACL, reserved topic) or SYSTEM_ERROR (a bad name)
and nothing else happens: no handler runs, nothing touches the disk or a table.
"""

from __future__ import annotations

from broker.acl.permission import AclChecker
from broker.processors.names import name_refusal, send_refusal
from broker.processors.send_header import SEND_CODES
from broker.remoting.codes import ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Eager, Handler


def peer_host(peer: str) -> str:
    """'10.0.0.1:5555' -> '10.0.0.1' (also for '::1:5555')."""
    return peer.rpartition(":")[0] or peer


def refusal(
    conn, req: RemotingCommand, acl: AclChecker | None, check_names: bool
) -> RemotingCommand | None:
    if acl is not None:
        reason = acl.refusal(req, peer_host(conn.peer))
        if reason is not None:
            acl.log_refusal(conn.peer, req, reason)
            return req.make_response(ResponseCode.NO_PERMISSION, remark=f"ACL: {reason}")
    if check_names:
        bad = name_refusal(req)
        if bad is not None:
            return req.make_response(bad[0], remark=bad[1])
    return None


def _wrap(handler: Handler, acl: AclChecker | None, check_names: bool, code: int) -> Handler:
    inner = handler.fn if type(handler) is Eager else handler
    if acl is None and check_names and code in SEND_CODES:
        return _wrap_send(handler, inner)

    async def checked(conn, req: RemotingCommand):
        refused = refusal(conn, req, acl, check_names)
        if refused is not None:
            return refused
        return await inner(conn, req)

    # the check is synchronous, so an Eager handler stays eager (no wait before its own)
    return Eager(checked) if type(handler) is Eager else checked


def guarded(
    processors: dict[int, Handler], acl: AclChecker | None = None, check_names: bool = True
) -> dict[int, Handler]:
    """The processor table with every handler behind the checks."""
    return {code: _wrap(h, acl, check_names, code) for code, h in processors.items()}


def _wrap_send(handler: Handler, inner: Handler) -> Handler:
    """The send path without ACL: the header is parsed once (send_header.py, kept on the
    request for the handler) and its topic's verdict is one dict lookup (names.py)."""

    async def checked(conn, req: RemotingCommand):
        bad = send_refusal(req)
        if bad is not None:
            return req.make_response(bad[0], remark=bad[1])
        return await inner(conn, req)

    return Eager(checked) if type(handler) is Eager else checked
