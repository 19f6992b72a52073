"""``haproof demo``: the main job end to end on one machine, with embedded defaults.

1. an S3 API server (moto's, on 127.0.0.1) and a bucket for the archive;
2. a controller (RocketMQ 5's controller mode, its elections archived), a name server and the
   group's two nodes in controller mode as real processes: the controller elects the first;
3. traffic: a producer sends, a consumer group consumes part of it and commits offsets; the
   demo waits until the slave holds them and an archived master snapshot carries them;
4. a failover right after a commit: the master is killed (-9), the controller elects the slave
   (no manual step), the new master must still answer that commit (QUERY_CONSUMER_OFFSET),
   the old master rejoins as a slave, traffic goes on, the group consumes from the new master
   and commits again (until its archived snapshot carries them);
5. every node's commit log, snapshots and events, and the controller's elections, in the
   archive;
6. the nightly audit DAG through ``airflow dags test`` (Spark local mode + GX suites);
7. the verdict, how many consumer groups, queues and offset points the audit judged (and on
   which epochs), ``offsets.blindWindowMs`` (must be 0), the delivery counts, the elections,
   and where the HTML data-quality report is.

Everything lives in ``--workdir`` (default ``./haproof-demo``); a non-empty directory is replaced
only when it holds the demo's marker file (``.haproof-demo``): anything else is refused (exit 2).
Processes are stopped at the end, also on failure or Ctrl-C. Exit 0 when the audit passed,
judged offsets on both sides of the failover and left no commit unobserved, 1 otherwise, 2 on a
setup error.

Modules, one per concept: ``base`` (names, state, output, polling), ``cluster`` (workdir, S3,
processes), ``traffic`` (send, consume, commit, wait for the commit to be replicated and
archived), ``failover``, ``audit`` (archive, the DAG, the verdict).
"""

from __future__ import annotations

import argparse
import sys

from tools.demo.audit import archive, audit
from tools.demo.base import Demo, DemoError, has_module
from tools.demo.cluster import cleanup, prepare, start_group
from tools.demo.failover import failover
from tools.demo.traffic import traffic


def run_demo(d: Demo) -> int:
    """Every step in order; the processes and the S3 server are stopped whatever happens."""
    for module in ("moto", "airflow"):  # the tools and dags extras: say so before step 1
        if not has_module(module):
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
    try:
        prepare(d)
        start_group(d)
        traffic(d)
        failover(d)
        archive(d)
        return audit(d)
    finally:
        cleanup(d)


def run(args: argparse.Namespace) -> int:
    try:
        return run_demo(Demo(args))
    except DemoError as exc:
        print(f"haproof demo: {exc}", file=sys.stderr)
        return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="the main job end to end on embedded defaults")
    p.add_argument(
        "--workdir",
        default="haproof-demo",
        help="everything goes here (replaced only if an earlier demo made it)",
    )
    p.add_argument("--messages", type=int, default=2000, help="messages before the failover")
    p.set_defaults(func=run)
