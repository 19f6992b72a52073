"""contracts.audit_tables: the one owner of what fails a check, and of no_evidence."""

from __future__ import annotations

import pytest

from contracts import audit_tables as T


@pytest.mark.parametrize(
    ("verdict", "allowed", "lag_exceeded", "fails"),
    [
        (T.MATCH, False, False, False),
        (T.LAG, False, False, False),
        (T.LAG, False, True, True),
        (T.DIVERGENT, False, False, True),
        (T.DIVERGENT, True, False, True),  # only extra can be excused
        (T.MISSING, False, False, True),
        (T.EXTRA, False, False, True),
        (T.EXTRA, True, False, False),  # an old master's unacknowledged tail
        (T.CONFLICT, False, False, True),
        (T.UNVERIFIABLE, False, False, False),
        (T.EXPIRED, False, False, False),
    ],
)
def test_range_fails(verdict, allowed, lag_exceeded, fails) -> None:
    assert T.range_fails(verdict, allowed, lag_exceeded) is fails


def test_every_failing_verdict_is_a_verdict() -> None:
    assert set(T.FAILING_RANGE_VERDICTS) <= set(T.RANGE_VERDICTS)
    assert set(T.EXCUSABLE_RANGE_VERDICTS) <= set(T.FAILING_RANGE_VERDICTS)


def test_no_pass_without_evidence() -> None:
    assert T.check_status(0, 0) == T.STATUS_NO_EVIDENCE
    assert T.check_status(0, 5) == T.STATUS_PASS
    assert T.check_status(2, 0) == T.STATUS_FAIL
    assert T.check_status(2, 5) == T.STATUS_FAIL


def test_run_status_and_exit() -> None:
    assert T.run_status([T.STATUS_PASS, T.STATUS_PASS]) == T.RUN_PASSED
    assert T.run_status([T.STATUS_PASS, T.STATUS_NO_EVIDENCE]) == T.RUN_NO_EVIDENCE
    assert T.run_status([T.STATUS_NO_EVIDENCE, T.STATUS_FAIL]) == T.RUN_FAILED
    assert T.run_passed(T.RUN_PASSED, True)
    assert T.run_passed(T.RUN_NO_EVIDENCE, False)
    assert not T.run_passed(T.RUN_NO_EVIDENCE, True)
    assert not T.run_passed(T.RUN_FAILED, False)


RUN_STATUSES = (T.RUN_PASSED, T.RUN_NO_EVIDENCE, T.RUN_FAILED)


@pytest.mark.parametrize("first", RUN_STATUSES)
@pytest.mark.parametrize("second", RUN_STATUSES)
@pytest.mark.parametrize("third", (*RUN_STATUSES, None))
def test_combine_runs_every_combination(first, second, third) -> None:
    statuses = [s for s in (first, second, third) if s is not None]
    if T.RUN_FAILED in statuses:
        expected = T.RUN_FAILED
    elif T.RUN_NO_EVIDENCE in statuses:
        expected = T.RUN_NO_EVIDENCE
    else:
        expected = T.RUN_PASSED
    assert T.combine_runs(statuses) == expected
    assert T.combine_runs(list(reversed(statuses))) == expected  # order does not matter


def test_combine_runs_edges() -> None:
    assert T.combine_runs([]) == T.RUN_PASSED  # nothing combined: nothing failed
    for s in RUN_STATUSES:
        assert T.combine_runs([s]) == s
    with pytest.raises(ValueError, match="'pass'"):
        T.combine_runs([T.RUN_PASSED, T.STATUS_PASS])  # a check status is not a run status
    with pytest.raises(ValueError, match="'PASSED'"):
        T.run_status([T.STATUS_PASS, T.RUN_PASSED])


def test_run_status_is_the_worst_check_combined() -> None:
    as_run = {
        T.STATUS_PASS: T.RUN_PASSED,
        T.STATUS_NO_EVIDENCE: T.RUN_NO_EVIDENCE,
        T.STATUS_FAIL: T.RUN_FAILED,
    }
    for a in as_run:
        for b in as_run:
            assert T.run_status([a, b]) == T.combine_runs([as_run[a], as_run[b]])


def test_suites_take_their_rules_from_the_contract() -> None:
    from expectations import suites

    p = suites.parameters(max_lag_bytes=10, require_evidence=True)
    assert set(p["unexcusable_verdicts"]) | set(p["excusable_verdicts"]) == set(
        T.FAILING_RANGE_VERDICTS
    )
    assert p["max_lag_bytes"] == 10 and p["min_evidence"] == 1
    assert set(suites.BUILDERS) == set(T.TABLES)
