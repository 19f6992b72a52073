"""docker-compose.yml, the multi-host deployment, checked without a Docker engine (none here):
every haproof, Spark and Airflow command parses with the real CLI it names, the broker configs
load and agree with the network and with each other, and the audit DAGs point at the archive
the brokers write. And it is safe to start: every secret required (never a default), only the
ports users need published and on 127.0.0.1 unless HAPROOF_BIND says otherwise, a healthcheck
and a restart policy for every service, dependents waiting for service_healthy, ACL on for the
brokers."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
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
from broker.controller.config import ControllerConfig, load_controller_config

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
    for name in (
        "minio",
        "namesrv",
        "spark-master",
        "postgres",
        "redis",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-worker",
    ):
        assert name in services, name
    assert len(_brokers(compose)) >= 2
    workers = [
        s
        for s in services.values()
        if "org.apache.spark.deploy.worker.Worker" in (s.get("command") or [])
    ]
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
        # aclEnable is read by broker/acl, not a BrokerConfig field
        assert set(cfg.extra) <= {"aclEnable"}, f"{name}: {cfg.extra}"
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
    for svc in compose["services"].values():  # healthchecks that run the airflow CLI
        test = svc.get("healthcheck", {}).get("test", [])
        if test[:1] == ["CMD-SHELL"] and test[1].startswith("airflow "):
            commands.append(shlex.split(test[1])[1:])
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
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    assert len(commands) >= 7


# -- safe to start ----------------------------------------------------------------------------

PUBLISHED = {"namesrv", "broker-a-0", "broker-a-1", "broker-a-2", "airflow-apiserver"}  # users
_VAR = re.compile(r"(?<!\$)\$\{(\w+)(:?[-?])?([^}]*)\}")


@pytest.fixture(scope="module")
def compose_text() -> str:
    return (REPO / "docker-compose.yml").read_text()


def _one_shots(compose: dict) -> set[str]:
    return {
        dep
        for svc in compose["services"].values()
        for dep, how in (svc.get("depends_on") or {}).items()
        if isinstance(how, dict) and how.get("condition") == "service_completed_successfully"
    }


def test_every_secret_is_required_and_none_has_a_default(compose, compose_text) -> None:
    found = _VAR.findall(compose_text)
    assert len({name for name, _, _ in found}) >= 8, found
    for name, op, message in found:
        if name == "HAPROOF_BIND":
            assert (op, message) == (":-", "127.0.0.1"), "published ports default to loopback"
        else:
            assert op == ":?" and message.strip().startswith(f"set {name}"), (
                f"${{{name}}} must be required (${{{name}:?set {name} ...}}), not {op!r}"
            )
    # no literal secret anywhere: every password/secret/key value comes from a variable
    secretish = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|FERNET|JWT|_AUTH$")
    for sname, svc in compose["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if secretish.search(key):
                assert "${" in str(value), f"{sname}: {key} is a literal"
            for cred in re.findall(r"://([^@/\s]*)@", str(value)):
                assert "${" in cred, f"{sname}: {key} carries a literal credential {cred!r}"
    assert compose["secrets"]["plain_acl"]["file"].startswith("${HAPROOF_PLAIN_ACL:?")


def test_only_the_ports_users_need_are_published_on_loopback_by_default(compose) -> None:
    published = {n for n, svc in compose["services"].items() if svc.get("ports")}
    assert published == PUBLISHED
    for name in published:
        for port in compose["services"][name]["ports"]:
            assert isinstance(port, str), f"{name}: long syntax needs host_ip too"
            m = re.fullmatch(r"\$\{HAPROOF_BIND:-127\.0\.0\.1\}:(\d+):(\d+)", port)
            assert m, f"{name}: {port!r} is not bound to ${{HAPROOF_BIND:-127.0.0.1}}"


def test_every_service_has_a_healthcheck_and_a_restart_policy(compose) -> None:
    one_shots = _one_shots(compose)
    assert one_shots == {"minio-init", "airflow-init"}
    for name, svc in compose["services"].items():
        if name in one_shots:
            assert svc.get("restart") == "on-failure", name
            continue
        assert svc.get("restart") in ("unless-stopped", "always"), f"{name}: restart policy"
        check = svc.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert check.get("interval") and check.get("retries"), name


def test_dependents_wait_for_healthy_or_completed(compose) -> None:
    one_shots = _one_shots(compose)
    edges = 0
    for name, svc in compose["services"].items():
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on must name conditions"
        for dep, how in deps.items():
            want = "service_completed_successfully" if dep in one_shots else "service_healthy"
            assert how == {"condition": want}, f"{name} -> {dep}: {how}"
            edges += 1
    assert edges >= 12
    brokers = _brokers(compose)
    assert compose["services"]["broker-a-0"]["depends_on"]["namesrv"]["condition"] == (
        "service_healthy"
    )
    slave = next(n for n, (_, c) in brokers.items() if c.broker_role is BrokerRole.SLAVE)
    assert "broker-a-0" in compose["services"][slave]["depends_on"]


def test_remoting_healthchecks_probe_the_port_the_service_listens_on(compose) -> None:
    ns = compose["services"]["namesrv"]
    assert (
        f"('127.0.0.1', {_flag(ns['command'], '--listen-port')})" in ns["healthcheck"]["test"][-1]
    )
    for name, (svc, cfg) in _brokers(compose).items():
        assert f"('127.0.0.1', {cfg.listen_port})" in svc["healthcheck"]["test"][-1], name
    for name in ("spark-master", "spark-worker-1"):
        svc = compose["services"][name]
        ui = _flag(svc["command"], "--webui-port")
        assert f"127.0.0.1:{ui}" in svc["healthcheck"]["test"][-1], name


def test_brokers_run_with_acl_on_and_their_accounts_from_secrets(compose) -> None:
    brokers = _brokers(compose)
    for name, (svc, cfg) in brokers.items():
        assert cfg.acl_enable, f"{name}: aclEnable=true"
        assert cfg.acl_file == "/opt/haproof/conf/plain_acl.yml", name
        assert cfg.access_key is None and cfg.secret_key is None, f"{name}: secret in the file"
        assert "accessKey" not in cfg.extra and "secretKey" not in cfg.extra, "no secret in conf"
        mounts = [s["target"] for s in svc["secrets"] if s["source"] == "plain_acl"]
        assert mounts == ["/opt/haproof/conf/plain_acl.yml"], name
        env = svc["environment"]
        for key in ("HAPROOF_ACCESS_KEY", "HAPROOF_SECRET_KEY"):
            assert str(env[key]).startswith("${HAPROOF_BROKER_") and ":?" in env[key], key
    example = yaml.safe_load((REPO / "deploy" / "plain_acl.example.yml").read_text())
    assert example["accounts"] and all(
        a["accessKey"].startswith("CHANGE-ME") and a["secretKey"].startswith("CHANGE-ME")
        for a in example["accounts"]
    )
    assert any(a.get("admin") for a in example["accounts"]), "the brokers' admin account"


def test_the_name_server_runs_with_acl_from_the_same_secret(compose) -> None:
    ns = compose["services"]["namesrv"]
    assert _flag(ns["command"], "--acl-file") == "/opt/haproof/conf/plain_acl.yml"
    assert "--insecure" not in ns["command"]
    mounts = [s["target"] for s in ns["secrets"] if s["source"] == "plain_acl"]
    assert mounts == ["/opt/haproof/conf/plain_acl.yml"]


def test_compose_refuses_to_start_without_a_secret(compose_text) -> None:
    """What docker compose does with ${VAR:?msg} when VAR is unset, re-enacted: the variable
    and the message name the missing secret."""
    missing = {name: msg for name, op, msg in _VAR.findall(compose_text) if op == ":?"}
    for name in (
        "HAPROOF_S3_SECRET_KEY",
        "AIRFLOW_JWT_SECRET",
        "HAPROOF_POSTGRES_PASSWORD",
        "HAPROOF_REDIS_PASSWORD",
        "AIRFLOW_FERNET_KEY",
        "HAPROOF_BROKER_SECRET_KEY",
        "HAPROOF_PLAIN_ACL",
    ):
        assert name in missing and name in missing[name], name


# -- controller mode ----------------------------------------------------------------------------


def _controllers(compose: dict) -> dict[str, tuple[dict, ControllerConfig]]:
    out = {}
    for name, svc in _services(compose, "haproof").items():
        if svc["command"][1] != "controller":
            continue
        conf_in_container = _flag(svc["command"], "-c")
        mounts = dict(
            v.rsplit(":", 1)[0].split(":", 1) for v in svc["volumes"] if v.startswith("./")
        )
        host_path = {dst: src for src, dst in mounts.items()}[conf_in_container]
        out[name] = (svc, load_controller_config(str(REPO / host_path)))  # strict keys
    return out


def test_three_controllers_form_one_raft_group_that_archives_its_elections(compose) -> None:
    controllers = _controllers(compose)
    assert sorted(controllers) == ["controller-0", "controller-1", "controller-2"]
    (_, first), *_ = controllers.values()
    assert first.controllerType == "jRaft" and len(first.raft_peers) == 3
    (_, broker_cfg), *_ = _brokers(compose).values()
    ids = set()
    for name, (svc, cfg) in controllers.items():
        assert (cfg.raft_peers, cfg.rpc_addrs) == (first.raft_peers, first.rpc_addrs), name
        ids.add(cfg.jRaftServerId)
        # this controller's Raft and remoting addresses name its own service
        assert cfg.jRaftServerId.split(":")[0] == name
        assert cfg.rpc_addr_of(cfg.jRaftServerId) == f"{name}:{cfg.listenPort}"
        assert cfg.listenHost == "0.0.0.0"
        assert f"('127.0.0.1', {cfg.listenPort})" in svc["healthcheck"]["test"][-1], name
        assert not cfg.enableElectUncleanMaster, f"{name}: elect only from the SyncStateSet"
        # its records go where the brokers archive and the audit reads
        assert cfg.archiveEnable and cfg.archiveRoot == broker_cfg.archive_root, name
        assert cfg.archiveS3Endpoint == broker_cfg.archive_s3_endpoint, name
        # their own MinIO user (deploy/minio/controller.json), never MinIO's root keys
        assert svc["environment"]["AWS_ACCESS_KEY_ID"].startswith("${HAPROOF_S3_CONTROLLER_KEY:?")
        assert any(v.endswith(":/var/lib/haproof") for v in svc["volumes"]), "durable state"
        assert cfg.controllerStorePath.startswith("/var/lib/haproof/"), name
    assert ids == set(first.raft_peers)


def test_brokers_join_the_controller_group(compose) -> None:
    controllers = _controllers(compose)
    (_, first), *_ = controllers.values()
    for name, (_svc, cfg) in _brokers(compose).items():
        assert cfg.enable_controller_mode, name
        assert cfg.controller_addr.split(";") == first.rpc_addrs, name
        assert cfg.broker_ip1 in cfg.ha_allowed_slaves, f"{name}: any node may be master"
        # a group of three, so a SYNC_MASTER keeps a slave in its SyncStateSet after one loss
    assert len(_brokers(compose)) == 3
    master = compose["services"]["broker-a-0"]["depends_on"]
    assert all(master[c] == {"condition": "service_healthy"} for c in controllers)
