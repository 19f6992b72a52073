"""Listen addresses: a broker listens on listenHost unless --host overrides it, and a node that
listens beyond loopback with ACL off says so loudly at start (checked through the call the node
makes: tests never listen beyond loopback)."""

from __future__ import annotations

import asyncio
import logging

from broker import node as node_module
from broker.config import BrokerConfig
from broker.node import BrokerNode


def _config(tmp_path, **props) -> BrokerConfig:
    return BrokerConfig.from_dict(
        {
            "storePathRootDir": str(tmp_path / "store"),
            "listenPort": 0,
            "mappedFileSizeCommitLog": 1 << 20,
            **props,
        }
    )


def test_broker_listens_on_listen_host_and_reports_its_exposure(tmp_path, monkeypatch) -> None:
    calls = []
    real = node_module.warn_if_exposed

    def spy(what, host, acl):
        calls.append((what, host, acl))
        return real(what, host, acl)

    monkeypatch.setattr(node_module, "warn_if_exposed", spy)

    async def main() -> str:
        node = await BrokerNode.start(_config(tmp_path, listenHost="127.0.0.1"))
        try:
            return node.server._server.sockets[0].getsockname()[0]
        finally:
            await node.stop()

    assert asyncio.run(main()) == "127.0.0.1"
    assert calls == [("broker broker-a-0", "127.0.0.1", False)]


def test_acl_enable_is_read_before_the_acl_key_exists(tmp_path) -> None:
    assert not _config(tmp_path).acl_enable
    assert _config(tmp_path, aclEnable="false").acl_enable is False


def test_default_listen_host_is_loopback_and_beyond_it_needs_acl_or_insecure(
    tmp_path, caplog
) -> None:
    import pytest

    from contracts.errors import ConfigError

    assert _config(tmp_path).listen_host == "127.0.0.1"
    with pytest.raises(ConfigError, match="listenHost='0.0.0.0'.*ACL off") as err:
        _config(tmp_path, listenHost="0.0.0.0")
    assert err.value.key == "listenHost"
    acl = _config(tmp_path, listenHost="0.0.0.0", aclEnable="true", aclFile="/x.yml")
    assert acl.listen_host == "0.0.0.0"
    cfg = _config(tmp_path, listenHost="0.0.0.0", insecure="true")
    with caplog.at_level(logging.WARNING):
        assert node_module.warn_if_exposed("broker x", cfg.listen_host, cfg.acl_enable)
    (record,) = caplog.records
    assert "0.0.0.0" in record.getMessage() and "ACL OFF" in record.getMessage()


def test_a_host_override_beyond_loopback_is_refused_without_acl(tmp_path) -> None:
    import pytest

    from contracts.errors import ConfigError

    with pytest.raises(ConfigError, match="beyond loopback"):
        asyncio.run(BrokerNode.start(_config(tmp_path), "0.0.0.0"))
    assert not (tmp_path / "store").exists()  # refused before the store was opened
