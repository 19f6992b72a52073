from __future__ import annotations

import pytest

from spark_jobs.session import get_spark


@pytest.fixture(scope="session")
def spark():
    session = get_spark("haproof-tests", "local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
