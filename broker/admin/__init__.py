"""``haproof admin VERB``: operate a running cluster, with mqadmin's verb names. Every verb
prints a table by default and JSON with ``--json``.

| verb | module | request codes |
|---|---|---|
| clusterList, topicRoute, topicStatus, brokerStatus | cluster.py | 106, 105, 202, 28 |
| getBrokerConfig, updateBrokerConfig | broker_config.py | 26, 25 |
| haStatus, promote | ha.py | 907, 1007/1008 |
| consumerProgress, resetOffset, resetOffsetByTime | offsets.py | 208, 222 |
| topicList, topicClusterList, updateTopic, deleteTopic | topics.py | 21, 105/106, 17, 215/216 |
| updateSubGroup, deleteSubGroup | groups.py | 200, 207 (+ 215/216) |
| queryMsgById | msg_by_id.py | 33 |
| consumerConnection | connections.py | 203 |
| wipeWritePerm, addWritePerm | write_perm.py | 205, 327 |
| getSyncStateSet, getControllerMetaData, electMaster, cleanBrokerMetadata | controller_verbs.py | 1006, 1005, 1002, 1011 |

Exit codes: 0 done, 1 a broker or name server could not be reached or refused, 2 bad usage.
"""

from broker.admin.cli import register_cli
from broker.admin.common import AdminError
from broker.admin.ha import ha_status
from broker.admin.offsets import consumer_progress, reset_offset, reset_offset_by_time

__all__ = [
    "AdminError",
    "consumer_progress",
    "ha_status",
    "register_cli",
    "reset_offset",
    "reset_offset_by_time",
]
