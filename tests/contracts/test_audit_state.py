"""contracts.audit_state: what the broker reads of the audit's state document, for v1 and v2."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.audit_state import FIELD_VERIFIED, read_verified
from spark_jobs.incremental import AuditState, NodeMark

NODES = st.dictionaries(
    st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=8),
    st.integers(min_value=0, max_value=2**62),
    max_size=4,
)


@given(NODES, st.integers(min_value=-1, max_value=2**45))
def test_reads_what_the_audit_writes(ends, last_snapshot_at) -> None:
    state = AuditState(
        verified=dict(ends),
        last_snapshot_at=last_snapshot_at,
        nodes={n: NodeMark(last_chunk="k") for n in ends},
    )
    done = read_verified(json.loads(state.to_json()))
    assert done.ends == ends
    assert done.last_snapshot_at_ms == last_snapshot_at


def test_reads_a_version_1_document() -> None:
    doc = {
        "version": 1,
        "verified": {"n0": "4096", "n1": 0},
        "lastSnapshotAt": 17,
        "objects": {"ignored": {}},
    }
    done = read_verified(doc)
    assert done.ends == {"n0": 4096, "n1": 0}
    assert done.last_snapshot_at_ms == 17


def test_defaults_when_nothing_was_verified() -> None:
    done = read_verified({"version": 2})
    assert done.ends == {} and done.last_snapshot_at_ms == -1


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ([], "not a JSON object"),
        ({"verified": {}}, "unknown state version None"),
        ({"version": 3, "verified": {}}, "unknown state version 3"),
        ({"version": 2, FIELD_VERIFIED: [1, 2]}, "'verified' is not an object"),
        ({"version": 2, FIELD_VERIFIED: {"n0": "x"}}, "malformed 'verified'"),
        ({"version": 1, "lastSnapshotAt": None}, "malformed"),
    ],
)
def test_refuses_what_is_not_a_state_document(doc, said) -> None:
    with pytest.raises(ValueError, match=said):
        read_verified(doc)
