"""Least privilege in object storage (docker-compose.yml, deploy/minio/*.json), checked
statically (no Docker engine here): MinIO's root keys reach only MinIO and its init job; each
broker's own user may write only its node's prefix, as its broker.conf names it; the audit's
user (the Airflow Connection aws_default) reads the archive and writes only audits/, each
group's _audit/ and the conditional-put probe; Spark's workers hold no key."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from broker.config import BrokerConfig

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "minio"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _policy(name: str) -> dict[str, set[str]]:
    """action -> the object resources (bucket/key pattern) it is allowed on."""
    out: dict[str, set[str]] = {}
    for st in json.loads((POLICIES / f"{name}.json").read_text())["Statement"]:
        assert st["Effect"] == "Allow"
        for action in st["Action"]:
            for res in st["Resource"]:
                out.setdefault(action, set()).add(res.removeprefix("arn:aws:s3:::"))
    return out


def _text(svc: dict) -> str:
    return json.dumps(svc)


def test_root_keys_reach_only_minio(compose):
    for name, svc in compose["services"].items():
        if name in ("minio", "minio-init"):
            continue
        assert "HAPROOF_S3_ACCESS_KEY" not in _text(svc), name
        assert "HAPROOF_S3_SECRET_KEY" not in _text(svc), name


def test_each_broker_writes_only_its_own_node(compose):
    brokers = {
        n: s
        for n, s in compose["services"].items()
        if s.get("command", [None])[:2] == ["haproof", "broker"]
    }
    assert set(brokers) == {"broker-a-0", "broker-a-1", "broker-a-2"}
    init = compose["services"]["minio-init"]
    for name, svc in brokers.items():
        cfg = BrokerConfig.from_file(str(REPO / "deploy" / f"{name}.conf"))
        root = urlparse(cfg.archive_root)
        node = f"{root.netloc}{root.path}/v1/{cfg.broker_cluster_name}/{cfg.broker_name}/"
        policy = _policy(cfg.node_name)
        assert policy["s3:PutObject"] == {
            f"{node}{cfg.node_name}/*",
            f"{root.netloc}{root.path}/v1/{cfg.broker_cluster_name}/"
            f"{cfg.broker_name}/_retention.json",
            f"{root.netloc}{root.path}/_haproof/*",
        }
        assert policy["s3:DeleteObject"] == {
            f"{node}{cfg.node_name}/*",
            f"{root.netloc}{root.path}/_haproof/*",
        }
        # its user is the one minio-init attaches that policy to
        var = re.search(
            r"\$\{(HAPROOF_S3_BROKER_\w+)_KEY:", svc["environment"]["AWS_ACCESS_KEY_ID"]
        )
        assert var, svc["environment"]
        short = var.group(1).removeprefix("HAPROOF_")
        assert f"{cfg.node_name}:{short}" in init["entrypoint"][-1]
        assert init["environment"][f"{short}_KEY"].startswith(f"${{{var.group(1)}_KEY:?")


def test_the_audit_writes_only_its_outputs(compose):
    policy = _policy("audit")
    assert policy["s3:GetObject"] == {"haproof-archive/prod/*"}
    assert policy["s3:PutObject"] == {
        "haproof-archive/prod/audits/*",
        "haproof-archive/prod/v1/*/*/_audit/*",
        "haproof-archive/prod/_haproof/*",
    }
    assert policy["s3:DeleteObject"] == {"haproof-archive/prod/_haproof/*"}
    env = compose["services"]["airflow-worker"]["environment"]
    assert not any(k.startswith("AWS_") for k in env)  # the keys are the Connection's only
    conn = json.loads(re.sub(r"\$\{[^}]*\}", "x", env["AIRFLOW_CONN_AWS_DEFAULT"]))
    assert conn["conn_type"] == "aws"
    assert conn["extra"]["endpoint_url"] == env["HAPROOF_S3_ENDPOINT"]
    assert "audit:S3_AUDIT" in compose["services"]["minio-init"]["entrypoint"][-1]


def test_spark_workers_hold_no_key(compose):
    for name in ("spark-master", "spark-worker-1", "spark-worker-2"):
        assert "AWS_" not in _text(compose["services"][name]), name


def test_continuous_verification_has_a_spark_connect_server(compose):
    import zipfile

    import pyspark

    svc = compose["services"]["spark-connect"]
    cmd = svc["command"]
    cls = cmd[cmd.index("--class") + 1]
    jars = Path(pyspark.__file__).parent / "jars"
    (jar,) = jars.glob("spark-connect_*.jar")
    assert cls.replace(".", "/") + ".class" in zipfile.ZipFile(jar).namelist()
    port = cmd[cmd.index("--conf") + 1].split("=")[1]
    env = compose["services"]["airflow-worker"]["environment"]
    assert env["HAPROOF_VERIFY_SPARK_MASTER"] == f"sc://spark-connect:{port}"
    assert cmd[cmd.index("--master") + 1] == env["HAPROOF_SPARK_MASTER"]
    assert "spark-connect" in compose["services"]["airflow-worker"]["depends_on"]
