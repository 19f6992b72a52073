"""``haproof admin``'s argument parsers: one ``add_verb`` helper builds every verb's common
options (targets, ``--json``) and its exit-code epilog."""

from __future__ import annotations

import argparse

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
from broker.admin.common import EXIT_CODES, signed


def add_verb(
    sub, name: str, help_text: str, func, targets: str = "both"
) -> argparse.ArgumentParser:
    """A verb's parser with ``--namesrv`` / ``--broker-addr`` (as ``targets`` says: "both",
    "namesrv"), ``--json`` and the exit codes in its epilog."""
    q = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument(
        "-n",
        "--namesrv",
        default=None,
        help="name server address(es) host:port, ';'-separated (default: "
        "$NAMESRV_ADDR unless -b is given, as mqadmin)",
    )
    if targets == "both":
        q.add_argument(
            "-b", "--broker-addr", default=None, help="broker address(es) host:port, ';'-separated"
        )
    q.add_argument("--json", action="store_true", help="JSON output instead of a table")
    q.add_argument(
        "--access-key",
        default=None,
        help="ACL account to sign with (default: $HAPROOF_ACCESS_KEY); its secret key comes "
        "from $HAPROOF_SECRET_KEY or --secret-key-file",
    )
    q.add_argument("--secret-key-file", default=None, help="file holding the secret key")
    q.set_defaults(func=signed(name, func))
    return q


def _group_option(q: argparse.ArgumentParser, help_text: str = "only this broker group") -> None:
    q.add_argument("--broker-name", default=None, help=help_text)


def _cluster_verbs(sub) -> None:
    add_verb(
        sub,
        "clusterList",
        "every broker the name servers know, with runtime figures",
        cluster.run_cluster_list,
        targets="namesrv",
    )
    q = add_verb(
        sub,
        "topicRoute",
        "a topic's route: broker groups, nodes, queues",
        cluster.run_topic_route,
        targets="namesrv",
    )
    q.add_argument("--topic", required=True)
    q = add_verb(
        sub,
        "topicStatus",
        "per queue min/max offset and last store time of a topic",
        cluster.run_topic_status,
        targets="namesrv",
    )
    q.add_argument("--topic", required=True)
    q = add_verb(
        sub,
        "brokerStatus",
        "a node's runtime table (GET_BROKER_RUNTIME_INFO)",
        cluster.run_broker_status,
    )
    _group_option(q, "with --namesrv: only this broker group's nodes")


def _config_verbs(sub) -> None:
    q = add_verb(
        sub,
        "getBrokerConfig",
        "a node's running configuration",
        broker_config.run_get_broker_config,
    )
    _group_option(q, "with --namesrv: only this broker group's nodes")
    q = add_verb(
        sub,
        "updateBrokerConfig",
        "change a runtime-changeable key, persisted to each node's config file",
        broker_config.run_update_broker_config,
    )
    _group_option(q, "with --namesrv: only this broker group's nodes")
    q.add_argument("--key", required=True, help="RocketMQ property name, e.g. maxMessageSize")
    q.add_argument("--value", required=True)
    add_verb(
        sub,
        "getNamesrvConfig",
        "every name server's settings",
        namesrv_config.run_get_namesrv_config,
        targets="namesrv",
    )
    q = add_verb(
        sub,
        "updateNamesrvConfig",
        "change a runtime-changeable name server key, persisted to each namesrv.conf",
        namesrv_config.run_update_namesrv_config,
        targets="namesrv",
    )
    q.add_argument("-k", "--key", required=True, help="e.g. scanNotActiveBrokerInterval")
    q.add_argument("-v", "--value", required=True)


def _ha_verbs(sub) -> None:
    q = add_verb(sub, "haStatus", "replication state of a group's nodes", ha.run_ha_status)
    _group_option(q, "with --namesrv: the group whose nodes to ask")
    q = add_verb(sub, "promote", "make a node the group's master under a new epoch", ha.run_promote)
    q.add_argument("--broker-name", required=True)
    q.add_argument("--node", required=True, help="the node's stable name (nodeName)")
    q.add_argument(
        "--role",
        default="SYNC_MASTER",
        choices=["SYNC_MASTER", "ASYNC_MASTER"],
        help="the new master's role (default SYNC_MASTER)",
    )
    q.add_argument(
        "--unclean",
        action="store_true",
        help="promote even a node behind another reachable one (RocketMQ's "
        "enableElectUncleanMaster): what only the others hold is lost",
    )


def _offset_verbs(sub) -> None:
    q = add_verb(
        sub,
        "consumerProgress",
        "per queue broker/consumer offsets of a group",
        offsets.run_consumer_progress,
    )
    q.add_argument("--group", required=True)
    q.add_argument("--topic", default=None, help="only this topic")
    q = add_verb(
        sub, "resetOffset", "move a group's committed offset (recorded)", offsets.run_reset_offset
    )
    _group_option(q, "with --namesrv, when the topic spans groups")
    q.add_argument("--group", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--queue", type=int, required=True)
    q.add_argument("--offset", type=int, required=True)
    q = add_verb(
        sub,
        "resetOffsetByTime",
        "move a group's committed offsets to the first message stored at or after a "
        "time (recorded)",
        offsets.run_reset_offset_by_time,
    )
    _group_option(q, "with --namesrv, when the topic spans groups")
    q.add_argument("--group", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument(
        "--timestamp",
        required=True,
        help="ms since the epoch, now, ISO 8601 (UTC unless a zone is given) or "
        "yyyy-MM-dd#HH:mm:ss:SSS (UTC)",
    )
    q.add_argument("--queue", type=int, default=None, help="only this queue (default: all)")
    q.add_argument(
        "--no-force",
        action="store_true",
        help="only rewind: leave a queue whose offset is already before the time",
    )
    q = add_verb(
        sub,
        "statsAll",
        "per topic and consumer group: accumulation, in/out TPS, messages in/out over a day",
        stats_all.run_stats_all,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", default=None, help="only this topic")
    q.add_argument(
        "-a", "--active", action="store_true", help="only topics with traffic in the last day"
    )
    add_verb(
        sub,
        "brokerConsumeStats",
        "every group's per queue offsets and lag on one broker",
        offsets.run_broker_consume_stats,
    )


def _topic_verbs(sub) -> None:
    add_verb(
        sub,
        "topicList",
        "every topic of the cluster's masters, one per line",
        topics.run_topic_list,
        targets="namesrv",
    )
    q = add_verb(
        sub,
        "topicClusterList",
        "the clusters holding a topic, one per line",
        topics.run_topic_cluster_list,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", required=True)
    q = add_verb(
        sub,
        "updateTopic",
        "create or update a topic on a broker or every master of a cluster",
        topics.run_update_topic,
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-c", "--cluster", default=None, help="every master of this cluster (with -n)")
    q.add_argument("-r", "--read-queue-nums", type=int, default=8)
    q.add_argument("-w", "--write-queue-nums", type=int, default=8)
    q.add_argument("-p", "--perm", type=int, default=6, help="2 W, 4 R, 6 RW (default 6)")
    q.add_argument("-o", "--order", action="store_true", help="an ordered topic")
    q = add_verb(
        sub,
        "deleteTopic",
        "delete a topic from every master of a cluster, then from the name servers' routes",
        topics.run_delete_topic,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-c", "--cluster", required=True, help="every master of this cluster")


def _group_verbs(sub) -> None:
    q = add_verb(
        sub,
        "updateSubGroup",
        "create or update a consumer group's config on a broker or every master of a cluster",
        groups.run_update_sub_group,
    )
    q.add_argument("-g", "--group", required=True, help="consumer group name")
    q.add_argument("-c", "--cluster", default=None, help="every master of this cluster (with -n)")
    b = groups.parse_bool
    for short, long, kind in (
        ("-s", "--consume-enable", b),
        ("-m", "--consume-from-min-enable", b),
        ("-d", "--consume-broadcast-enable", b),
        ("-o", "--consume-message-orderly", b),
        ("-q", "--retry-queue-nums", int),
        ("-r", "--retry-max-times", int),
        ("-i", "--broker-id", int),
        ("-w", "--which-broker-when-consume-slowly", int),
        ("-a", "--notify-consumer-ids-changed", b),
    ):
        q.add_argument(short, long, type=kind, default=None)
    q = add_verb(
        sub,
        "deleteSubGroup",
        "delete a consumer group's config (offsets stay); with -c also its retry and DLQ topics",
        groups.run_delete_sub_group,
    )
    q.add_argument("-g", "--group", required=True, help="consumer group name")
    q.add_argument("-c", "--cluster", default=None, help="every master of this cluster (with -n)")


def _connection_verbs(sub) -> None:
    q = add_verb(
        sub,
        "consumerConnection",
        "the clients of a consumer group connected to the masters (or to -b)",
        connections.run_consumer_connection,
    )
    q.add_argument("-g", "--group", required=True, help="consumer group name")
    q = add_verb(
        sub,
        "producerConnection",
        "the clients of a producer group connected to the masters (or to -b)",
        connections.run_producer_connection,
    )
    q.add_argument("-g", "--group", required=True, help="producer group name")
    q = add_verb(
        sub,
        "consumerStatus",
        "each connected client's running info (subscriptions, queues, offsets), via its broker",
        connections.run_consumer_status,
    )
    q.add_argument("-g", "--group", required=True, help="consumer group name")
    q.add_argument("-i", "--client-id", default=None, help="only this client, in full")
    for verb, what in (
        ("wipeWritePerm", "turn a broker group's write permission off in the name servers"),
        ("addWritePerm", "turn a broker group's write permission back on in the name servers"),
    ):
        q = add_verb(sub, verb, what, write_perm.run(verb), targets="namesrv")
        q.add_argument("-b", "--broker-name", required=True)


def _message_verbs(sub) -> None:
    q = add_verb(
        sub,
        "queryMsgByOffset",
        "the message at a queue offset (from its master)",
        messages.run_query_msg_by_offset,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-b", "--broker-name", required=True)
    q.add_argument("-i", "--queue", type=int, required=True, help="queue id")
    q.add_argument("-o", "--offset", type=int, required=True, help="queue offset")
    q = add_verb(
        sub,
        "queryMsgById",
        "a message by its offset msgId (OffsetID), from the broker that stored it",
        msg_by_id.run_query_msg_by_id,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-i", "--msg-id", required=True, help="the offset msgId (OffsetID)")
    q = add_verb(
        sub,
        "queryMsgByKey",
        "the newest messages of a topic carrying a key (KEYS or UNIQ_KEY)",
        msg_by_key.run_query_msg_by_key,
        targets="namesrv",
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-k", "--key", required=True, help="a message key (KEYS) or UNIQ_KEY")
    q.add_argument("-b", "--begin", default=None, help="stored at or after (ms or a time)")
    q.add_argument("-e", "--end", default=None, help="stored at or before (ms or a time)")
    q.add_argument("-c", "--max-num", type=int, default=32, help="at most this many (32)")
    for verb, what in (
        ("printMsg", "print a topic's messages, every queue from its min offset"),
        ("consumeMessage", "read messages from a queue offset, committing nothing"),
    ):
        q = add_verb(sub, verb, what, messages.run_print_msg, targets="namesrv")
        q.add_argument("-t", "--topic", required=True)
        q.add_argument("-c", "--count", type=int, default=128, help="at most this many (128)")
        if verb == "consumeMessage":
            q.add_argument("-b", "--broker-name", default=None, help="only this group")
            q.add_argument("-i", "--queue", type=int, default=None, help="only this queue")
            q.add_argument(
                "-o",
                "--offset",
                type=int,
                default=None,
                help="from this queue offset (default: each queue's min)",
            )
    q = add_verb(
        sub, "sendMessage", "send one message", messages.run_send_message, targets="namesrv"
    )
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("-p", "--body", required=True, help="the message body (UTF-8 text)")
    q.add_argument("-k", "--keys", default=None)
    q.add_argument("-c", "--tags", default=None)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "admin",
        help="mqadmin's verbs on a running cluster (clusterList, haStatus, ...)",
        description="Operate a running cluster; every verb prints a table, or JSON with --json.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="admin_command", metavar="VERB")
    _cluster_verbs(sub)
    _config_verbs(sub)
    _ha_verbs(sub)
    _offset_verbs(sub)
    controller_verbs.register_verbs(sub, add_verb)
    _topic_verbs(sub)
    _group_verbs(sub)
    _connection_verbs(sub)
    _message_verbs(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
