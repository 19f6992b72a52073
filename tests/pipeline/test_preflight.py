"""``haproof audit`` refuses a wrong root, cluster or group before Spark starts, naming what
exists and the nearest name."""

from __future__ import annotations

from contracts.object_store import open_store
from tests.support.haproof_cli import audit


def test_a_miss_is_one_line_before_spark(tmp_path):
    store = open_store(f"file://{tmp_path}")
    for cluster, group in (("rmq-prod", "broker-a"), ("rmq-prod", "broker-b"), ("rmq-test", "x")):
        store.put_mutable(f"v1/{cluster}/{group}/{group}-0/snapshots/1.json", b"{}")
    root = f"file://{tmp_path}"
    for args, says in (
        (
            ("--cluster", "rmq-prd"),
            f"no cluster 'rmq-prd' under {root} (did you mean 'rmq-prod'?); clusters there: "
            "rmq-prod, rmq-test",
        ),
        (
            ("--cluster", "rmq-prod", "--broker-name", "brokr-a"),
            "no group 'brokr-a' under " + root + "/v1/rmq-prod/ (did you mean 'broker-a'?); "
            "groups there: broker-a, broker-b",
        ),
        (("--cluster", "zzz"), "no cluster 'zzz' under " + root + "; clusters there: rmq-prod"),
        (("--cluster", "../x"), "cluster '../x' is not a valid archive path component"),
    ):
        res, took_s = audit("--root", root, *args)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.splitlines()
        assert lines[-1].startswith("haproof audit: ") and says in lines[-1], res.stderr
        assert not any("Spark" in line for line in lines), res.stderr
        assert "Traceback" not in res.stderr
        assert took_s < 30, took_s  # no JVM was started (a JVM's start-up alone takes seconds)


def test_an_empty_root_says_it_holds_no_cluster(tmp_path):
    res, _ = audit("--root", f"file://{tmp_path}", "--cluster", "c1")
    assert res.returncode == 2
    assert (
        res.stderr.splitlines()[-1]
        == f"haproof audit: no cluster 'c1' under file://{tmp_path}: it holds none"
    )
