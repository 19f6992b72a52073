import json

from broker.namesrv import NameServer
from broker.remoting.client import connect
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from broker.remoting.server import RemotingServer


async def start_namesrv() -> NameServer:
    ns = NameServer()
    await ns.server.start()
    return ns


_REGISTRATIONS: list = []


async def register(ns: NameServer, broker: RemotingServer, name: str, topics: dict, bid=0):
    body = json.dumps(
        {"topicConfigSerializeWrapper": {"topicConfigTable": topics, "dataVersion": {}}}
    ).encode()
    conn = await connect(f"127.0.0.1:{ns.server.port}")
    req = RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": name,
            "brokerAddr": f"127.0.0.1:{broker.port}",
            "clusterName": "C",
            "haServerAddr": "",
            "brokerId": bid,
        },
        body,
    )
    assert (await conn.invoke(req)).code == 0
    # Kept open, as a broker's connection to its name server is: the name server drops a
    # broker whose registration connection closes (RocketMQ's BrokerHousekeepingService).
    _REGISTRATIONS.append(conn)
