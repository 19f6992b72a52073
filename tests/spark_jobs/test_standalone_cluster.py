"""The audit, unchanged, on a Spark standalone cluster (a master and two workers started from the
installed PySpark on 127.0.0.1) against the embedded S3 server. The workers get no S3 settings
from their environment: the driver's travel inside the tasks, and the secret shows up in no log
and not on the driver UI's environment page."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pyspark
import pytest

from broker.archive.shipper import NodeIdentity, Shipper, StoreDirSource
from contracts.object_store import open_store
from tests.conftest import REPO, wait_until
from tests.spark_jobs.builder import make_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any AWS or S3 setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HAPROOF_S3"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable
    )
    env.update(extra)
    return env


def spark_class(cls: str, *args: str, log: Path, env: dict) -> subprocess.Popen:
    fh = open(log, "wb")  # noqa: SIM115 (closed with the process by the fixture)
    cmd = [str(SPARK_HOME / "bin" / "spark-class"), cls, *args]
    return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=log.parent)


@pytest.fixture
def cluster(tmp_path):
    """(master URL, directory holding every log and work directory)."""
    logs = tmp_path / "spark"
    logs.mkdir()
    port, ui = free_port(), free_port()
    env = clean_env(SPARK_LOG_DIR=str(logs), SPARK_WORKER_DIR=str(logs / "work"))
    procs = [
        spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
            log=logs / "master.log",
            env=env,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    for i in range(2):
        procs.append(
            spark_class(
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1200m",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(logs / "work"),
                log=logs / f"worker-{i}.log",
                env=env,
            )
        )

    def alive_workers() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                doc = json.loads(r.read())
        except OSError:
            return 0
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    try:
        wait_until(
            lambda: alive_workers() == 2, timeout_s=180, what="two ALIVE workers", every_s=0.5
        )
        yield url, logs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_audit_runs_on_a_standalone_cluster_without_leaking_the_secret(
    cluster, s3_server, tmp_path
) -> None:
    url, logs = cluster
    secret = f"SeCrEt-{uuid.uuid4().hex}"
    access = f"AKIA{uuid.uuid4().hex[:16].upper()}"
    bucket = f"haproof-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    root = f"s3://{bucket}/archive"
    opts = s3_server.store_options()
    store = open_store(
        root, endpoint_url=opts["endpoint_url"], access_key=access, secret_key=secret
    )
    path = tmp_path / "m"
    make_store(path, 200)
    for node, role, bid, chunk in (("a-0", "SYNC_MASTER", 0, 3000), ("a-1", "SLAVE", 1, 5000)):
        ident = NodeIdentity("c1", "broker-a", node, bid, role, 0)
        Shipper(store, ident, chunk_max_bytes=chunk).ship(StoreDirSource.open(str(path)))
    env_page = tmp_path / "environment.html"
    env = clean_env(
        AWS_ACCESS_KEY_ID=access,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_DEFAULT_REGION="us-east-1",
        HAPROOF_S3_ENDPOINT=opts["endpoint_url"],
        HAPROOF_TEST_UI_PORT=str(free_port()),
        HAPROOF_TEST_ENV_PAGE=str(env_page),
    )
    cmd = [
        sys.executable,
        "-m",
        "tests.spark_jobs.standalone_driver",
        "audit",
        "--root",
        root,
        "--cluster",
        "c1",
        "--spark-master",
        url,
        "--no-expectations",
    ]
    try:
        res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        tails = "".join(f.read_text()[-2000:] for f in sorted(logs.glob("*.log")))
        raise AssertionError(f"the audit did not finish: {exc.stderr!r:.3000} {tails}") from None
    out, err = res.stdout.decode(), res.stderr.decode()
    assert res.returncode == 0, out + err[-5000:]
    # replicas compared and records checked on the workers; no snapshot was archived, so the
    # offsets and acknowledgements have nothing to judge (the headline says so, exit 0)
    assert re.search(r"PASS +replica_consistency", out) and re.search(r"PASS +log_integrity", out)
    assert out.rstrip().endswith("NO_EVIDENCE"), out
    # the work ran on the workers' executors (each leaves a directory per application)
    apps = list((logs / "work").glob("app-*/*/stderr"))
    assert apps, "no executor ran on the workers"
    page = env_page.read_text()
    assert "spark.master" in page and url in page  # the page was read, from this run's driver
    everything = [out, err, page] + [
        f.read_text(errors="replace") for f in logs.rglob("*") if f.is_file()
    ]
    assert not [t for t in everything if secret in t], "the secret leaked"
