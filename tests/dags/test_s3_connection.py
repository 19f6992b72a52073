"""S3 through an Airflow Connection, resolved inside the task: the embedded S3 server (a real
moto subprocess) reached with the keys, endpoint and region of a Connection alone (no AWS_*
variable in the environment)."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from contracts.errors import ArchiveError
from contracts.object_store import StoreSpec, open_store
from tests.dags.conftest import DAGS

sys.path.insert(0, str(DAGS))  # as the DAG processor does: the dags folder on sys.path

from haproof_common import AuditConfigError, use_s3_connection  # noqa: E402

VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "HAPROOF_S3_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "HAPROOF_AWS_CONN_ID",
    "AIRFLOW_CONN_AWS_DEFAULT",
    "AIRFLOW_CONN_HAPROOF_S3",
)


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return monkeypatch


def _conn(server) -> str:
    o = server.store_options()
    return json.dumps(
        {
            "conn_type": "aws",
            "login": o["access_key"],
            "password": o["secret_key"],
            "extra": {"endpoint_url": o["endpoint_url"], "region_name": o["region"]},
        }
    )


@pytest.mark.parametrize("conn_id", ["haproof_s3", None])
def test_the_task_reaches_s3_with_the_connection_alone(bare_env, s3_server, conn_id):
    bucket = f"conn-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    root = f"s3://{bucket}/prod"
    bare_env.setenv(f"AIRFLOW_CONN_{(conn_id or 'aws_default').upper()}", _conn(s3_server))
    with pytest.raises(ArchiveError):  # no key, no endpoint: AWS refuses or cannot be reached
        open_store(root, retries=0).put_mutable("x", b"x")
    use_s3_connection({"root": root, "aws_conn_id": conn_id})
    store = open_store(root)
    store.put_mutable("audits/probe.json", b"{}")
    assert [o.key for o in store.list("audits/")] == ["audits/probe.json"]
    spec = StoreSpec(root).resolved()  # what the audit sends its Spark executors
    assert spec.access_key == s3_server.store_options()["access_key"]
    assert spec.endpoint_url == s3_server.endpoint_url


def test_a_named_connection_must_exist(bare_env):
    with pytest.raises(AuditConfigError, match="S3 connection 'nope' not found"):
        use_s3_connection({"root": "s3://b/p", "aws_conn_id": "nope"})
    use_s3_connection({"root": "s3://b/p"})  # no aws_default: the environment's keys, if any
    use_s3_connection({"root": "file:///x", "aws_conn_id": "nope"})  # file://: no S3 at all
