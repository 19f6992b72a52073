"""The ``haproof`` entry point.

Subcommands are plug-ins: each package registers its own through the ``haproof.commands``
entry-point group (``register(subparsers)``), so ``broker`` never imports ``spark_jobs`` or
``expectations``. ``haproof bench`` does the same through ``haproof.bench``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points

from broker.errors import HaproofError

log = logging.getLogger("haproof")


def _load_group(group: str, subparsers: argparse._SubParsersAction) -> None:
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            register = ep.load()
        except ModuleNotFoundError as exc:
            # A plug-in whose module is not part of this build: say so instead of crashing.
            p = subparsers.add_parser(ep.name, help=f"(unavailable: {exc.name} missing)")
            p.set_defaults(func=_unavailable(ep.name, str(exc)))
            continue
        register(subparsers)


def _unavailable(name: str, reason: str):
    def run(args: argparse.Namespace) -> int:
        print(f"haproof {name}: not available in this build ({reason})", file=sys.stderr)
        return 2

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="haproof",
        description="Prove that RocketMQ-style master/slave replication kept its promises.",
    )
    parser.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _load_group("haproof.commands", sub)
    return parser


def register_bench(subparsers: argparse._SubParsersAction) -> None:
    """``haproof bench {store,broker,archive,audit}``: each prints one JSON line of figures."""
    p = subparsers.add_parser("bench", help="benchmarks, one JSON line of figures each")
    sub = p.add_subparsers(dest="bench", metavar="BENCH")
    _load_group("haproof.bench", sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    head = 2 if argv[:1] == ["--log-level"] else 0
    if argv[head : head + 2] == ["archive", "prune"]:  # beside the ship's own options
        from broker.archive import prune_cli

        return prune_cli.main(argv[head + 2 :])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # third-party debug output carries request headers (the access key id): keep it quiet
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except HaproofError as exc:
        print(f"haproof {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
