"""Validate a command's ``--json`` output against its JSON Schema in ``docs/schemas/``."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validate(doc, name: str, verb: str | None = None) -> None:
    """Raise ``jsonschema.ValidationError`` (naming the path) unless ``doc`` fits ``name``
    (its ``$defs`` entry ``verb`` for a file that defines one per verb, as admin's)."""
    from jsonschema import Draft202012Validator

    s = schema(name)
    Draft202012Validator.check_schema(s)
    if verb is not None:
        assert verb in s["$defs"], f"{name}.schema.json defines no {verb!r}"
        s = {**s, "$ref": f"#/$defs/{verb}"}
    Draft202012Validator(s).validate(doc)
