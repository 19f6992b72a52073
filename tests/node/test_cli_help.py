"""Every ``haproof`` command's ``--help`` states its exit codes; ``haproof --version``; the
admin verbs' usage exit codes are the ones stated."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

from broker.cli import build_parser, subcommands
from tools.localcluster import free_port

REQUIRED = {
    ("store",),
    ("store", "dump"),
    ("namesrv",),
    ("broker",),
    ("admin",),
    ("archive",),
    ("audit",),
    ("demo",),
    ("bench",),
    ("bench", "store"),
    ("bench", "broker"),
    ("bench", "archive"),
    ("bench", "audit"),
    *{
        ("admin", v)
        for v in (
            "clusterList",
            "topicRoute",
            "topicStatus",
            "brokerStatus",
            "getBrokerConfig",
            "updateBrokerConfig",
            "resetOffsetByTime",
            "haStatus",
            "consumerProgress",
            "promote",
            "resetOffset",
        )
    },
}


def _tree(parser, path=()):
    yield path, parser
    for name, child in subcommands(parser).items():
        yield from _tree(child, (*path, name))


def test_every_help_states_its_exit_codes():
    helps = {path: p.format_help() for path, p in _tree(build_parser())}
    assert REQUIRED <= set(helps), REQUIRED - set(helps)
    for path, text in helps.items():
        tail = text[text.find("exit codes:") :]
        assert "exit codes:" in text, f"haproof {' '.join(path)} --help states no exit codes"
        codes = re.findall(r"^\s+([0-9])\s+\S", tail, flags=re.M)
        assert codes[:1] == ["0"] and "2" in codes, (path, tail)  # success and bad usage
    assert "unknown or refused config key" in helps[("admin", "updateBrokerConfig")]
    assert "a check failed" in helps[("audit",)]


def _haproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_version_and_help_processes():
    res = _haproof("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"haproof {version('haproof')}"
    res = _haproof("admin", "resetOffsetByTime", "--help")
    assert res.returncode == 0 and "exit codes:" in res.stdout and "--timestamp" in res.stdout


def test_admin_exit_codes_are_the_stated_ones():
    dead = f"127.0.0.1:{free_port()}"
    res = _haproof("admin", "clusterList", "--namesrv", dead)
    assert res.returncode == 1 and dead in res.stderr  # unreachable
    res = _haproof("admin", "clusterList")
    assert res.returncode == 2 and "give --namesrv" in res.stderr  # bad usage
    res = _haproof("admin", "topicRoute", "--namesrv", dead)
    assert res.returncode == 2 and "--topic" in res.stderr  # argparse: missing option
    res = _haproof("admin", "getBrokerConfig", "--broker-addr", dead, "--json")
    assert res.returncode == 1 and dead in res.stderr
