"""``haproof bench ...``: each benchmark registers itself through the ``haproof.bench``
entry-point group (pyproject.toml) and prints one JSON line of figures."""

from __future__ import annotations

import argparse

from broker.cli import load_group


def register(subparsers: argparse._SubParsersAction) -> None:
    """``haproof bench {store,broker,archive,audit}``: each prints one JSON line of figures."""
    p = subparsers.add_parser("bench", help="benchmarks, one JSON line of figures each")
    sub = p.add_subparsers(dest="bench", metavar="BENCH")
    load_group("haproof.bench", sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
