"""Ctrl-C and SIGTERM during ``haproof audit``, as a terminal sends them: SIGINT to the whole
process group, at Spark's start-up, during the Spark jobs (Python workers alive) and in the GX
step. One line, exit 130 (143 for SIGTERM), no traceback, no process of the run left."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.support.haproof_cli import ERIC, ship, start_audit, writable_copy


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory, golden_stores) -> str:
    base = tmp_path_factory.mktemp("interrupt")
    store = writable_copy(golden_stores / ERIC, base / "store")
    root = f"file://{base}/arch"
    ship(store, root, timeout_s=120)
    return root


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose environment carries ``mark``."""
    out = []
    needle = f"HAPROOF_TEST_RUN={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in env.split(b"\0") and stat[stat.rfind(")") + 2] != "Z":
            out.append((int(name), cmd[:200]))
    return out


class Audit:
    """A ``haproof audit`` in a process group of its own, its stderr collected line by line."""

    def __init__(self, root: str, run_id: str):
        self.mark = uuid.uuid4().hex
        self.proc = start_audit(
            "--root",
            root,
            "--cluster",
            "rmq",
            "--run-id",
            run_id,
            env={"HAPROOF_TEST_RUN": self.mark},
            new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def interrupt(self, sig: int) -> tuple[int, str]:
        os.killpg(self.proc.pid, sig)  # the whole group, as a terminal's Ctrl-C
        rc = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        self.proc.stdout.close()
        return rc, "\n".join(self.lines)


def _workers(mark: str) -> bool:
    return any("pyspark.daemon" in cmd or "pyspark/daemon" in cmd for _, cmd in marked(mark))


def _jvm(mark: str) -> bool:
    return any("java" in cmd.split(" ", 1)[0] for _, cmd in marked(mark))


# (point, wait for this line, then this condition)
POINTS = {
    "spark start-up": ("starting Spark", _jvm),
    "spark jobs": ("replica consistency:", _workers),
    "gx": ("expectations: reading", None),
}


@pytest.mark.parametrize(
    ("point", "sig", "status"),
    [
        ("spark start-up", signal.SIGINT, 130),
        ("spark jobs", signal.SIGINT, 130),
        ("gx", signal.SIGINT, 130),
        ("spark jobs", signal.SIGTERM, 143),
    ],
)
def test_interrupt_leaves_one_line_and_no_process(archive_root, point, sig, status):
    audit = Audit(archive_root, f"int-{point.replace(' ', '-')}-{sig}")
    line, cond = POINTS[point]
    try:
        wait_until(lambda: audit.said(line) or audit.proc.poll() is not None, 300, line)
        assert audit.proc.poll() is None, "\n".join(audit.lines)
        if cond is not None:
            wait_until(lambda: cond(audit.mark), 120, f"{point}: its processes")
        assert "Spark ready" not in "\n".join(audit.lines) or point != "spark start-up"
        rc, err = audit.interrupt(sig)
    finally:
        if audit.proc.poll() is None:
            audit.proc.kill()
    assert rc == status, err
    assert err.splitlines()[-1] == "haproof audit: interrupted", err
    assert "Traceback" not in err and "Exception" not in err, err
    left = marked(audit.mark)
    assert left == [], left
    # nothing half-written: every JSON document the run left parses
    base = Path(archive_root.removeprefix("file://"))
    for p in base.rglob("*.json"):
        json.loads(p.read_bytes())
