"""Whatever the tables and verdict.json hold, the page renders, and nothing in them becomes markup.

The audit's outputs are data, possibly damaged or hostile (a topic name is chosen by a client):
every value goes through escaping, every shape mismatch becomes a note, never an exception.
"""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import audit_tables as at
from expectations.evidence.model import RunEvidence, make_table
from expectations.evidence.render import render

MARK = "<b>x</b>"
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.just(MARK),
    st.just("<script>alert(1)</script>"),
)
json_values = st.recursive(
    values,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def rows_for(table: str):
    cols = list(at.TABLE_COLUMNS[table])
    return st.lists(st.fixed_dictionaries({c: values for c in cols}), max_size=4)


def verdicts():
    check = st.fixed_dictionaries(
        {
            "name": st.sampled_from(at.CHECKS) | st.text(max_size=6),
            "status": values,
            "passed": values,
            "findings": values,
            "evidence": values,
            "detail": values,
        }
    )
    witness = st.fixed_dictionaries(
        {
            "pair": values,
            "first_diff": values,
            "master_key": values,
            "node_key": values,
            "master_record": st.dictionaries(
                st.sampled_from(["topic", "queueId", "msgId", "storeTimestamp", "bodyCRC"]), values
            ),
            "node_record": json_values,
        }
    )
    return st.none() | st.fixed_dictionaries(
        {
            "cluster": values,
            "master": values,
            "status": values,
            "passed": values,
            "window": json_values,
            "checks": st.lists(check, max_size=6) | json_values,
            "recordsChecked": values,
            "requireEvidence": values,
            "witnesses": st.fixed_dictionaries({"divergent": st.lists(witness, max_size=2)})
            | json_values,
        }
    )


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    verdict=verdicts(),
    tables=st.fixed_dictionaries({t: rows_for(t) for t in at.TABLES}),
    snapshots=st.lists(
        st.fixed_dictionaries(
            {
                "node": st.text(max_size=5),
                "role": st.sampled_from(["SYNC_MASTER", "SLAVE"]),
                "epoch": st.integers(0, 5),
                "takenAt": st.integers(0, 2**41),
                "maxPhyOffset": st.integers(0, 2**40),
                "confirmOffset": st.integers(0, 2**40),
                "slaves": st.dictionaries(st.text(max_size=5), st.integers(0, 2**40), max_size=2),
            }
        ),
        max_size=5,
    ),
)
def test_any_outputs_render_without_markup_injection(verdict, tables, snapshots):
    ev = RunEvidence(
        "r1",
        "broker-a",
        "audits/r1/broker-a/",
        verdict,
        {t: make_table(t, rows) for t, rows in tables.items()},
        [],
        snapshots=snapshots,
    )
    html = render(ev)
    parser = _Tags()
    parser.feed(html)
    assert "script" not in parser.tags and MARK not in html
    assert 'id="verdict"' in html
