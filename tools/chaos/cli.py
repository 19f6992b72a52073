"""``haproof chaos``: the simulation's invariants against real processes on 127.0.0.1 (a
controller, a name server, a three-node SYNC_MASTER group in controller mode), OpenChaos-style:
producers and a consumer run while a seeded fault schedule kills (-9), stops (SIGSTOP) and
partitions nodes; then the history and the archive are checked.

    haproof chaos --rounds 10 [--seed N] [--workdir DIR] [--faults kill,pause,...]
    haproof chaos --rounds 3 --faults lagging-failover --inject-bug unclean-election

Writes ``{workdir}/history.jsonl`` (one operation a line, ``t`` in ms since the start) and
prints one JSON line last: rounds, faults, acked, lost, violations, ... Exit 0: no invariant
broke; 1: one did; 2: bad usage. A separate command from ``haproof sim``: nothing here is
deterministic or replayable (real processes, real time), a run takes minutes not
milliseconds, and a seed fixes only the schedule.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from broker import planted_bugs
from tools.chaos.runner import KINDS, run

EPILOG = """exit codes:
  0  no invariant broke
  1  an invariant broke (named in "violations"; the history file has every operation)
  2  bad usage (unknown option, fault kind or planted bug)"""


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k for k in text.split(",") if k)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(
            f"--faults {text!r}: fault kinds are {', '.join(KINDS)} (comma-separated)"
        )
    return kinds


def main(args: argparse.Namespace) -> int:
    bug = args.inject_bug
    if bug is not None and bug not in planted_bugs.KNOWN:
        print(
            f"haproof chaos: unknown planted bug {bug!r} (see haproof sim --list-bugs)",
            file=sys.stderr,
        )
        return 2
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000_000
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="haproof-chaos-"))
    logging.getLogger("broker.client").setLevel(logging.WARNING)  # a send failing is expected
    print(f"haproof chaos: seed {seed}, {args.rounds} rounds, in {workdir}", file=sys.stderr)
    outcome = asyncio.run(
        run(workdir, seed, args.rounds, args.faults, bug, args.producers, args.strict_reads)
    )
    for name, detail in outcome.summary["violations"].items():
        print(f"{name}: {detail}")
    print(json.dumps(outcome.summary, sort_keys=True))
    return 1 if outcome.failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "chaos",
        help="the simulation's invariants against real processes (kill -9, SIGSTOP, partitions)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=10, help="faults to apply (default 10)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the fault schedule (default: from the clock, printed)",
    )
    p.add_argument(
        "--faults",
        type=_kinds,
        default=KINDS,
        help=f"fault kinds to draw from (default {','.join(KINDS)})",
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="where stores, logs, archive and history go (default: a new temp dir)",
    )
    p.add_argument("--producers", type=int, default=2, help="concurrent producers (default 2)")
    p.add_argument(
        "--inject-bug",
        metavar="NAME",
        default=None,
        help="start every process with this planted bug (HAPROOF_PLANTED_BUG)",
    )
    p.add_argument(
        "--strict-reads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a read past the master's confirmOffset is a violation (default; "
        "--no-strict-reads only counts it)",
    )
    p.set_defaults(func=main)
