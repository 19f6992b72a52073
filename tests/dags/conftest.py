"""Airflow for the DAG tests: its own AIRFLOW_HOME (SQLite), set before anything imports airflow.

Only the tests in this folder import Airflow, so pointing AIRFLOW_HOME at a temporary directory
here, at collection time, keeps the developer's own Airflow untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
_HOME = tempfile.mkdtemp(prefix="haproof-airflow-")
AIRFLOW_ENV = {
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "GX_ANALYTICS_ENABLED": "False",
}
os.environ.update(AIRFLOW_ENV)


@pytest.fixture(scope="session")
def airflow_env() -> dict[str, str]:
    """Environment for ``airflow`` subprocesses, with a migrated metadata database."""
    env = {**os.environ, **AIRFLOW_ENV}
    airflow = str(Path(sys.executable).with_name("airflow"))
    res = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    env["HAPROOF_AIRFLOW_BIN"] = airflow
    return env
