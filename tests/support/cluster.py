"""broker.conf files for process tests of one broker group (cluster ``C``, group ``broker-a``)."""

from __future__ import annotations

import functools
from pathlib import Path

from broker.localcluster import write_broker_conf


def node_conf(
    tmp_path: Path, node: str, broker_id: int, role: str, port: int, ha_port: int, namesrv: str,
    **extra,
) -> Path:  # fmt: skip
    """``{tmp_path}/{node}.conf`` for node ``node`` (store ``store-{node}``, 256 KiB commit log
    files); ``extra`` adds or overrides RocketMQ properties."""
    return write_broker_conf(
        tmp_path / f"{node}.conf",
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerId": broker_id,
            "brokerRole": role,
            "storePathRootDir": tmp_path / f"store-{node}",
            "listenPort": port,
            "haListenPort": ha_port,
            "namesrvAddr": namesrv,
            "nodeName": node,
            "mappedFileSizeCommitLog": 256 * 1024,
            **extra,
        },
    )


def conf_factory(**defaults):
    """A ``node_conf`` with this test module's own defaults (a call's keywords still win)."""
    return functools.partial(node_conf, **defaults)
