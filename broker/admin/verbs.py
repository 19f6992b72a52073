"""``haproof admin``'s verbs: one table (mqadmin's names), in the order ``--help`` lists them.
broker/admin/cli.py builds a parser from each row; the controller's verbs are
controller_verbs.py's table."""

from __future__ import annotations

from broker.admin import (
    broker_config,
    cluster,
    connections,
    controller_verbs,
    groups,
    ha,
    messages,
    msg_by_id,
    msg_by_key,
    namesrv_config,
    offsets,
    stats_all,
    topics,
    write_perm,
)
from broker.admin.verb_spec import Verb, arg, namesrv_verb, verb

# -- options more than one verb takes -------------------------------------------------------------

NODES_OF_GROUP = arg(
    "--broker-name", default=None, help="with --namesrv: only this broker group's nodes"
)
SPANNING_GROUP = arg(
    "--broker-name", default=None, help="with --namesrv, when the topic spans groups"
)
TOPIC = arg("--topic", required=True)
T_TOPIC = arg("-t", "--topic", required=True)
GROUP = arg("--group", required=True)
CONSUMER_GROUP = arg("-g", "--group", required=True, help="consumer group name")
CLUSTER_MASTERS = arg(
    "-c", "--cluster", default=None, help="every master of this cluster (with -n)"
)
COUNT = arg("-c", "--count", type=int, default=128, help="at most this many (128)")

CLUSTER = (
    namesrv_verb(
        "clusterList",
        "every broker the name servers know, with runtime figures",
        cluster.run_cluster_list,
    ),
    namesrv_verb(
        "topicRoute",
        "a topic's route: broker groups, nodes, queues",
        cluster.run_topic_route,
        TOPIC,
    ),
    namesrv_verb(
        "topicStatus",
        "per queue min/max offset and last store time of a topic",
        cluster.run_topic_status,
        TOPIC,
    ),
    verb(
        "brokerStatus",
        "a node's runtime table (GET_BROKER_RUNTIME_INFO)",
        cluster.run_broker_status,
        NODES_OF_GROUP,
    ),
)

CONFIG = (
    verb(
        "getBrokerConfig",
        "a node's running configuration",
        broker_config.run_get_broker_config,
        NODES_OF_GROUP,
    ),
    verb(
        "updateBrokerConfig",
        "change a runtime-changeable key, persisted to each node's config file",
        broker_config.run_update_broker_config,
        NODES_OF_GROUP,
        arg("--key", required=True, help="RocketMQ property name, e.g. maxMessageSize"),
        arg("--value", required=True),
    ),
    namesrv_verb(
        "getNamesrvConfig", "every name server's settings", namesrv_config.run_get_namesrv_config
    ),
    namesrv_verb(
        "updateNamesrvConfig",
        "change a runtime-changeable name server key, persisted to each namesrv.conf",
        namesrv_config.run_update_namesrv_config,
        arg("-k", "--key", required=True, help="e.g. scanNotActiveBrokerInterval"),
        arg("-v", "--value", required=True),
    ),
)

HA = (
    verb(
        "haStatus",
        "replication state of a group's nodes",
        ha.run_ha_status,
        arg("--broker-name", default=None, help="with --namesrv: the group whose nodes to ask"),
    ),
    verb(
        "promote",
        "make a node the group's master under a new epoch",
        ha.run_promote,
        arg("--broker-name", required=True),
        arg("--node", required=True, help="the node's stable name (nodeName)"),
        arg(
            "--role",
            default="SYNC_MASTER",
            choices=["SYNC_MASTER", "ASYNC_MASTER"],
            help="the new master's role (default SYNC_MASTER)",
        ),
        arg(
            "--unclean",
            action="store_true",
            help="promote even a node behind another reachable one (RocketMQ's "
            "enableElectUncleanMaster): what only the others hold is lost",
        ),
    ),
)

OFFSETS = (
    verb(
        "consumerProgress",
        "per queue broker/consumer offsets of a group",
        offsets.run_consumer_progress,
        GROUP,
        arg("--topic", default=None, help="only this topic"),
    ),
    verb(
        "resetOffset",
        "move a group's committed offset (recorded)",
        offsets.run_reset_offset,
        SPANNING_GROUP,
        GROUP,
        TOPIC,
        arg("--queue", type=int, required=True),
        arg("--offset", type=int, required=True),
    ),
    verb(
        "resetOffsetByTime",
        "move a group's committed offsets to the first message stored at or after a "
        "time (recorded)",
        offsets.run_reset_offset_by_time,
        SPANNING_GROUP,
        GROUP,
        TOPIC,
        arg(
            "--timestamp",
            required=True,
            help="ms since the epoch, now, ISO 8601 (UTC unless a zone is given) or "
            "yyyy-MM-dd#HH:mm:ss:SSS (UTC)",
        ),
        arg("--queue", type=int, default=None, help="only this queue (default: all)"),
        arg(
            "--no-force",
            action="store_true",
            help="only rewind: leave a queue whose offset is already before the time",
        ),
    ),
    namesrv_verb(
        "statsAll",
        "per topic and consumer group: accumulation, in/out TPS, messages in/out over a day",
        stats_all.run_stats_all,
        arg("-t", "--topic", default=None, help="only this topic"),
        arg("-a", "--active", action="store_true", help="only topics with traffic in the last day"),
    ),
    verb(
        "brokerConsumeStats",
        "every group's per queue offsets and lag on one broker",
        offsets.run_broker_consume_stats,
    ),
)

TOPICS = (
    namesrv_verb(
        "topicList", "every topic of the cluster's masters, one per line", topics.run_topic_list
    ),
    namesrv_verb(
        "topicClusterList",
        "the clusters holding a topic, one per line",
        topics.run_topic_cluster_list,
        T_TOPIC,
    ),
    verb(
        "updateTopic",
        "create or update a topic on a broker or every master of a cluster",
        topics.run_update_topic,
        T_TOPIC,
        CLUSTER_MASTERS,
        arg("-r", "--read-queue-nums", type=int, default=8),
        arg("-w", "--write-queue-nums", type=int, default=8),
        arg("-p", "--perm", type=int, default=6, help="2 W, 4 R, 6 RW (default 6)"),
        arg("-o", "--order", action="store_true", help="an ordered topic"),
    ),
    namesrv_verb(
        "deleteTopic",
        "delete a topic from every master of a cluster, then from the name servers' routes",
        topics.run_delete_topic,
        T_TOPIC,
        arg("-c", "--cluster", required=True, help="every master of this cluster"),
    ),
)

_B = groups.parse_bool
GROUPS = (
    verb(
        "updateSubGroup",
        "create or update a consumer group's config on a broker or every master of a cluster",
        groups.run_update_sub_group,
        CONSUMER_GROUP,
        CLUSTER_MASTERS,
        arg("-s", "--consume-enable", type=_B, default=None),
        arg("-m", "--consume-from-min-enable", type=_B, default=None),
        arg("-d", "--consume-broadcast-enable", type=_B, default=None),
        arg("-o", "--consume-message-orderly", type=_B, default=None),
        arg("-q", "--retry-queue-nums", type=int, default=None),
        arg("-r", "--retry-max-times", type=int, default=None),
        arg("-i", "--broker-id", type=int, default=None),
        arg("-w", "--which-broker-when-consume-slowly", type=int, default=None),
        arg("-a", "--notify-consumer-ids-changed", type=_B, default=None),
    ),
    verb(
        "deleteSubGroup",
        "delete a consumer group's config (offsets stay); with -c also its retry and DLQ topics",
        groups.run_delete_sub_group,
        CONSUMER_GROUP,
        CLUSTER_MASTERS,
    ),
)

CONNECTIONS = (
    verb(
        "consumerConnection",
        "the clients of a consumer group connected to the masters (or to -b)",
        connections.run_consumer_connection,
        CONSUMER_GROUP,
    ),
    verb(
        "producerConnection",
        "the clients of a producer group connected to the masters (or to -b)",
        connections.run_producer_connection,
        arg("-g", "--group", required=True, help="producer group name"),
    ),
    verb(
        "consumerStatus",
        "each connected client's running info (subscriptions, queues, offsets), via its broker",
        connections.run_consumer_status,
        CONSUMER_GROUP,
        arg("-i", "--client-id", default=None, help="only this client, in full"),
    ),
    *(
        namesrv_verb(name, what, write_perm.run(name), arg("-b", "--broker-name", required=True))
        for name, what in (
            ("wipeWritePerm", "turn a broker group's write permission off in the name servers"),
            ("addWritePerm", "turn a broker group's write permission back on in the name servers"),
        )
    ),
)

MESSAGES = (
    namesrv_verb(
        "queryMsgByOffset",
        "the message at a queue offset (from its master)",
        messages.run_query_msg_by_offset,
        T_TOPIC,
        arg("-b", "--broker-name", required=True),
        arg("-i", "--queue", type=int, required=True, help="queue id"),
        arg("-o", "--offset", type=int, required=True, help="queue offset"),
    ),
    namesrv_verb(
        "queryMsgById",
        "a message by its offset msgId (OffsetID), from the broker that stored it",
        msg_by_id.run_query_msg_by_id,
        T_TOPIC,
        arg("-i", "--msg-id", required=True, help="the offset msgId (OffsetID)"),
    ),
    namesrv_verb(
        "queryMsgByKey",
        "the newest messages of a topic carrying a key (KEYS or UNIQ_KEY)",
        msg_by_key.run_query_msg_by_key,
        T_TOPIC,
        arg("-k", "--key", required=True, help="a message key (KEYS) or UNIQ_KEY"),
        arg("-b", "--begin", default=None, help="stored at or after (ms or a time)"),
        arg("-e", "--end", default=None, help="stored at or before (ms or a time)"),
        arg("-c", "--max-num", type=int, default=32, help="at most this many (32)"),
    ),
    namesrv_verb(
        "printMsg",
        "print a topic's messages, every queue from its min offset",
        messages.run_print_msg,
        T_TOPIC,
        COUNT,
    ),
    namesrv_verb(
        "consumeMessage",
        "read messages from a queue offset, committing nothing",
        messages.run_print_msg,
        T_TOPIC,
        COUNT,
        arg("-b", "--broker-name", default=None, help="only this group"),
        arg("-i", "--queue", type=int, default=None, help="only this queue"),
        arg(
            "-o",
            "--offset",
            type=int,
            default=None,
            help="from this queue offset (default: each queue's min)",
        ),
    ),
    namesrv_verb(
        "sendMessage",
        "send one message",
        messages.run_send_message,
        T_TOPIC,
        arg("-p", "--body", required=True, help="the message body (UTF-8 text)"),
        arg("-k", "--keys", default=None),
        arg("-c", "--tags", default=None),
    ),
)

VERBS: tuple[Verb, ...] = (
    *CLUSTER,
    *CONFIG,
    *HA,
    *OFFSETS,
    *controller_verbs.VERBS,
    *TOPICS,
    *GROUPS,
    *CONNECTIONS,
    *MESSAGES,
)
