"""Great Expectations suites over the audit's tables, and the data-quality report.

``run_suites(store, run_id, broker_name)`` is the entry point (see ``report.py``); GX itself is
imported only when suites run.
"""

from __future__ import annotations


def run_suites(store, run_id: str, broker_name: str, parameters=None, runner=None):
    from expectations.report import run_suites as _run

    return _run(store, run_id, broker_name, parameters, runner)


__all__ = ["run_suites"]
