"""``haproof admin``'s argument parsers, built from the verb table (broker/admin/verbs.py):
``add_verb`` gives every verb the common options (targets, ``--json``, the ACL account) and
the exit-code epilog, then its row's own options follow."""

from __future__ import annotations

import argparse

from broker.admin.common import EXIT_CODES, signed
from broker.admin.verbs import VERBS


def add_verb(
    sub, name: str, help_text: str, func, targets: str = "both"
) -> argparse.ArgumentParser:
    """A verb's parser with ``--namesrv`` / ``--broker-addr`` (as ``targets`` says: "both",
    "namesrv"), ``--json`` and the exit codes in its epilog."""
    q = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument(
        "-n",
        "--namesrv",
        default=None,
        help="name server address(es) host:port, ';'-separated (default: "
        "$NAMESRV_ADDR unless -b is given, as mqadmin)",
    )
    if targets == "both":
        q.add_argument(
            "-b", "--broker-addr", default=None, help="broker address(es) host:port, ';'-separated"
        )
    q.add_argument("--json", action="store_true", help="JSON output instead of a table")
    q.add_argument(
        "--access-key",
        default=None,
        help="ACL account to sign with (default: $HAPROOF_ACCESS_KEY); its secret key comes "
        "from $HAPROOF_SECRET_KEY or --secret-key-file",
    )
    q.add_argument("--secret-key-file", default=None, help="file holding the secret key")
    q.set_defaults(func=signed(name, func))
    return q


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "admin",
        help="mqadmin's verbs on a running cluster (clusterList, haStatus, ...)",
        description="Operate a running cluster; every verb prints a table, or JSON with --json.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="admin_command", metavar="VERB")
    for verb in VERBS:
        q = add_verb(sub, verb.name, verb.help, verb.run, verb.targets)
        for option in verb.args:
            q.add_argument(*option.flags, **option.options)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
