"""mqadmin's deleteTopic against a real name server and broker process: the topic leaves the
master's table (DELETE_TOPIC_IN_BROKER 215) and the name server's routes (DELETE_TOPIC_IN_NAMESRV
216), as a table and as ``--json`` valid against docs/schemas/admin.schema.json; a system topic
is refused by the broker and the name servers are then not asked."""

from __future__ import annotations

import pytest

from broker.namesrv_routes import RouteInfoManager
from tests.conftest import wait_until
from tests.support.running import admin, admin_json, running_group


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("deltopic"), autoCreateTopicEnable="false") as g:
        yield g.ns, g.m


def _create(ns, topic: str) -> None:
    res = admin("updateTopic", "-n", ns.addr, "-c", "C", "-t", topic, "-r", "2", "-w", "2")
    assert res.returncode == 0, res.stderr
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", topic).stdout == "C\n",
        30,
        "the topic's route",
    )


def test_delete_topic_table_and_json(cluster):
    ns, m = cluster
    _create(ns, "DelMe")
    res = admin("deleteTopic", "-n", ns.addr, "-c", "C", "-t", "DelMe")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "delete topic [DelMe] from cluster [C] success.",
        "delete topic [DelMe] from NameServer success.",
    ]
    assert "DelMe" not in admin("topicList", "-n", ns.addr).stdout.splitlines()
    route = admin("topicRoute", "-n", ns.addr, "--topic", "DelMe")
    assert route.returncode != 0  # TOPIC_NOT_EXIST: the routes are gone at once
    # stays gone: the broker's next registrations do not bring it back
    assert admin("topicClusterList", "-n", ns.addr, "-t", "DelMe").stdout == ""

    _create(ns, "DelMeToo")
    doc = admin_json("deleteTopic", "-n", ns.addr, "-c", "C", "-t", "DelMeToo")
    assert doc == {
        "topic": "DelMeToo",
        "cluster": "C",
        "brokers": [{"brokerAddr": m.addr}],
        "namesrvs": [{"namesrvAddr": ns.addr}],
    }
    assert "DelMeToo" not in admin_json("topicList", "-n", ns.addr)["topicList"]
    # deleting what is already gone is a success, as in RocketMQ
    assert admin("deleteTopic", "-n", ns.addr, "-c", "C", "-t", "DelMeToo").returncode == 0


def test_delete_refusals(cluster):
    ns, m = cluster
    doc = admin_json("deleteTopic", "-n", ns.addr, "-c", "C", "-t", "TBW102", rc=1)
    assert doc["brokers"][0]["brokerAddr"] == m.addr
    assert "conflict with system topic" in doc["brokers"][0]["error"]
    assert doc["namesrvs"] == []
    res = admin("deleteTopic", "-n", ns.addr, "-c", "C", "-t", "bad/name")
    assert res.returncode == 1 and "illegal characters" in res.stderr
    res = admin("deleteTopic", "-n", ns.addr, "-c", "NoSuch", "-t", "T")
    assert res.returncode != 0 and "NoSuch" in res.stderr


def test_routes_delete_topic_only_the_clusters_groups():
    routes = RouteInfoManager()
    wrapper = {
        "topicConfigTable": {
            "T": {"topicName": "T", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
        }
    }
    routes.register_broker("C1", "127.0.0.1:1", "a", 0, "127.0.0.1:2", wrapper)
    routes.register_broker("C2", "127.0.0.1:3", "b", 0, "127.0.0.1:4", wrapper)
    assert routes.delete_topic("T", "C1")
    assert set(routes.topic_queue_table["T"]) == {"b"}
    assert not routes.delete_topic("T", "C1")
    assert routes.delete_topic("T")
    assert routes.topic_route("T") is None
    assert not routes.delete_topic("T")
