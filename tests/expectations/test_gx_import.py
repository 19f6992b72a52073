"""GX's import (expectations/gx_import.py): the deferred modules stay unloaded through the
suites and Data Docs, and a deferred module still works when something does read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from expectations.gx_import import Deferred, defer

_RUN_SUITES = """
import json, sys
sys.path.insert(0, sys.argv[2])
from expectations.gx_import import DEFERRED, Deferred, import_gx
import_gx()
from contracts.object_store import open_store
from expectations import run_suites
from expectations.validation import SuiteRunner
from test_suites import RUN, _clean
store = open_store(sys.argv[1])
_clean(store, group="broker-a")
_clean(store, group="broker-b", records_issues=[
    {"node": "a-1", "offset": 7, "check": "crc", "detail": "body CRC"}])
runner = SuiteRunner()
verdicts = [run_suites(store, RUN, g, runner=runner).success for g in ("broker-a", "broker-b")]
read = [n for n in DEFERRED if not isinstance(sys.modules.get(n), Deferred) or sys.modules[n].loaded]
print(json.dumps({"verdicts": verdicts, "read": read}))
"""


def test_suites_and_data_docs_never_read_the_deferred_modules(tmp_path):
    """If this fails, GX now reads a module of ``DEFERRED`` on the suites' path (it still works,
    imported on first use, but its import is back in the GX step): take it off the list."""
    here = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run(
        [sys.executable, "-c", _RUN_SUITES, "file://" + str(tmp_path), here],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["verdicts"] == [True, False]  # the suites judged: one group passes, one fails
    assert out["read"] == [], f"GX read {out['read']} on the suites' path"


def _package(tmp_path, monkeypatch, name: str) -> None:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("import builtins\nbuiltins._gx_import_runs += 1\nVALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins._gx_import_runs", 0, raising=False)
    for mod in (name, f"{name}.sub"):
        monkeypatch.delitem(sys.modules, mod, raising=False)


def test_a_deferred_module_is_imported_on_first_read_and_then_is_the_real_one(
    tmp_path, monkeypatch
):
    import builtins

    _package(tmp_path, monkeypatch, "haproof_deferred_a")
    defer("haproof_deferred_a.sub")
    import haproof_deferred_a.sub as again
    from haproof_deferred_a import sub

    assert isinstance(sub, Deferred) and again is sub and not sub.loaded
    assert builtins._gx_import_runs == 0  # imported by name only: not run
    assert sub.VALUE == 7
    assert builtins._gx_import_runs == 1 and sub.loaded
    real = sys.modules["haproof_deferred_a.sub"]
    assert not isinstance(real, Deferred) and real.VALUE == 7
    import haproof_deferred_a

    assert haproof_deferred_a.sub is real
    defer("haproof_deferred_a.sub")  # imported already: left as it is
    assert sys.modules["haproof_deferred_a.sub"] is real


def test_threads_reading_a_deferred_module_at_once_import_it_once(tmp_path, monkeypatch):
    import builtins

    _package(tmp_path, monkeypatch, "haproof_deferred_b")
    defer("haproof_deferred_b.sub")
    stand_in = sys.modules["haproof_deferred_b.sub"]
    start = threading.Barrier(4)
    values = []

    def read() -> None:
        start.wait()
        values.append(stand_in.VALUE)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert values == [7] * 4 and builtins._gx_import_runs == 1
