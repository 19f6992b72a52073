"""VIEW_MESSAGE_BY_ID (33): ``mqadmin queryMsgById`` asks the broker that stored a message for
it by its offset msgId's commit log offset (ViewMessageRequestHeader: ``topic``, ``offset``).

RocketMQ's QueryMessageProcessor.viewMessageById answers the raw record at ``offset`` as the
body, or SYSTEM_ERROR ``can not find message by the offset, N``. It does not compare the record's
topic with the header's, so an account allowed to read one topic could read any message by its
offset; here the guard checks ``topic`` (SUB under ACL, broker/acl/permission.py) and the
handler answers only a record of that topic, so the guard saw the one resource used: a request
without ``topic``, or whose record is of another topic, is answered as not found.
"""

from __future__ import annotations

from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.message_store import MessageStore
from contracts.errors import HaproofError


class MessageViewProcessor:
    """Reads single records of ``store``'s commit log."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def handlers(self) -> dict[int, object]:
        return {RequestCode.VIEW_MESSAGE_BY_ID: self.view_by_id}

    async def view_by_id(self, conn, req: RemotingCommand) -> RemotingCommand:
        topic = req.opt_field("topic")
        raw_offset = req.opt_field("offset")
        not_found = req.make_response(
            ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {raw_offset}"
        )
        try:
            offset = int(raw_offset or "")
        except ValueError:
            return not_found
        store = self.store
        if not topic or not store.min_phy_offset <= offset < store.dispatched_offset:
            return not_found
        try:
            rec = store.commit_log.lookup(offset)
            if rec.topic != topic or rec.physical_offset != offset:
                return not_found
            data = store.commit_log.read_record(offset, rec.total_size)
        except HaproofError:
            return not_found
        return req.make_response(ResponseCode.SUCCESS, body=data)
