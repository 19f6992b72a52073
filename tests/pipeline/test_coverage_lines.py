"""The CLI table states each consumer group's offset coverage and the delivery counts; the
delivery thresholds are validated once, in PipelineConfig."""

from __future__ import annotations

import pytest

from contracts.errors import AuditInputError
from pipeline.cli import coverage_lines
from pipeline.steps import PipelineConfig


def test_coverage_and_delivery_lines() -> None:
    v = {
        "offsets": {
            "groups": {
                "g1": {
                    "evidence": "records",
                    "points": 6,
                    "queues": 2,
                    "coveredFromMs": 10,
                    "coveredToMs": 110,
                    "blindWindowMs": 0,
                },
                "g2": {
                    "evidence": "snapshots",
                    "points": 1,
                    "coveredFromMs": 5,
                    "coveredToMs": 5,
                    "blindWindowMs": None,
                },
            }
        },
        "delivery": {"enqueued": 7, "duplicated": 2, "redelivered": 8, "lost": 0},
    }
    assert coverage_lines(v) == [
        "offsets g1: 6 records on 2 queue(s) over 100 ms, blind window 0 ms",
        "offsets g2: 1 snapshots over 0 ms, blind window unknown",
        "delivery: enqueued 7, duplicated 2, redelivered 8, lost 0",
    ]
    assert coverage_lines({}) == []  # a verdict written before these parts existed


@pytest.mark.parametrize("bad", [-1, True, "3"])
def test_delivery_thresholds_are_validated(bad) -> None:
    with pytest.raises(AuditInputError, match="max_duplicated"):
        PipelineConfig(root="file:///x", cluster="c", max_duplicated=bad)
