"""``haproof archive`` and ``haproof audit`` as child processes, for the pipeline and DAG tests:
one place that builds their argv and environment, runs them and reads their JSON.

``ship`` archives a RocketMQ store directory (asserting it worked; ``archive_argv`` its command
line, for a test that starts a following archiver); ``flipped_store`` copies a
golden store with one payload byte flipped (what log_integrity must find); ``audit`` runs
``haproof audit ARGS`` and returns the finished process with its wall time; ``start_audit``
starts one without waiting; ``audit_json`` runs it with ``--json``, asserts the exit status and
returns the document, validated against docs/schemas/audit.schema.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contracts.record.reader import decode_record
from tests.support import schemas

ERIC = "EricPanGopher_rocketmq_unit_test_store"


def haproof_argv(*args: str) -> list[str]:
    """``haproof ARGS`` as this interpreter runs it (the tests' virtualenv)."""
    return [sys.executable, "-m", "broker.cli", *args]


def _env(env: Mapping[str, str] | None, inherit: bool) -> dict[str, str] | None:
    if env is None:
        return None
    return {**os.environ, **env} if inherit else dict(env)


def archive_argv(
    store_dir: Path | str, root: str, cluster: str, group: str, node: str, *extra: str
) -> list[str]:
    """``haproof archive`` of one node's store directory into ``root``."""
    return haproof_argv(
        "archive",
        "--store-dir",
        str(store_dir),
        "--root",
        root,
        "--cluster",
        cluster,
        "--broker-name",
        group,
        "--node",
        node,
        *extra,
    )


def ship(
    store_dir: Path,
    root: str,
    *,
    cluster: str = "rmq",
    group: str = "broker-a",
    node: str | None = None,
    extra: tuple[str, ...] = (),
    timeout_s: float = 300,
) -> None:
    """``haproof archive`` of one node's store into ``root`` (node: ``{group}-0``), to its end."""
    res = subprocess.run(
        archive_argv(store_dir, root, cluster, group, node or f"{group}-0", *extra),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert res.returncode == 0, res.stderr


@dataclass(frozen=True)
class Flipped:
    """Where ``flipped_store`` flipped its byte: the record that holds it."""

    physical_offset: int


def writable_copy(store_dir: Path, dest: Path) -> Path:
    """A copy of a (read-only, golden) store the test may change."""
    shutil.copytree(store_dir, dest)
    for p in dest.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dest


def flipped_store(golden: Path, dest: Path, record: int = 3, bit: int = 0x01) -> Flipped:
    """A copy of the golden ERIC store with ``bit`` of a message body flipped: in the record
    ``record`` (172 bytes each) of the second commit-log file, in its "Once, there ..."."""
    writable_copy(golden / ERIC, dest)
    f = dest / "commitlog" / "00000000000000016384"
    data = bytearray(f.read_bytes())
    at = 172 * record + data[172 * record :].index(b"Once, there")
    data[at] ^= bit
    f.write_bytes(bytes(data))
    rec = decode_record(bytes(data), 172 * record, base_offset=16384)
    return Flipped(rec.physical_offset)


def audit(
    *args: str, env: Mapping[str, str] | None = None, inherit: bool = True, timeout_s: float = 300
) -> tuple[subprocess.CompletedProcess, float]:
    """``haproof audit ARGS`` run to its end (``env`` on top of this process's environment, or
    in its place when not ``inherit``): the finished process and its wall time in seconds."""
    t0 = time.monotonic()
    res = subprocess.run(
        haproof_argv("audit", *args),
        env=_env(env, inherit),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return res, time.monotonic() - t0


def start_audit(
    *args: str, env: Mapping[str, str] | None = None, new_session: bool = False
) -> subprocess.Popen:
    """``haproof audit ARGS`` started, its stdout and stderr piped as text."""
    return subprocess.Popen(
        haproof_argv("audit", *args),
        env=_env(env, True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def audit_json(
    *args: str, env: Mapping[str, str] | None = None, rc: int = 0, timeout_s: float = 600
) -> dict:
    """``haproof audit --json ARGS``: exit status ``rc``, its document checked against the
    audit schema."""
    res, _ = audit("--json", *args, env=env, timeout_s=timeout_s)
    assert res.returncode == rc, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    schemas.validate(doc, "audit")
    return doc
