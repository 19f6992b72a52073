"""Validate a command's ``--json`` output against its JSON Schema in ``docs/schemas/``."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validate(doc, name: str) -> None:
    """Raise ``jsonschema.ValidationError`` (naming the path) unless ``doc`` fits ``name``."""
    from jsonschema import Draft202012Validator

    s = schema(name)
    Draft202012Validator.check_schema(s)
    Draft202012Validator(s).validate(doc)
