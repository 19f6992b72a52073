"""The evidence report built from hand-written audit outputs (no Spark, no browser)."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest

from contracts import audit_tables as at
from contracts.object_store import open_store
from expectations.evidence import build_and_publish_report, report_key
from expectations.evidence.model import ReportInputError, load_run
from expectations.evidence.publish import build_report
from tests.report import runs


@pytest.fixture
def store(tmp_path):
    s = open_store(f"file://{tmp_path}")
    runs.write_archive(s)
    return s


def _page(store, scenario: str, run_id: str | None = None) -> str:
    run_id = run_id or f"run-{scenario}"
    runs.write_run(store, run_id, scenario)
    key = build_and_publish_report(store, run_id, runs.GROUP)
    assert key == f"audits/{run_id}/{runs.GROUP}/report.html"
    return store.get(key).decode()


def _headline(html: str) -> str:
    return re.search(r'<h1 id="verdict">([^<]*)</h1>', html).group(1)


def _plots(html: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind, body in re.findall(r'<svg class="plot" data-plot="(\w+)"[^>]*>(.*?)</svg>', html):
        found.setdefault(kind, []).append(body)
    return found


def test_passing_run_shows_passed_and_draws_every_plot(store):
    html = _page(store, "passing")
    assert _headline(html) == "PASSED"
    assert "Every check passed." in html and "Incomplete run" not in html
    plots = _plots(html)
    assert set(plots) == {"lag", "offsets", "ranges"}
    lag = plots["lag"][0]
    # both slaves over time (broker-a-1 before the failover, broker-a-0 after) and the failover
    assert 'data-series="slave broker-a-1"' in lag and 'data-series="slave broker-a-0"' in lag
    assert "broker-a-1: SLAVE \u2192 SYNC_MASTER (epoch 2)" in lag
    assert len(plots["offsets"]) == 2  # g1/T queues 0 and 1
    assert "epoch 1 (broker-a-0)" in plots["offsets"][0]
    assert "epoch 2 (broker-a-1)" in plots["offsets"][0]
    assert "offset reset 300 \u2192 250" in plots["offsets"][1]
    assert 'data-verdict="match"' in plots["ranges"][0]
    # the snapshot that is not JSON is skipped and said
    assert "1 snapshot/event document(s) unreadable or invalid: skipped" in html
    assert "<script" not in html and not re.search(r"(src|href)=\"?(https?:)?//", html)


def test_failing_run_names_each_witness(store):
    html = _page(store, "failing")
    assert _headline(html) == "FAILED"
    why = re.search(r'<ul class="why">(.*?)</ul>', html).group(1)
    assert f"first differing byte at offset {runs.DIVERGE_AT}" in why
    assert f"acknowledged bytes [{runs.LOST[0]}, {runs.LOST[1]})" in why
    assert "went from 159 to 120" in why and "39 message(s) consumed again" in why
    # both records decoded side by side, their differing fields marked
    assert f'<strong class="offset">{runs.DIVERGE_AT}</strong>' in html
    side = re.search(r'<table class="side">(.*?)</table>', html).group(1)
    differs = re.findall(r'<tr class="differs"><th>([^<]+)</th>', side)
    assert differs == ["body length", "body CRC", "record size"]
    assert side.count("0A00000700002A9F") == 2  # same msgId both sides
    # the regression is marked on its queue's plot
    assert 'class="violation"' in _plots(html)["offsets"][0]
    assert 'data-verdict="divergent"' in _plots(html)["ranges"][0]


def test_missing_object_is_a_failed_archive_check_with_its_key(store):
    html = _page(store, "missing_object")
    assert _headline(html) == "FAILED"
    assert "log_missing: v1/c1/broker-a/broker-a-1/commitlog/" in html
    section = re.search(r'<section id="check-archive_integrity">(.*?)</section>', html).group(1)
    assert "00000000000001048576-00000000000002097152-1.log" in section
    assert "manifest present, .log absent" in section


def test_incomplete_run_names_what_is_missing(store):
    html = _page(store, "incomplete")
    assert _headline(html) == "INCOMPLETE RUN"
    banner = re.search(r'<section class="incomplete-banner" id="incomplete">(.*?)</section>', html)
    assert banner is not None
    for missing in ("verdict.json", "acked_losses.parquet", "offset_violations.parquet"):
        assert f"audits/run-incomplete/broker-a/{missing} is missing" in banner.group(1)


def test_a_failure_stays_visible_when_outputs_are_missing(store):
    runs.write_run(store, "r-f", "failing")
    store.delete("audits/r-f/broker-a/records_issues.parquet")
    build_and_publish_report(store, "r-f", runs.GROUP)
    html = store.get(report_key("r-f", runs.GROUP)).decode()
    assert _headline(html) == "FAILED \u2014 INCOMPLETE RUN"


def _put_df(store, key: str, df: pd.DataFrame) -> None:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    store.put_mutable(key, buf.getvalue())


def test_older_tables_and_garbage_never_crash(store):
    """Today's audit writes fewer columns and no status; a table may be damaged."""
    prefix = "audits/r-old/broker-a/"
    _put_df(
        store,
        prefix + "ranges.parquet",
        pd.DataFrame(
            [{"pair": "a->b", "start": 0, "end": 10, "verdict": "divergent", "detail": "x"}]
        ),
    )
    _put_df(
        store,
        prefix + "records_issues.parquet",
        pd.DataFrame(columns=["node", "offset", "check", "detail"]),
    )
    store.put_mutable(prefix + "offset_timeline.parquet", b"PAR1 not really")
    verdict = {
        "runId": "r-old",
        "cluster": "c1",
        "brokerName": "broker-a",
        "passed": False,
        "checks": [{"name": "replica_consistency", "passed": False, "findings": 1}],
    }
    store.put_mutable(prefix + "verdict.json", json.dumps(verdict).encode())
    html, stats = build_report(store, "r-old", "broker-a")
    page = html.decode()
    assert stats["status"] == at.RUN_FAILED
    assert _headline(page) == "FAILED \u2014 INCOMPLETE RUN"
    assert "ranges.parquet lacks column(s) master, node, bytes" in page
    assert "offset_timeline.parquet is not readable Parquet" in page
    assert "1 byte range(s) fail: divergent a-&gt;b [0, 10)" in page


def test_table_values_are_escaped(store):
    runs.write_run(store, "r-x", "passing")
    issue = {c: None for c in at.TABLE_COLUMNS["records_issues"]}
    issue.update(node="<script>alert(1)</script>", offset=5, check="crc", detail='"><img src=x>')
    runs.put_table(store, "audits/r-x/broker-a/", "records_issues", [issue])
    html = build_report(store, "r-x", "broker-a")[0].decode()
    assert "<script>alert" not in html and "<img src=x>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_witnesses_are_bounded(store):
    runs.write_run(store, "r-many", "failing")
    row = {
        "kind": "regression",
        "group_name": "g1",
        "topic": "T",
        "queue_id": 0,
        "before": 9,
        "node_before": runs.M,
        "epoch_before": 1,
        "at_before": runs.T0,
        "after": 1,
        "node_after": runs.S,
        "epoch_after": 2,
        "at_after": runs.FAILOVER_AT,
        "failover": "x",
        "reconsumed_messages": 8,
    }
    runs.put_table(store, "audits/r-many/broker-a/", "offset_violations", [row] * 120)
    html = build_report(store, "r-many", "broker-a")[0].decode()
    section = re.search(r'<section id="check-offset_monotonicity">(.*?)</section>', html).group(1)
    assert section.count('<tr><td class="tok">regression</td>') == 50
    assert "and 70 more violations not shown" in section


class _Recording:
    def __init__(self, inner):
        self.inner, self.listed = inner, []

    def list(self, prefix):
        self.listed.append(prefix)
        return self.inner.list(prefix)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_only_the_groups_snapshot_and_event_prefixes_are_listed(store):
    runs.write_run(store, "r-l", "passing")
    rec = _Recording(store)
    ev = load_run(rec, "r-l", runs.GROUP)
    assert ev.snapshots and ev.events
    assert sorted(rec.listed) == sorted(
        [f"v1/c1/broker-a/{n}/{f}/" for n in (runs.M, runs.S) for f in ("events", "snapshots")]
        + ["v1/c1/broker-a/_controller/events/"]  # the controller's records (elections)
    )


def test_names_are_validated_before_any_key_is_built(store):
    with pytest.raises(ReportInputError):
        build_report(store, "../etc", "broker-a")
    with pytest.raises(ReportInputError):
        build_report(store, "r1", "a/b")


@pytest.mark.parametrize("seed", range(5))
def test_thinning_keeps_extremes_and_every_epoch_change(seed):
    import numpy as np

    from expectations.evidence.model import thin_timeline

    rng = np.random.default_rng(seed)
    n = 20_000
    taken = np.sort(rng.integers(0, 10**9, n))
    df = pd.DataFrame(
        {
            "taken_at": taken,
            "node": np.where(taken < 5 * 10**8, "a-0", "a-1"),
            "role": "SYNC_MASTER",
            "epoch": np.searchsorted(np.sort(rng.integers(0, 10**9, 3)), taken) + 1,
            "group_name": "g",
            "topic": "T",
            "queue_id": rng.integers(0, 3, n),
            "committed": rng.integers(0, 10**6, n),
            "queue_max": np.nan,
        }
    )
    thin = thin_timeline(df)
    assert len(thin) < len(df) / 2
    for q, part in df.groupby("queue_id"):
        kept = thin[thin["queue_id"] == q]
        assert kept["committed"].max() == part["committed"].max()
        assert kept["committed"].min() == part["committed"].min()
        changes = part[(part["epoch"].diff() != 0) | (part["node"].shift() != part["node"])]
        assert set(changes["taken_at"]) <= set(kept["taken_at"])


def test_a_long_timeline_is_thinned_for_the_plots(store, monkeypatch):
    from expectations.evidence import model

    monkeypatch.setattr(model, "MAX_ROWS", 50)
    html = _page(store, "failing", "r-thin")
    assert "100 committed-offset points judged." in html
    assert "The plots draw 100 of them" in html  # (fewer points than time bins: all kept)
    assert 'class="violation"' in _plots(html)["offsets"][0]


def test_snapshots_are_read_evenly_spaced_past_the_bound(store, monkeypatch):
    from expectations.evidence import archive_view

    monkeypatch.setattr(archive_view, "MAX_SNAPSHOTS_PER_NODE", 5)
    runs.write_run(store, "r-sp", "passing")
    ev = load_run(store, "r-sp", runs.GROUP)
    for node in (runs.M, runs.S):
        taken = [s["takenAt"] for s in ev.snapshots if s["node"] == node]
        assert len(taken) == 5 and taken[-1] == runs.END_AT  # the last one always
        gaps = {b - a for a, b in zip(taken, taken[1:], strict=False)}
        assert max(gaps) <= 2 * min(gaps) + runs.STEP_MS
    assert any("the lag plot reads 5 of them, evenly spaced" in n for n in ev.archive_notes)


def _coverage_rows(html: str) -> dict[str, list[str]]:
    cell_html = re.search(r'<div id="offset-coverage">(.*?)</div></div>', html).group(1)
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", cell_html.split("<tbody>")[1]):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        out[cells[0]] = cells[1:]
    return out


def test_offsets_section_states_each_groups_coverage(store):
    """The coverage cell: per consumer group the evidence judged, queues, points, the time
    covered and the largest unobserved window (0 with records, the snapshot gap, unknown)."""
    html = _page(store, "passing")
    rows = _coverage_rows(html)
    assert rows["g1"] == [
        "every commit record",
        "2",
        "42",
        "2026-09-21 14:13:20.000Z",
        "2026-09-21 14:15:20.000Z",
        "2 min",
        "0 ms",
    ]
    assert rows["g2"][0] == "consumerOffset.json snapshots" and rows["g2"][-1] == "1 min"
    assert rows["&lt;g3&gt;"][-1] == "unknown (one snapshot alone saw it)"  # escaped
    assert "<g3>" not in html
    blind = re.search(r'<strong class="blind">([^<]*)</strong>', html).group(1)
    assert blind == "1 min"
    # the cell sits in check 4's section, before its witnesses
    section = html.split('id="check-offset_monotonicity"')[1].split("</section>")[0]
    assert 'id="offset-coverage"' in section


def test_delivery_section_shows_the_run_as_openchaos_does(store):
    html = _page(store, "failing")
    section = html.split('id="check-delivery"')[1].split("</section>")[0]
    counts = re.search(r'<table class="counts delivery">.*?<tbody>(.*?)</tbody>', section)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", counts.group(1)) == ["4000", "1", "39", "0"]
    assert "AC1100" in section and "3 s" in section and "T/0" in section


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0 ms"),
        (999, "999 ms"),
        (1_000, "1 s"),
        (12_500, "12.5 s"),
        (60_000, "1 min"),
        (250_000, "4 min 10 s"),
        (7_200_000, "2 h"),
        (12_000_000, "3 h 20 min"),
        (None, "-"),
        (-1, "-"),
    ],
)
def test_durations_read_as_words(ms, text):
    from expectations.evidence.accounting import fmt_duration_ms

    assert fmt_duration_ms(ms) == text
