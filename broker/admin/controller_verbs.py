"""``haproof admin`` verbs on the controller (mqadmin's names and output shapes):
getSyncStateSet (1006), getControllerMetaData (1005), electMaster (1002, designated) and
cleanBrokerMetadata (1011); getBrokerEpoch asks the brokers themselves (1007).
``--controller-addr`` (mqadmin's ``-a``) names one or more
controllers (';'-separated); writes and reads go to the group's leader, found through 1005."""

from __future__ import annotations

import asyncio
import json

from broker.admin.broker_epoch import run_get_broker_epoch
from broker.admin.common import AdminError, UsageError, addrs, new_client
from broker.admin.verb_spec import arg, namesrv_verb
from broker.remoting.codes import RequestCode as Q
from broker.remoting.codes import ResponseCode as RC
from broker.remoting.command import RemotingCommand
from contracts.errors import RemotingError

TIMEOUT_MS = 5_000


async def _invoke(client, addr: str, code: int, fields: dict, body=None) -> RemotingCommand:
    raw = b"" if body is None else json.dumps(body).encode()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields, raw), TIMEOUT_MS)
    except RemotingError as exc:
        raise AdminError(f"controller {addr}: unreachable: {exc}") from exc


async def _leader(client, controllers: list[str]) -> str:
    """The leader's address: the first controller that says it leads, or names the leader."""
    problems = []
    for addr in controllers:
        try:
            resp = await _invoke(client, addr, Q.CONTROLLER_GET_METADATA_INFO, {})
        except AdminError as exc:
            problems.append(str(exc))
            continue
        if resp.ext_fields.get("isLeader") == "true":
            return addr
        leader = resp.ext_fields.get("controllerLeaderAddress")
        if leader:
            return leader
    raise AdminError(
        "no controller leader found" + (f": {'; '.join(problems)}" if problems else "")
    )


async def _ask(controllers: list[str], code: int, fields: dict, body=None) -> RemotingCommand:
    client = new_client()
    try:
        leader = await _leader(client, controllers)
        resp = await _invoke(client, leader, code, fields, body)
    finally:
        await client.close()
    if resp.code != RC.SUCCESS:
        raise AdminError(
            f"controller {leader}: {resp.remark or 'code ' + str(resp.code)} (code {resp.code})"
        )
    return resp


def _controllers(args) -> list[str]:
    found = addrs(args.controller_addr)
    if not found:
        raise UsageError("give --controller-addr host:port[;host:port...]")
    return found


def run_get_controller_metadata(args) -> int:
    client = new_client()

    async def go():
        try:
            return await _invoke(client, _controllers(args)[0], Q.CONTROLLER_GET_METADATA_INFO, {})
        finally:
            await client.close()

    h = asyncio.run(go()).ext_fields
    if args.json:
        print(json.dumps(h, sort_keys=True))
        return 0
    print(f"#ControllerGroup\t{h.get('group')}")
    print(f"#ControllerLeaderId\t{h.get('controllerLeaderId')}")
    print(f"#ControllerLeaderAddress\t{h.get('controllerLeaderAddress')}")
    for peer in (h.get("peers") or "").split(";"):
        if peer:
            print(f"#Peer:\t{peer}")
    return 0


def run_get_sync_state_set(args) -> int:
    names = [n for n in (args.broker_name or "").split(",") if n]
    if not names:
        raise UsageError("give --broker-name NAME[,NAME...]")
    resp = asyncio.run(_ask(_controllers(args), Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, names))
    table = json.loads(resp.body)["replicasInfoTable"]
    if args.json:
        print(json.dumps(table, sort_keys=True))
        return 0
    for name, info in sorted(table.items()):
        print(
            f"#brokerName\t{name}\n#MasterBrokerId\t{info['masterBrokerId']}\n"
            f"#MasterAddr\t{info['masterAddress']}\n#MasterEpoch\t{info['masterEpoch']}\n"
            f"#SyncStateSetEpoch\t{info['syncStateSetEpoch']}\n"
            f"#SyncStateSetNums\t{len(info['inSyncReplicas'])}"
        )
        for kind, rows in (
            ("InSyncReplica", "inSyncReplicas"),
            ("NotInSyncReplica", "notInSyncReplicas"),
        ):
            for r in info[rows]:
                print(
                    f"{kind}:\tbrokerId={r['brokerId']} brokerAddress={r['brokerAddress']} "
                    f"alive={str(r['alive']).lower()}"
                )
    missing = sorted(set(names) - set(table))
    if missing:
        raise AdminError(f"the controller knows no broker set {', '.join(missing)}")
    return 0


def run_elect_master(args) -> int:
    fields = {
        "clusterName": args.cluster_name,
        "brokerName": args.broker_name,
        "brokerId": args.broker_id,
        "designateElect": True,
    }
    resp = asyncio.run(_ask(_controllers(args), Q.CONTROLLER_ELECT_MASTER, fields))
    h, body = resp.ext_fields, json.loads(resp.body) if resp.body else {}
    if args.json:
        print(json.dumps({"header": h, "body": body}, sort_keys=True))
        return 0
    print(
        f"#ClusterName\t{args.cluster_name}\n#BrokerName\t{args.broker_name}\n"
        f"#BrokerMasterAddr\t{h.get('masterAddress')}\n#MasterEpoch\t{h.get('masterEpoch')}\n"
        f"#SyncStateSetEpoch\t{h.get('syncStateSetEpoch')}"
    )
    group = (body.get("brokerMemberGroup") or {}).get("brokerAddrs") or {}
    for bid, addr in sorted(group.items(), key=lambda kv: int(kv[0])):
        print(f"\t#Broker\t{bid}\t{addr}")
    return 0


def run_clean_broker_metadata(args) -> int:
    fields = {
        "clusterName": args.cluster_name,
        "brokerName": args.broker_name,
        "brokerControllerIdsToClean": args.broker_controller_ids_to_clean,
        "isCleanLivingBroker": bool(args.clean_living_broker),
    }
    asyncio.run(_ask(_controllers(args), Q.CLEAN_BROKER_DATA, fields))
    if args.json:
        print(json.dumps({"cleaned": args.broker_name}))
    else:
        print(f"clear broker {args.broker_name} metadata from controller success!")
    return 0


CONTROLLER = arg(
    "-a", "--controller-addr", required=True, help="controller address(es), ';'-separated"
)
CLUSTER_NAME = arg("-c", "--cluster-name", required=True)
BROKER_NAME = arg("--broker-name", "-bn", dest="broker_name", required=True)

# broker/admin/verbs.py lists these among the others
VERBS = (
    namesrv_verb(
        "getControllerMetaData",
        "the controller group: leader and peers",
        run_get_controller_metadata,
        CONTROLLER,
    ),
    namesrv_verb(
        "getSyncStateSet",
        "per broker set: master, epochs, in-sync and other replicas",
        run_get_sync_state_set,
        CONTROLLER,
        arg("-b", "--broker-name", required=True, help="broker name(s), ','-separated"),
    ),
    namesrv_verb(
        "electMaster",
        "make this broker its set's master (designated election)",
        run_elect_master,
        CONTROLLER,
        CLUSTER_NAME,
        BROKER_NAME,
        arg("-b", "--broker-id", type=int, required=True, help="the controller's id"),
    ),
    namesrv_verb(
        "cleanBrokerMetadata",
        "forget a broker set (or some of its ids) on the controller",
        run_clean_broker_metadata,
        CONTROLLER,
        CLUSTER_NAME,
        BROKER_NAME,
        arg(
            "-b",
            "--broker-controller-ids-to-clean",
            default=None,
            help="ids to clean, ';'-separated (default: the whole set)",
        ),
        arg(
            "-l",
            "--clean-living-broker",
            action="store_true",
            help="clean even brokers that are alive",
        ),
    ),
    namesrv_verb(
        "getBrokerEpoch",
        "each node's epoch entries (epoch, startOffset, endOffset) and max offset",
        run_get_broker_epoch,
        arg("-b", "--broker-name", default=None, help="every node of this broker group"),
        arg("-c", "--cluster-name", default=None, help="every node of this cluster"),
        arg("--broker-addr", default=None, help="these nodes, ';'-separated (no -n needed)"),
    ),
)
