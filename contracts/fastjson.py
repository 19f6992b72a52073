"""Reading JSON as Alibaba fastjson writes it: the one parser every part uses.

fastjson writes map keys that are integers without quotes (``{0:250,1:250}``), in RocketMQ's
config files (``consumerOffset.json``) and in remoting bodies (a topic route's ``brokerAddrs``).
Those keys are quoted before ``json.loads``; the rewrite skips string literals, so a value such
as ``"{1:2}"`` is left alone. Errors are :class:`FastjsonError`, a ``ValueError`` that names the
source and where the text stopped being JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

from contracts.errors import CorruptFileError

# A bare (unquoted) integer key right after '{' or ',' (whitespace allowed), outside strings.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.S)


class FastjsonError(CorruptFileError, ValueError):
    """Text that is not JSON, even as fastjson writes it (``path`` names its source)."""


def _quote(m: re.Match) -> str:
    if m.group(1) is None:
        return m.group(0)  # a string literal: leave it alone
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'


def loads_fastjson(data: bytes | bytearray | str, source: str = "<json>") -> Any:
    """Parse ``data`` (UTF-8 bytes or text) as fastjson writes it."""
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonError(source, f"not UTF-8 at byte {exc.start}") from exc
    else:
        text = data
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_TOKEN.sub(_quote, text))
    except json.JSONDecodeError as exc:
        raise FastjsonError(
            source, f"not JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep
        raise FastjsonError(source, f"not JSON: {type(exc).__name__}") from exc
