"""The session factory: py4j's per-connection INFO lines are off unless someone set py4j's
level; its warnings still show."""

import logging


def test_py4j_info_is_quiet_and_warnings_show(spark) -> None:
    py4j = logging.getLogger("py4j")
    assert not py4j.isEnabledFor(logging.INFO)
    assert py4j.isEnabledFor(logging.WARNING)
    assert spark.range(3).count() == 3
