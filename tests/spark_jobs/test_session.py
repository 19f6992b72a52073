"""The session factory: py4j's per-connection INFO lines are off unless someone set py4j's
level; its warnings still show."""

import logging

from spark_jobs.session import get_spark


def test_py4j_info_is_quiet_and_warnings_show(spark) -> None:
    py4j = logging.getLogger("py4j")
    py4j.setLevel(logging.NOTSET)  # as in a fresh process (other tests may have set it)
    assert get_spark("haproof-tests") is not None  # the running session, from the factory
    assert not py4j.isEnabledFor(logging.INFO)
    assert py4j.isEnabledFor(logging.WARNING)
    assert spark.range(3).count() == 3
    py4j.setLevel(logging.INFO)  # someone who set it keeps it
    get_spark("haproof-tests")
    assert py4j.level == logging.INFO
    py4j.setLevel(logging.WARNING)
