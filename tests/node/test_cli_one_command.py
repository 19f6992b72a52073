"""``haproof COMMAND`` registers that command's plug-in alone: its start-up imports no other
command's modules (broker/cli.py ``build_parser(command)``)."""

from __future__ import annotations

import json
import subprocess
import sys

from broker.cli import build_parser, subcommands

_PROBE = """
import json, sys
from broker.cli import main
try:
    main(["audit", "--help"])
except SystemExit as exc:
    code = exc.code
others = ("broker.node", "broker.archive.shipper", "broker.admin.cli", "tools.sim.world")
print(json.dumps({"code": code, "imported": [m for m in others if m in sys.modules]}))
"""


def test_a_command_alone_imports_no_other_commands_modules():
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120
    )
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"code": 0, "imported": []}, res.stderr[-2000:]


def test_a_command_alone_has_the_same_parser_as_in_the_whole_cli():
    whole = build_parser()
    one = build_parser("audit")
    assert set(subcommands(one)) == {"audit"}
    assert subcommands(whole)["audit"].format_help() == subcommands(one)["audit"].format_help()
    assert set(subcommands(build_parser("no-such-command"))) == set(subcommands(whole))
