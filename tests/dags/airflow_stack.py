"""A real Airflow 3 on 127.0.0.1 for the event-driven tests: its own AIRFLOW_HOME (SQLite), the
API server (tasks reach it through the execution API), the scheduler (LocalExecutor), the DAG
processor and the triggerer, each a subprocess in its own process group, ended by its id."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.dags.conftest import DAGS

COMPONENTS = (
    ("api-server", ["api-server", "--port", "{port}", "--host", "127.0.0.1"]),
    ("scheduler", ["scheduler"]),
    ("dag-processor", ["dag-processor"]),
    ("triggerer", ["triggerer"]),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    def __init__(self, home: Path, extra_env: dict[str, str]):
        self.home = home
        self.port = free_port()
        self.airflow = str(Path(sys.executable).with_name("airflow"))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "GX_ANALYTICS_ENABLED": "False",
            **extra_env,
        }
        self.procs: dict[str, subprocess.Popen] = {}

    def run(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [self.airflow, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res

    def start(self) -> AirflowStack:
        self.run("db", "migrate")
        for name, argv in COMPONENTS:
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
            self.procs[name] = subprocess.Popen(
                [self.airflow, *[a.format(port=self.port) for a in argv]],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def alive(self) -> None:
        for name, p in self.procs.items():
            assert p.poll() is None, f"airflow {name} exited: {self.log_tail(name)}"

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def query(self, code: str) -> object:
        """Run ``code`` (which prints one JSON value) against the stack's metadata database."""
        res = subprocess.run(
            [sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1])

    def _in_sessions(self) -> list[int]:
        """Every process in the components' sessions (each component leads its own): task
        processes make process groups of their own, but stay in the session."""
        sids = {p.pid for p in self.procs.values()}
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) in sids:  # field 6 of stat: the session id
                out.append(int(entry))
        return out

    def stop(self) -> None:
        for p in self.procs.values():  # each in its own session: its group is its pid
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # what the components left behind
            for pid in self._in_sessions():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 10
            while self._in_sessions() and time.monotonic() < end:
                time.sleep(0.1)
