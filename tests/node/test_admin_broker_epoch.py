"""mqadmin's getBrokerEpoch against a real name server, master and slave (GET_BROKER_EPOCH_CACHE
1007): each node's epoch entries and max offset, by group (-b), cluster (-c) or --broker-addr,
as a table and as ``--json`` valid against docs/schemas/admin.schema.json."""

from __future__ import annotations

from tests.support.running import admin, admin_json, running_group


def test_get_broker_epoch(tmp_path):
    with running_group(tmp_path, slave=True) as g:
        assert admin("updateTopic", "-b", g.m.addr, "-t", "EpochT").returncode == 0
        sent = admin("sendMessage", "-n", g.ns.addr, "-t", "EpochT", "-p", "x")
        assert sent.returncode == 0, sent.stderr
        rows = admin_json("getBrokerEpoch", "-n", g.ns.addr, "-b", "broker-a")
        assert [r["brokerAddr"] for r in rows] == [g.m.addr, g.s.addr]
        master = rows[0]
        assert (master["clusterName"], master["brokerName"], master["brokerId"]) == (
            "C",
            "broker-a",
            0,
        )
        assert master["maxOffset"] > 0
        assert master["epochList"] and master["epochList"][0]["startOffset"] == 0
        for r in rows:  # as mqadmin: the last entry ends at the node's max offset
            if r["epochList"]:
                assert r["epochList"][-1]["endOffset"] == r["maxOffset"]
        by_cluster = admin_json("getBrokerEpoch", "-n", g.ns.addr, "-c", "C")
        assert [r["brokerAddr"] for r in by_cluster] == [g.m.addr, g.s.addr]
        table = admin("getBrokerEpoch", "--broker-addr", g.m.addr)
        assert table.returncode == 0, table.stderr
        assert f"#brokerAddr\t{g.m.addr}\n#brokerId\t0\n#maxOffset\t" in table.stdout
        assert "#clusterName\tC\n#brokerName\tbroker-a\n" in table.stdout
        for e in master["epochList"]:
            line = (
                f"#Epoch: EpochEntry{{epoch={e['epoch']}, startOffset={e['startOffset']}, "
                f"endOffset={e['endOffset']}}}"
            )
            assert line in table.stdout
        assert "#Epoch: EpochEntry{epoch=" in table.stdout
        missing = admin("getBrokerEpoch", "-n", g.ns.addr, "-c", "nosuch")
        assert missing.returncode == 2 and "no cluster 'nosuch'" in missing.stderr
        assert admin("getBrokerEpoch", "-n", g.ns.addr).returncode == 2
