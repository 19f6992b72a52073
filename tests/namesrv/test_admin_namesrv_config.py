"""mqadmin's getNamesrvConfig / updateNamesrvConfig against a real name server started with
``-c namesrv.conf``: the settings as mqadmin prints them and as ``--json``, a runtime change
persisted to the file and applied, typos and static keys refused before any name server is
asked, and both admin-only under ACL."""

from __future__ import annotations

import pytest

from broker.acl.permission import ADMIN_CODES
from broker.loop_service import Periodic
from broker.namesrv_config import NamesrvConfigService
from broker.remoting.codes import RequestCode
from contracts.errors import ConfigError
from tests.support.running import admin, admin_json, running_group


async def _noop() -> None:
    return None


def test_get_and_update_namesrv_config(tmp_path):
    with running_group(tmp_path, namesrv_conf={"scanNotActiveBrokerInterval": 5000}) as g:
        table = admin("getNamesrvConfig", "-n", g.ns.addr)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0] == f"============{g.ns.addr}============"
        assert any(line.split() == ["scanNotActiveBrokerInterval", "=", "5000"] for line in lines)
        [doc] = admin_json("getNamesrvConfig", "-n", g.ns.addr)
        assert doc["config"]["listenPort"] == g.ns.addr.rpartition(":")[2]

        res = admin(
            "updateNamesrvConfig",
            "-n",
            g.ns.addr,
            "-k",
            "scanNotActiveBrokerInterval",
            "-v",
            "2000",
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("update name server config success!")
        [doc] = admin_json("getNamesrvConfig", "-n", g.ns.addr)
        assert doc["config"]["scanNotActiveBrokerInterval"] == "2000"
        conf = (tmp_path / "namesrv.conf").read_text().splitlines()
        assert "scanNotActiveBrokerInterval=2000" in conf
        rows = admin_json(
            "updateNamesrvConfig",
            "-n",
            g.ns.addr,
            "-k",
            "scanNotActiveBrokerInterval",
            "-v",
            "3000",
        )
        assert rows == [
            {
                "namesrvAddr": g.ns.addr,
                "key": "scanNotActiveBrokerInterval",
                "from": "2000",
                "to": "3000",
            }
        ]

        typo = admin(
            "updateNamesrvConfig", "-n", g.ns.addr, "-k", "scanNotActiveBrokerIntervall", "-v", "1"
        )
        assert typo.returncode == 2
        assert "unknown key 'scanNotActiveBrokerIntervall'; did you mean " in typo.stderr
        static = admin("updateNamesrvConfig", "-n", g.ns.addr, "-k", "listenPort", "-v", "1")
        assert static.returncode == 2
        assert "'listenPort' cannot be changed at runtime" in static.stderr


def test_config_codes_are_admin_only_and_rocketmqs():
    assert (RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.GET_NAMESRV_CONFIG) == (318, 319)
    assert {RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.GET_NAMESRV_CONFIG} <= ADMIN_CODES


def test_a_name_server_without_a_file_refuses_updates_and_changes_nothing():
    scanner = Periodic("scan", period_ms=10_000, round_=_noop)
    service = NamesrvConfigService({"scanNotActiveBrokerInterval": "10000"}, scanner, None)
    with pytest.raises(ConfigError, match="without -c namesrv.conf"):
        service.update({"scanNotActiveBrokerInterval": "1000"})
    assert scanner.period_ms == 10_000
    assert service.values["scanNotActiveBrokerInterval"] == "10000"
