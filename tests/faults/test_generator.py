"""The fault-archive generator checks itself, without Spark: the bytes it writes decode with
the broker's own decoder, every manifest matches its object except where a fault says it must
not, and every case's truth is well-formed against ``contracts.audit_tables``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from contracts import audit_tables as at
from contracts.record.properties import string_to_properties
from contracts.record.reader import decode_record, scan_records
from tests.faults.cases import FAULTS, build_all
from tests.faults.cases_objects import bit, flip_target
from tests.faults.generator import Witness, scratch_dir, self_check
from tests.faults.logbytes import FILE_SIZE, LogWriter, flipped, make_log, shift_queue_offsets

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(n=st.integers(1, 60), body_len=st.integers(0, 1500), queues=st.integers(1, 4))
def test_logs_decode_with_the_broker_decoder(n, body_len, queues) -> None:
    log = make_log(n, body_len, queues)
    recs = list(scan_records(log.data))
    # scan_records stops after a BLANK (it ends its file): walk file by file
    decoded = []
    for start in range(0, log.end, FILE_SIZE):
        decoded += list(scan_records(log.data[start : start + FILE_SIZE], base_offset=start))
    assert recs == decoded[: len(recs)]
    assert [(r.physical_offset, r.total_size, r.is_blank) for r in decoded] == [
        (r.offset, r.size, r.blank) for r in log.recs
    ]
    next_qo: dict[int, int] = {}
    for got, want in zip(decoded, log.recs, strict=True):
        assert not (got.is_blank and got.end % FILE_SIZE), "a BLANK ends its file"
        if got.is_blank:
            continue
        assert got.crc_ok and got.stored_physical_offset == got.physical_offset
        assert got.queue_offset == want.queue_offset == next_qo.get(want.queue_id, 0)
        next_qo[want.queue_id] = want.queue_offset + 1
        assert got.store_timestamp == want.store_ts and got.msg_id == want.msg_id
        assert got.body == bytes(log.data[want.body_at : want.body_at + want.body_len])
        props = bytes(log.data[want.props_at : want.props_at + want.props_len]).decode()
        assert string_to_properties(props) == got.properties
        assert int.from_bytes(log.data[want.ts_at : want.ts_at + 8], "big") == want.store_ts


@FAST
@given(data=st.data(), region=st.sampled_from(("body", "properties", "store_ts")))
def test_a_flip_breaks_the_crc_only_inside_a_body(data, region) -> None:
    log = make_log(data.draw(st.integers(1, 20)), data.draw(st.integers(1, 300)), 2)
    rec = data.draw(st.sampled_from(log.messages()))
    at_ = flip_target(log, rec, region, data.draw)
    bad = flipped(log, at_, bit(data.draw, region))
    got = decode_record(bad.data, rec.offset, base_offset=0)
    assert got.crc_ok is (region != "body")
    assert bytes(bad.data) != bytes(log.data) and rec.offset <= at_ < rec.end


def test_a_queue_gap_moves_one_queue_from_one_record_on() -> None:
    log = make_log(12, 50, 2)
    rec = log.messages()[5]
    gap = shift_queue_offsets(log, rec, by=2)
    got = {r.physical_offset: r.queue_offset for r in scan_records(gap.data)}
    for r in log.messages():
        moved = r.queue_id == rec.queue_id and r.offset >= rec.offset
        assert got[r.offset] == r.queue_offset + (2 if moved else 0)


def test_a_writer_resumes_a_cut_log_where_its_queues_were() -> None:
    log = make_log(10, 40, 3)
    cut = log.messages()[6].offset
    w = LogWriter(log.cut(cut))
    rec = w.put(b"x", queue_id=log.messages()[6].queue_id)
    assert rec.offset == cut and rec.queue_offset == log.messages()[6].queue_offset


def _well_formed(w: Witness) -> list[str]:
    cols = at.TABLE_COLUMNS.get(w.table)
    if cols is None:
        return [f"{w}: no table {w.table}"]
    bad = [f"{w}: no column {c}" for c in w.row if c not in cols]
    if w.table == "archive_faults" and w.row.get("kind") not in at.FAULT_KINDS:
        bad.append(f"{w}: unknown fault kind")
    if w.table == "ranges" and "verdict" in w.row and w.row["verdict"] not in at.RANGE_VERDICTS:
        bad.append(f"{w}: unknown verdict")
    return bad


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: a build is not cheap
    database=None,
)
@given(data=st.data())
def test_every_generated_archive_is_what_its_truth_says(data) -> None:
    with tempfile.TemporaryDirectory(prefix="haproof-faults-", dir=scratch_dir()) as tmp:
        built = build_all(Path(tmp) / "archive", Path(tmp) / "work", data.draw)
        assert [c.fault for _, c in built] == list(FAULTS)
        for b, case in built:
            assert set(case.expect) == set(at.CHECKS), case.describe()
            assert set(case.expect.values()) <= {
                at.STATUS_PASS,
                at.STATUS_FAIL,
                at.STATUS_NO_EVIDENCE,
                None,
            }, case.describe()
            assert self_check(b, case) == [], case.describe()
            for w in case.witnesses + case.forbid:
                assert _well_formed(w) == [], case.describe()
            run = case.expected_run
            if case.fault in ("clean", "failover-clean", "lag-within", "offset-reset"):
                assert run == at.RUN_PASSED, case.describe()
            elif case.fault == "single-node-no-offsets":
                assert run == at.RUN_NO_EVIDENCE
            else:
                assert run == at.RUN_FAILED and case.witnesses, case.describe()
            for key, kind in case.tampered.items():
                assert kind in at.FAULT_KINDS
                named = [w for w in case.witnesses if w.row.get("kind") == kind]
                assert [w.row["key"] for w in named] == [key], case.describe()
