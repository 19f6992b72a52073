"""The ``haproof`` entry point.

Subcommands are plug-ins: each package registers its own through the ``haproof.commands``
entry-point group (``register(subparsers)``), so ``broker`` never imports ``spark_jobs`` or
``expectations``. ``haproof bench`` (registered by ``tools.bench``) does the same through
``haproof.bench``.

A broker host installs the base package only; a command whose third-party modules belong to an
extra (``audit``, ``dags``, ``tools``) says which extra to install instead of a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points

from broker.errors import HaproofError

log = logging.getLogger("haproof")


# third-party top-level modules -> the extra that installs them (pyproject.toml)
EXTRA_OF_MODULE = {
    "pyspark": "audit",
    "great_expectations": "audit",
    "numba": "audit",
    "numpy": "audit",
    "pandas": "audit",
    "pyarrow": "audit",
    "airflow": "dags",
    "moto": "tools",
    "werkzeug": "tools",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``exc`` names, or None when it is not an extra's."""
    top = (exc.name or "").partition(".")[0]
    return EXTRA_OF_MODULE.get(top)


def load_group(group: str, subparsers: argparse._SubParsersAction) -> None:
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            register = ep.load()
        except ModuleNotFoundError as exc:
            # A plug-in whose module is not part of this build: say so instead of crashing.
            extra = missing_extra(exc)
            hint = f"; install the '{extra}' extra" if extra else ""
            p = subparsers.add_parser(ep.name, help=f"(unavailable: {exc.name} missing{hint})")
            p.set_defaults(func=_unavailable(ep.name, f"{exc}{hint}"))
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
    load_group("haproof.commands", sub)
    return parser


def main(argv: list[str] | None = None) -> int:
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
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(
            f"haproof {args.command}: needs the '{extra}' extra ({exc.name} is not installed):"
            f" pip install 'haproof[{extra}]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
