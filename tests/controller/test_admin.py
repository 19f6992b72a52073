"""``haproof admin`` controller verbs against a real controller process."""

from __future__ import annotations

import json
import subprocess
import sys

from broker.remoting.codes import RequestCode as Q
from tests.controller.support import B, C, beat, call, join, start_controller, wait_answering
from tests.support import schemas
from tools.localcluster import free_port


def admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_admin_verbs(tmp_path):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    proc = start_controller(tmp_path, "c0", port)
    try:
        wait_answering(addr)
        for bid in (1, 2):
            join(addr, bid)
            beat(addr, bid, 0, 10, timeout_ms=60_000)
        call(addr, Q.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1})
        call(
            addr,
            Q.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1},
            {"syncStateSet": [1, 2], "syncStateSetEpoch": 1},
        )
        out = admin("getControllerMetaData", "-a", addr)
        assert out.returncode == 0 and "#ControllerLeaderAddress" in out.stdout, out.stderr
        out = admin("getSyncStateSet", "-a", addr, "-b", B)
        assert out.returncode == 0, out.stderr
        assert "#MasterBrokerId\t1" in out.stdout and "#SyncStateSetNums\t2" in out.stdout
        out = admin("electMaster", "-a", addr, "-c", C, "--broker-name", B, "-b", "2", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["header"]["masterBrokerId"] == "2"
        schemas.validate(json.loads(out.stdout), "admin", "electMaster")
        for verb, extra in (("getControllerMetaData", ()), ("getSyncStateSet", ("-b", B))):
            out = admin(verb, "-a", addr, *extra, "--json")
            assert out.returncode == 0, out.stderr
            schemas.validate(json.loads(out.stdout), "admin", verb)
        out = admin("getSyncStateSet", "-a", addr, "-b", "nosuch")
        assert out.returncode == 1 and "nosuch" in out.stderr
        out = admin("cleanBrokerMetadata", "-a", addr, "-c", C, "--broker-name", B, "-b", "1")
        assert out.returncode == 1 and "still alive" in out.stderr  # refused, said why
        out = admin("cleanBrokerMetadata", "-a", addr, "-c", C, "--broker-name", B, "-l", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"cleaned": B}
        schemas.validate(json.loads(out.stdout), "admin", "cleanBrokerMetadata")
        assert call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})[0] == 2008
        out = admin("getSyncStateSet", "-a", "127.0.0.1:1", "-b", B)
        assert out.returncode == 1 and "unreachable" in out.stderr
    finally:
        proc.stop()
