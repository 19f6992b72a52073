"""Every command with ``--json`` has a JSON Schema in docs/schemas/ (each admin verb its own
``$defs`` entry), and every schema is itself valid; the tests beside each command validate its
real output against it (tests/pipeline, tests/report, tests/node, tests/ha)."""

from __future__ import annotations

import json

from broker.cli import build_parser, subcommands
from tests.support import schemas


def _json_commands(parser, path=()):
    if any("--json" in a.option_strings for a in parser._actions):
        yield path
    for name, child in subcommands(parser).items():
        yield from _json_commands(child, (*path, name))


def test_every_json_command_has_a_schema():
    from jsonschema import Draft202012Validator

    for f in schemas.SCHEMAS.glob("*.schema.json"):
        Draft202012Validator.check_schema(json.loads(f.read_text()))
    missing = []
    for path in _json_commands(build_parser()):
        if path[0] == "admin":
            if path[1] not in schemas.schema("admin")["$defs"]:
                missing.append(" ".join(path))
        elif not (schemas.SCHEMAS / f"{path[0]}.schema.json").is_file():
            missing.append(" ".join(path))
    assert missing == []
    assert {p[0] for p in _json_commands(build_parser())} >= {"audit", "report", "admin"}
