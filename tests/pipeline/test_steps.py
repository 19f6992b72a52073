"""pipeline.steps: one validated configuration for the CLI and the DAGs."""

from __future__ import annotations

import pytest

from contracts.errors import AuditInputError
from pipeline.steps import PipelineConfig, parse_time


def test_parse_time_accepts_epoch_ms_and_iso() -> None:
    assert parse_time(None, "x") is None
    assert parse_time("1700000000000", "x") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z", "x") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20", "x") == 1_700_000_000_000  # UTC when no zone
    with pytest.raises(AuditInputError, match="--since 'yesterday' is neither"):
        parse_time("yesterday", "--since")


def test_config_round_trips_as_json_and_validates() -> None:
    cfg = PipelineConfig(root="file:///tmp/a", cluster="c", require_evidence=True)
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(AuditInputError, match="root and a cluster"):
        PipelineConfig(root="", cluster="c")
    with pytest.raises(AuditInputError, match="max_lag_bytes"):
        PipelineConfig(root="file:///a", cluster="c", max_lag_bytes=-1)
    with pytest.raises(AuditInputError, match="neither epoch ms nor ISO"):
        PipelineConfig(root="file:///a", cluster="c", until="soon")


def test_dag_config_comes_from_the_same_object(monkeypatch) -> None:
    import sys

    sys.path.insert(0, "dags")
    try:
        from haproof_common import AuditConfigError, resolve_config
    finally:
        sys.path.remove("dags")
    monkeypatch.delenv("HAPROOF_ARCHIVE_ROOT", raising=False)
    monkeypatch.delenv("HAPROOF_CLUSTER", raising=False)
    with pytest.raises(AuditConfigError, match="root and cluster"):
        resolve_config({}, incremental=True)
    cfg = resolve_config({"root": "file:///a", "cluster": "c"}, incremental=True)
    assert PipelineConfig.from_json(cfg).require_evidence is True
    # the DAG param max_lag_bytes is empty by default (nothing of the project at parse time):
    # an empty one is the audit's default, a given one is kept
    from contracts.audit_tables import DEFAULT_MAX_LAG_BYTES

    for given, want in ((None, DEFAULT_MAX_LAG_BYTES), (0, 0), (4096, 4096)):
        cfg = resolve_config(
            {"root": "file:///a", "cluster": "c", "max_lag_bytes": given}, incremental=False
        )
        assert PipelineConfig.from_json(cfg).max_lag_bytes == want
    with pytest.raises(AuditConfigError, match="neither epoch ms nor ISO"):
        resolve_config({"root": "file:///a", "cluster": "c", "since": "x"}, incremental=False)
