"""UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) and DELETE_SUBSCRIPTIONGROUP (207): an
administrator (``mqadmin updateSubGroup`` / ``deleteSubGroup``) creates, replaces or removes a
consumer group's config on a broker.

RocketMQ's rules (AdminBrokerProcessor.updateAndCreateSubscriptionGroup, deleteSubscriptionGroup):

- 200's body is SubscriptionGroupConfig's JSON (parsed by group_body.py, the parse the guard
  checked); a body that is not one, or an invalid group name, is INVALID_PARAMETER. The config
  replaces any existing one; fields it leaves out take SubscriptionGroupConfig's defaults.
- 207's header is ``groupName`` and ``cleanOffset`` (default false). Deleting a group the broker
  does not hold is a success. ``cleanOffset=true`` (ConsumerOffsetManager.removeOffset) is
  refused here: committed offsets are what the audit reads, and ``resetOffset`` is the one way
  to move them (docs/operations.md).
- As for topics (topics.py), a SLAVE refuses both: its table is its master's copy
  (SlaveSynchronize). Groups are not in the name servers' routes, so nothing is registered.

Under ACL both need an admin account (broker/acl/permission.py ADMIN_CODES).
"""

from __future__ import annotations

from broker.processors.group_body import group_body
from broker.processors.names import group_problem
from broker.processors.topics import refuse_on_slave
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.store.role import BrokerRoleState
from broker.store.subscription_groups import SubscriptionGroupManager, subscription_group_config


class SubscriptionGroupAdminProcessor:
    """Writes ``groups`` while ``role`` is a master's."""

    def __init__(self, groups: SubscriptionGroupManager, role: BrokerRoleState) -> None:
        self.groups = groups
        self.role = role

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete,
        }

    async def update_and_create(self, conn, req: RemotingCommand) -> RemotingCommand:
        refusal = refuse_on_slave(self.role, req)
        if refusal is not None:
            return refusal
        body = group_body(req)
        if body is None:
            return req.make_response(
                ResponseCode.INVALID_PARAMETER,
                remark="the body is not a SubscriptionGroupConfig (JSON with a groupName)",
            )
        group = body["groupName"]
        problem = group_problem(group)
        if problem is not None:
            return req.make_response(ResponseCode.INVALID_PARAMETER, remark=problem)
        config = {**subscription_group_config(group), **body}
        self.groups.put(group, config)
        return req.make_response(ResponseCode.SUCCESS)

    async def delete(self, conn, req: RemotingCommand) -> RemotingCommand:
        refusal = refuse_on_slave(self.role, req)
        if refusal is not None:
            return refusal
        group = req.field("groupName")
        if (req.opt_field("cleanOffset") or "false").lower() == "true":
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark="cleanOffset is not supported: committed offsets stay (resetOffset moves "
                "them)",
            )
        self.groups.delete(group)
        return req.make_response(ResponseCode.SUCCESS)
