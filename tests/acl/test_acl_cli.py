"""The operator's side of ACL: config keys checked at start (exit 2 naming the problem), and
``haproof admin`` signing with an account from the environment, against a broker process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.config import BrokerConfig
from contracts.errors import ConfigError
from tests.acl.acl_files import ADMIN_AK, ADMIN_SK, TOPIC, USER_AK, USER_SK, write_acl
from tests.client.test_acl_interop import _create
from tools.localcluster import free_port, start_broker, write_broker_conf


@pytest.mark.parametrize(
    "props, message",
    [
        ({"aclEnable": "true"}, "aclEnable=true needs aclFile"),
        ({"accessKey": "abcdefg"}, "accessKey and secretKey go together"),
        ({"haAllowedSlaves": "10.0.0.1;nope"}, "haAllowedSlaves='10.0.0.1;nope': 'nope'"),
    ],
)
def test_acl_config_keys_are_checked(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_dict(props)


def test_secret_key_never_shows_in_the_config_repr():
    cfg = BrokerConfig.from_dict({"accessKey": "abcdefg", "secretKey": "s3cr3t-value"})
    assert "s3cr3t-value" not in repr(cfg)


def test_a_bad_acl_file_stops_the_broker_with_exit_2(tmp_path):
    acl = write_acl(tmp_path, "accounts:\n  - accessKey: abc\n    secretKey: 12345678\n")
    conf = write_broker_conf(
        tmp_path / "b.conf",
        {
            "storePathRootDir": tmp_path / "store",
            "listenPort": free_port(),
            "aclEnable": "true",
            "aclFile": acl,
        },
    )
    proc = subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", str(conf), "--host", "127.0.0.1"],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr.decode()[-2000:]
    err = proc.stderr.decode().strip().splitlines()[-1]
    assert str(acl) in err and "at least 6 characters" in err and "12345678" not in err


def _admin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", *args],
        capture_output=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("HAPROOF_")} | env,
    )


def test_admin_cli_signs_with_the_account_it_is_given(tmp_path):
    acl = write_acl(tmp_path)
    port = free_port()
    conf = write_broker_conf(
        tmp_path / "b.conf",
        {
            "storePathRootDir": tmp_path / "store",
            "listenPort": port,
            "haListenPort": free_port(),
            "aclEnable": "true",
            "aclFile": acl,
            "accessKey": ADMIN_AK,
            "secretKey": ADMIN_SK,
        },
    )
    broker = start_broker("broker-a", conf, port, tmp_path)
    try:
        _create(broker.addr, TOPIC)
        reset = (
            "resetOffset",
            "--broker-addr",
            broker.addr,
            "--group",
            "G1",
            "--topic",
            TOPIC,
            "--queue",
            "0",
            "--offset",
            "0",
        )
        anon = _admin(*reset, env={})
        assert anon.returncode == 1 and "not signed" in anon.stderr.decode()
        as_user = _admin(*reset, env={"HAPROOF_ACCESS_KEY": USER_AK, "HAPROOF_SECRET_KEY": USER_SK})
        assert as_user.returncode == 1 and "needs an admin account" in as_user.stderr.decode()
        secret_file = tmp_path / "admin.secret"
        secret_file.write_text(ADMIN_SK + "\n")
        ok = _admin(*reset, "--access-key", ADMIN_AK, "--secret-key-file", str(secret_file), env={})
        assert ok.returncode == 0, ok.stderr.decode()
        half = _admin(*reset, env={"HAPROOF_ACCESS_KEY": ADMIN_AK})
        assert half.returncode == 2 and "needs a secret key" in half.stderr.decode()
    finally:
        assert broker.stop() == 0
