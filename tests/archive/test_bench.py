from __future__ import annotations

import json
import subprocess
import sys


def test_bench_archive_prints_one_json_line_and_rerun_is_idempotent() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "bench",
            "archive",
            "--messages",
            "500",
            "--body-bytes",
            "200",
            "--mapped-file-size",
            "65536",
            "--chunk-max-bytes",
            "40000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "archive"
    assert figures["bytes"] > 500 * 200
    assert figures["chunks"] >= figures["bytes"] // 40000
    assert figures["rerun_new_chunks"] == 0
    assert figures["crc_failures"] == 0
    assert figures["mb_per_s"] > 0
