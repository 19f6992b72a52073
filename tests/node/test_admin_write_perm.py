"""mqadmin's wipeWritePerm and addWritePerm against a real name server and broker process
(WIPE_WRITE_PERM_OF_BROKER 205, ADD_WRITE_PERM_OF_BROKER 327), as tables and as ``--json``
valid against docs/schemas/admin.schema.json; a wipe survives the group's registrations."""

from __future__ import annotations

import json

import pytest

from broker.namesrv_routes import RouteInfoManager
from tests.conftest import wait_until
from tests.support.running import admin, admin_json, running_group


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_group(tmp_path_factory.mktemp("wperm")) as g:
        yield g.ns, g.m


def perm_of(ns, topic: str) -> int:
    doc = json.loads(admin("topicRoute", "-n", ns.addr, "--topic", topic, "--json").stdout)
    [qd] = doc["queueDatas"]
    return qd["perm"]


def test_wipe_and_add_write_perm(cluster):
    ns, m = cluster
    assert admin("updateTopic", "-b", m.addr, "-t", "PermT", "-r", "2", "-w", "2").returncode == 0
    wait_until(
        lambda: admin("topicClusterList", "-n", ns.addr, "-t", "PermT").stdout == "C\n", 30, "route"
    )
    assert perm_of(ns, "PermT") == 6
    res = admin("wipeWritePerm", "-n", ns.addr, "-b", "broker-a")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(
        f"wipe write perm of broker[broker-a] in name server[{ns.addr}] OK, "
    )
    assert int(res.stdout.split(", ")[-1]) >= 1
    assert perm_of(ns, "PermT") == 4
    # a new topic registered while wiped is read-only too
    assert admin("updateTopic", "-b", m.addr, "-t", "PermT2", "-r", "1", "-w", "1").returncode == 0
    assert perm_of(ns, "PermT2") == 4
    rows = admin_json("addWritePerm", "-n", ns.addr, "-b", "broker-a")
    assert rows[0]["namesrvAddr"] == ns.addr and rows[0]["topicCount"] >= 2
    assert perm_of(ns, "PermT") == 6 and perm_of(ns, "PermT2") == 6
    assert admin_json("wipeWritePerm", "-n", ns.addr, "-b", "nosuch") == [
        {"namesrvAddr": ns.addr, "topicCount": 0}
    ]


def test_routes_keep_a_wipe_through_registrations():
    routes = RouteInfoManager()
    wrapper = {"topicConfigTable": {"T": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}}
    routes.register_broker("C", "127.0.0.1:1", "a", 0, "127.0.0.1:2", wrapper)
    assert routes.wipe_write_perm("a") == 1
    routes.register_broker("C", "127.0.0.1:1", "a", 0, "127.0.0.1:2", wrapper)
    assert routes.topic_queue_table["T"]["a"]["perm"] == 4
    assert routes.add_write_perm("a") == 1
    assert routes.topic_queue_table["T"]["a"]["perm"] == 6
