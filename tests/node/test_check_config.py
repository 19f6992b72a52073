"""``haproof broker --check-config`` catches what can never work (issue 28), each with one line
and exit 2, as a real process: sizes out of range, one port twice, an archive root no store
opens, names that are not path components, an ACL file that is missing or still the example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.localcluster import write_broker_conf

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_ACL = ROOT / "deploy" / "plain_acl.example.yml"

CASES = {
    "huge commit log files": ({"mappedFileSizeCommitLog": 10**23}, "mappedFileSizeCommitLog"),
    "2 GiB consume queue files": (
        {"mappedFileSizeConsumeQueue": 20 * (1 << 27)},
        "mappedFileSizeConsumeQueue",
    ),
    "one port twice": ({"listenPort": 20911, "haListenPort": 20911}, "haListenPort"),
    "ftp archive": ({"archiveEnable": "true", "archiveRoot": "ftp://host/x"}, "archiveRoot"),
    "bucketless archive": ({"archiveRoot": "s3:///prefix"}, "archiveRoot"),
    "path brokerName": ({"brokerName": "../../etc"}, "brokerName"),
    "long brokerName": ({"brokerName": "b" * 100_000}, "brokerName"),
    "slash nodeName": ({"nodeName": "a/b"}, "nodeName"),
    "missing aclFile": ({"aclEnable": "true", "aclFile": "/nonexistent/plain_acl.yml"}, "ACL"),
    "example aclFile": ({"aclEnable": "true", "aclFile": str(EXAMPLE_ACL)}, "CHANGE-ME"),
    "encrypted nothing": (
        {
            "tlsMode": "enforcing",
            "tlsServerCertPath": "/no/cert.pem",
            "tlsServerKeyPath": "/no/key.pem",
        },
        "TLS",
    ),
}


def _check(tmp_path: Path, props: dict) -> subprocess.CompletedProcess:
    conf = write_broker_conf(
        tmp_path / "b.conf",
        {"brokerName": "broker-a", "storePathRootDir": tmp_path / "store", **props},
    )
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "-c", str(conf), "--check-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_config_refuses_what_can_never_work(tmp_path, case):
    props, says = CASES[case]
    r = _check(tmp_path, props)
    assert r.returncode == 2, (case, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], (case, r.stderr)
    assert len(lines[0]) < 1000, "the line quotes a bounded part of the value"
    assert not (tmp_path / "store").exists()


def test_check_config_passes_a_usable_file(tmp_path):
    r = _check(tmp_path, {"listenPort": 20911, "archiveRoot": f"file://{tmp_path}/a"})
    assert r.returncode == 0 and "configuration OK" in r.stdout, r.stderr
