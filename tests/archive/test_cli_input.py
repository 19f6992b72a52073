"""Unusable command-line input is one line and exit 2, never a traceback (issue 28), with real
``haproof`` processes: names that are not archive path components, an empty window, a manifest
nested 100k deep in the archive a node resumes from."""

from __future__ import annotations

import subprocess
import sys

import pytest

ERIC = "EricPanGopher_rocketmq_unit_test_store"


def haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=120
    )


def _one_line(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    "flag, value",
    [("--cluster", "../.."), ("--node", "a/b"), ("--broker-name", ""), ("--cluster", "x" * 300)],
)
def test_archive_names_are_checked_before_anything_is_opened(tmp_path, flag, value):
    names = {"--cluster": "c", "--broker-name": "b", "--node": "n", flag: value}
    args = [a for kv in names.items() for a in kv]
    res = haproof(
        "archive", "--store-dir", str(tmp_path / "none"), "--root", f"file://{tmp_path}/root", *args
    )
    assert flag in _one_line(res)
    assert not (tmp_path / "root").exists()


def test_audit_refuses_an_empty_window_and_bad_names(tmp_path):
    (tmp_path / "a").mkdir()
    root = f"file://{tmp_path}/a"
    res = haproof(
        "audit",
        "--root",
        root,
        "--cluster",
        "c",
        "--since",
        "2026-01-02T00:00:00",
        "--until",
        "2026-01-01T00:00:00",
    )
    assert "is before --since" in _one_line(res)
    res = haproof("audit", "--root", root, "--cluster", "../..")
    assert "not a valid archive path component" in _one_line(res)


def test_a_manifest_nested_100k_deep_is_one_line(tmp_path, golden_stores):
    root = tmp_path / "r"
    ship = (
        "archive",
        "--store-dir",
        str(golden_stores / ERIC),
        "--root",
        f"file://{root}",
        "--cluster",
        "rmq",
        "--broker-name",
        "broker-a",
        "--node",
        "n0",
        "--chunk-max-bytes",
        "9000",
    )
    assert haproof(*ship).returncode == 0
    manifest = sorted(p for p in (root / "v1").rglob("*.json") if "commitlog" in p.parts)[-1]
    manifest.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    line = _one_line(haproof(*ship))
    assert manifest.name in line and "nested deeper" in line
