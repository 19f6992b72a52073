"""The ``haproof`` entry point.

Subcommands are plug-ins: each package registers its own through the ``haproof.commands``
entry-point group (``register(subparsers)``), so ``broker`` never imports ``spark_jobs`` or
``expectations``. ``haproof bench`` (registered by ``tools.bench``) does the same through
``haproof.bench``.

A broker host installs the base package only; a command whose third-party modules belong to an
extra (``audit``, ``dags``, ``tools``) says which extra to install instead of a traceback.

Every command's ``--help`` ends with its exit codes: a command that sets its own epilog keeps
it, the others get theirs from ``EXIT_CODES`` below (one table, so ``--help`` and this file
agree). ``haproof --version`` prints the installed package's version.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version

from broker import planted_bugs
from contracts.archive_layout import LayoutError
from contracts.errors import HaproofError

log = logging.getLogger("haproof")

_SERVER = """  0  stopped cleanly (SIGTERM or SIGINT)
  1  crashed (an unexpected error; the traceback is on stderr)
  2  unusable input: bad option or configuration (the key and line are named)"""
_BENCH = """  0  done: one JSON line of figures on stdout
  1  the run failed (failed or lost messages, a failed audit) or an option value is bad
  2  bad usage (unknown or missing option)"""

# command path -> its exit codes, for commands that do not write their own epilog
EXIT_CODES: dict[tuple[str, ...], str] = {
    (): """  0  done
  1  the command failed (see its own --help)
  2  bad usage or unusable input (no command, unknown option, unreadable file)""",
    ("namesrv",): _SERVER,
    ("broker",): _SERVER,
    ("store",): """  0  done
  1  a store file is corrupt (file, offset and reason on stderr)
  2  bad usage or an unreadable store directory""",
    ("store", "dump"): """  0  every record decoded and its body CRC matched
  1  a corrupt record (file, offset and reason on stderr) or a body CRC mismatch
  2  bad usage or an unreadable store directory""",
    ("archive",): """  0  shipped
  1  the log is corrupt (what precedes the corruption is shipped) or the archive failed
     (missing bucket, denied access, endpoint unreachable after retries, conflicting object)
  2  bad usage: bad arguments, no such store directory, unsupported root""",
    ("audit",): """  0  every check passed
  1  a check failed (the verdict names it)
  2  bad usage or unreadable input (root, cluster, window)""",
    ("demo",): """  0  the demo's audit passed
  1  the demo's audit failed
  2  a setup step failed (named on stderr)""",
    ("bench",): _BENCH,
}


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


def load_group(group: str, subparsers: argparse._SubParsersAction, only: str | None = None) -> None:
    """Register the group's plug-ins; ``only``: just the one of that name when there is one (a
    command's start-up then imports no other command's modules: 0.4 CPU s for all of them)."""
    eps = sorted(entry_points(group=group), key=lambda e: e.name)
    if any(ep.name == only for ep in eps):
        eps = [ep for ep in eps if ep.name == only]
    for ep in eps:
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or with ``command`` (a subcommand's name) that command alone."""
    parser = argparse.ArgumentParser(
        prog="haproof",
        description="Prove that RocketMQ-style master/slave replication kept its promises.",
    )
    parser.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    parser.add_argument("--version", action="version", version=f"haproof {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    load_group("haproof.commands", sub, only=command)
    add_exit_code_epilogs(parser)
    return parser


def package_version() -> str:
    try:
        return version("haproof")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommand parsers by name (empty when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def add_exit_code_epilogs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Give every parser of the tree without an epilog its exit codes (EXIT_CODES, the nearest
    ancestor's entry when the path has none), kept as written."""
    if parser.epilog is None:
        key = path
        while key not in EXIT_CODES:
            key = key[:-1]
        parser.epilog = "exit codes:\n" + EXIT_CODES[key]
        if parser.formatter_class is argparse.HelpFormatter:
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for name, child in subcommands(parser).items():
        add_exit_code_epilogs(child, (*path, name))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    head = 2 if argv[:1] == ["--log-level"] else 0
    if argv[head : head + 2] == ["archive", "prune"]:  # beside the ship's own options
        from broker.archive import prune_cli

        return prune_cli.main(argv[head + 2 :])
    parser = build_parser(argv[head] if len(argv) > head else None)
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
        planted_bugs.switch_on_from_env(os.environ)
    except ValueError as exc:
        print(f"haproof: {planted_bugs.ENV}: {exc}", file=sys.stderr)
        return 2
    if planted_bugs.active_names():
        log.warning("planted bug(s) switched on: %s", ", ".join(planted_bugs.active_names()))
    try:
        return int(func(args) or 0)
    except (HaproofError, LayoutError) as exc:  # LayoutError: a name that is no path component
        print(f"haproof {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`haproof store dump X | head`): stop quietly; point stdout at
        # /dev/null so the interpreter's final flush does not complain either
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
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
