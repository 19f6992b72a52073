"""docker-compose.yml, the multi-host deployment, checked without a Docker engine (none here):
every haproof, Spark and Airflow command parses with the real CLI it names, the broker configs
load and agree with the network and with each other, and the audit DAGs point at the archive
the brokers write."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from broker.cli import build_parser
from broker.config import BrokerConfig, BrokerRole

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _services(compose: dict, first_word: str) -> dict[str, dict]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if isinstance(svc.get("command"), list) and svc["command"][0] == first_word
    }


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _brokers(compose: dict) -> dict[str, tuple[dict, BrokerConfig]]:
    out = {}
    for name, svc in _services(compose, "haproof").items():
        if svc["command"][1] != "broker":
            continue
        conf_in_container = _flag(svc["command"], "-c")
        mounts = dict(
            v.rsplit(":", 1)[0].split(":", 1) for v in svc["volumes"] if v.startswith("./")
        )
        host_path = {dst: src for src, dst in mounts.items()}[conf_in_container]
        out[name] = (svc, BrokerConfig.from_file(str(REPO / host_path)))
    return out


def test_every_part_of_the_deployment_is_there(compose) -> None:
    services = compose["services"]
    for name in ("minio", "namesrv", "spark-master", "postgres", "redis", "airflow-apiserver",
                 "airflow-scheduler", "airflow-dag-processor", "airflow-worker"):  # fmt: skip
        assert name in services, name
    assert len(_brokers(compose)) >= 2
    workers = [s for s in services.values() if "org.apache.spark.deploy.worker.Worker" in
               (s.get("command") or [])]  # fmt: skip
    assert len(workers) >= 2


def test_haproof_commands_parse_with_the_real_cli(compose) -> None:
    parser = build_parser()
    haproof = _services(compose, "haproof")
    assert {svc["command"][1] for svc in haproof.values()} >= {"namesrv", "broker"}
    for name, svc in haproof.items():
        args = parser.parse_args(svc["command"][1:])  # SystemExit on anything it does not know
        assert callable(args.func), name


def test_broker_configs_agree_with_the_network_and_each_other(compose) -> None:
    brokers = _brokers(compose)
    subnet = ipaddress.ip_network(compose["networks"]["haproof"]["ipam"]["config"][0]["subnet"])
    ns_svc = _services(compose, "haproof")["namesrv"]
    ns_port = _flag(ns_svc["command"], "--listen-port")
    masters = {}
    for name, (svc, cfg) in brokers.items():
        assert cfg.extra == {}, f"{name}: unknown keys {cfg.extra}"
        ip = svc["networks"]["haproof"]["ipv4_address"]
        assert cfg.broker_ip1 == ip and ipaddress.ip_address(ip) in subnet, name
        assert cfg.node_name == name
        assert cfg.namesrv_addr == f"namesrv:{ns_port}"
        assert any(p.endswith(f":{cfg.listen_port}") for p in svc["ports"]), name
        assert cfg.archive_enable and cfg.archive_s3_endpoint == "http://minio:9000"
        if cfg.broker_role.is_master:
            masters[cfg.broker_name] = cfg
    for name, (_, cfg) in brokers.items():
        if cfg.broker_role is BrokerRole.SLAVE:
            master = masters[cfg.broker_name]
            assert cfg.ha_master_address == f"{master.broker_ip1}:{master.ha_listen_port}", name
            assert cfg.broker_id > 0 and cfg.archive_root == master.archive_root


def test_the_audit_reads_what_the_brokers_write(compose) -> None:
    services = compose["services"]
    env = services["airflow-worker"]["environment"]
    (_, cfg), *_ = _brokers(compose).values()
    assert env["HAPROOF_ARCHIVE_ROOT"] == cfg.archive_root
    assert env["HAPROOF_CLUSTER"] == cfg.broker_cluster_name
    assert env["HAPROOF_S3_ENDPOINT"] == cfg.archive_s3_endpoint
    bucket = urlparse(cfg.archive_root).netloc
    assert services["minio-init"]["entrypoint"][-1].endswith(f"/{bucket}")
    master_cmd = services["spark-master"]["command"]
    spark_url = f"spark://spark-master:{_flag(master_cmd, '--port')}"
    assert env["HAPROOF_SPARK_MASTER"] == spark_url
    assert services["spark-worker-1"]["command"][-1] == spark_url
    assert shutil.which("spark-class", path=os.path.dirname(sys.executable)), "pyspark's launcher"
    # the image puts the project (and its dags/) under its WORKDIR
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text().splitlines()
    workdir = next(line.split()[1] for line in dockerfile if line.startswith("WORKDIR "))
    assert "COPY dags dags" in dockerfile
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == f"{workdir}/dags"


def test_the_image_extra_is_locked() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    deploy = pyproject["project"]["optional-dependencies"]["deploy"]
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    for req in deploy:
        name, _, version = req.partition("==")
        assert locked.get(name) == version, req
    assert "--extra deploy" in (REPO / "deploy" / "Dockerfile").read_text()


def test_airflow_settings_and_commands_are_real(compose, tmp_path) -> None:
    """Every AIRFLOW__SECTION__KEY names an option of the locked Airflow (celery's come from the
    provider the image adds), and every airflow command parses with Airflow's own CLI."""
    svc_env = compose["services"]["airflow-worker"]["environment"]
    options = [k.split("__")[1:] for k in svc_env if k.startswith("AIRFLOW__")]
    commands = [
        svc["command"][1:]
        for svc in _services(compose, "airflow").values()
        if svc["command"][1] != "celery"  # from the provider, in the image only
    ]
    script = """
import json, sys
from airflow.configuration import retrieve_configuration_description
from airflow.cli.cli_parser import get_parser
options, commands = json.loads(sys.argv[1])
known = retrieve_configuration_description()
missing = [
    o for o in options
    if o[0].lower() != "celery" and o[1].lower() not in known.get(o[0].lower(), {}).get("options", {})
]
parser = get_parser()
for c in commands:
    parser.parse_args(c)
print(json.dumps(missing))
"""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps([options, commands])],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    assert len(commands) >= 4
