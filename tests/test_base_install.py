"""A broker host installs the base package alone (pyproject.toml: no Airflow, Spark, GX, moto,
numba, pandas or pyarrow): the broker's commands import none of them, and a command that needs
an extra says which one instead of a traceback.

The fast tests poison the heavy modules in a fresh interpreter (a meta-path finder that refuses
them); the slow one builds a real base-only virtualenv from uv.lock and runs a name server and a
broker from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from broker.cli import EXTRA_OF_MODULE
from tests.conftest import wait_until
from tools.localcluster import free_port

REPO = Path(__file__).resolve().parents[1]
# the extras' top-level modules, as the CLI maps them to the extra that installs them
HEAVY = tuple(sorted(EXTRA_OF_MODULE))
BROKER_HOST_COMMANDS = ("broker", "namesrv", "controller", "admin", "archive", "store")

POISON = f"""
import importlib.abc, sys
HEAVY = {HEAVY!r}

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HEAVY:
            raise ModuleNotFoundError(f"No module named {{name!r}} (poisoned)", name=name)
        return None

sys.meta_path.insert(0, Refuse())
"""


def broker_entry_modules() -> list[str]:
    """The modules behind the broker host's commands, read from pyproject's entry points."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    commands = pyproject["project"]["entry-points"]["haproof.commands"]
    return [commands[name].partition(":")[0] for name in BROKER_HOST_COMMANDS]


def run_poisoned(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", POISON + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_poison_refuses_what_it_names() -> None:
    # the finder must really stand between the interpreter and the installed packages
    done = run_poisoned("import pyspark")
    assert done.returncode != 0 and "poisoned" in done.stderr


def test_broker_host_modules_import_no_extra() -> None:
    modules = broker_entry_modules() + [
        "broker.archive.node_archiver",
        "broker.archive.shipper",
        "contracts.object_store",
    ]
    code = "import importlib, sys\n"
    code += "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {HEAVY!r}))\n"
    done = run_poisoned(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("command", BROKER_HOST_COMMANDS)
def test_broker_host_commands_answer_help_without_extras(command: str) -> None:
    done = run_poisoned(f"from broker.cli import main\nmain([{command!r}, '--help'])")
    assert done.returncode == 0, done.stderr
    assert f"usage: haproof {command}" in done.stdout


def test_a_command_of_an_extra_names_the_extra() -> None:
    done = run_poisoned(
        "import sys\nfrom broker.cli import main\n"
        "sys.exit(main(['audit', '--root', 'file:///nonexistent', '--cluster', 'c']))"
    )
    assert done.returncode == 2, done.stderr
    assert "install the 'audit' extra" in done.stderr or "needs the 'audit' extra" in done.stderr
    assert "Traceback" not in done.stderr


# -- a real base-only virtualenv ------------------------------------------------------------------

PROJECT_FILES = ("pyproject.toml", "uv.lock", "README.md")
PROJECT_DIRS = ("broker", "contracts", "spark_jobs", "expectations", "tools")


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    """``uv sync --frozen --no-dev --no-editable`` (no extra) of a copy of the project."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (scripts/bootstrap installs it)")
    root = tmp_path_factory.mktemp("base-install")
    src = root / "src"
    src.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, src / name)
    for name in PROJECT_DIRS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = root / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    subprocess.run(
        [uv, "sync", "--frozen", "--no-dev", "--no-editable", "--quiet"],
        cwd=src,
        env=env,
        check=True,
        timeout=600,
    )
    return venv


def _bin(venv: Path, name: str) -> str:
    return str(venv / "bin" / name)


@pytest.mark.slow
def test_base_venv_holds_no_extra_and_runs_the_broker_cli(base_venv: Path, tmp_path) -> None:
    probe = "import importlib.util as u\n"
    probe += f"print([m for m in {HEAVY!r} if u.find_spec(m) is not None])\n"
    done = subprocess.run(
        [_bin(base_venv, "python"), "-c", probe + "import broker.node"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    helped = subprocess.run(
        [_bin(base_venv, "haproof"), "broker", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "usage: haproof broker" in helped.stdout, helped.stderr


@pytest.mark.slow
def test_base_venv_runs_a_namesrv_and_a_broker_that_registers(base_venv: Path, tmp_path) -> None:
    haproof = _bin(base_venv, "haproof")
    ns_port, port, ha_port = free_port(), free_port(), free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=C\nbrokerName=broker-a\nbrokerId=0\nbrokerRole=ASYNC_MASTER\n"
        f"storePathRootDir={tmp_path / 'store'}\nlistenPort={port}\nhaListenPort={ha_port}\n"
        f"namesrvAddr=127.0.0.1:{ns_port}\nnodeName=broker-a-0\n"
        f"archiveEnable=true\narchiveRoot=file://{tmp_path / 'archive'}\n"
    )
    procs = []
    try:
        for args, log in (
            (["namesrv", "--host", "127.0.0.1", "--listen-port", str(ns_port)], "namesrv.log"),
            (["broker", "-c", str(conf), "--host", "127.0.0.1"], "broker.log"),
        ):
            with open(tmp_path / log, "wb") as out:
                procs.append(subprocess.Popen([haproof, *args], stdout=out, stderr=out))

        def registered() -> dict | None:
            done = subprocess.run(
                [
                    haproof,
                    "admin",
                    "haStatus",
                    "--namesrv",
                    f"127.0.0.1:{ns_port}",
                    "--broker-name",
                    "broker-a",
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert all(p.poll() is None for p in procs), (tmp_path / "broker.log").read_text()
            return json.loads(done.stdout) if done.returncode == 0 else None

        status = wait_until(registered, timeout_s=60, what="the broker in haStatus", every_s=0.2)
        assert "ASYNC_MASTER" in json.dumps(status)
        # the node archives itself with the base install (a file:// root: no boto3 call)
        wait_until(
            lambda: any(p.is_file() for p in (tmp_path / "archive").rglob("*")),
            timeout_s=60,
            what="the node's first archive object",
            every_s=0.2,
        )
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert procs[1].returncode == 0, (tmp_path / "broker.log").read_text()
