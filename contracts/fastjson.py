"""Reading JSON as Alibaba fastjson writes it: the one parser every part uses.

fastjson writes map keys that are integers without quotes (``{0:250,1:250}``), in RocketMQ's
config files (``consumerOffset.json``) and in remoting bodies (a topic route's ``brokerAddrs``).
Those keys are quoted before ``json.loads``; the rewrite skips string literals, so a value such
as ``"{1:2}"`` is left alone. Errors are :class:`FastjsonError`, a ``ValueError`` that names the
source and where the text stopped being JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from contracts.errors import CorruptFileError

#: JSON nesting allowed in a remoting header or body (a header needs 2: document, extFields)
MAX_JSON_DEPTH = 32
#: integer literals longer than this are refused before int() sees them (Java's long has 19)
MAX_JSON_INT_DIGITS = 20

# A bare (unquoted) integer key right after '{' or ',' (whitespace allowed), outside strings.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.S)


class FastjsonError(CorruptFileError, ValueError):
    """Text that is not JSON, even as fastjson writes it (``path`` names its source)."""


def _quote(m: re.Match) -> str:
    if m.group(1) is None:
        return m.group(0)  # a string literal: leave it alone
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'


def loads_fastjson(
    data: bytes | bytearray | str, source: str = "<json>", *, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse ``data`` (UTF-8 bytes or text) as fastjson writes it, within limits (what comes off
    the network or a damaged disk is not trusted): nesting depth, integer length, finite
    numbers only. A limit broken is a :class:`FastjsonLimitError` (a JsonLimitError), other bad text a
    :class:`FastjsonError` (both ``ValueError``); never RecursionError or OverflowError."""
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonError(source, f"not UTF-8 at byte {exc.start}") from exc
    else:
        text = data
    return _loads_fastjson_bounded(text, source, max_depth)


def _loads_fastjson_bounded(text: str, source: str, max_depth: int) -> Any:
    try:
        return loads_bounded(text, max_depth)
    except JsonLimitError as exc:
        raise FastjsonLimitError(source, str(exc)) from exc
    except ValueError:
        pass
    try:
        return loads_bounded(_TOKEN.sub(_quote, text), max_depth)
    except JsonLimitError as exc:
        raise FastjsonLimitError(source, str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise FastjsonError(
            source, f"not JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


class JsonLimitError(ValueError):
    """A JSON document breaks a limit: nesting depth, a number's range or a size."""


class FastjsonLimitError(FastjsonError, JsonLimitError):
    """A limit broken in a named source: both a JsonLimitError (remoting answers it as such)
    and a FastjsonError, so a config file over a limit is as unusable as a corrupt one (its
    verified other copy is used instead)."""


def parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise JsonLimitError(f"integer of {len(text)} characters (at most {MAX_JSON_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > 64:
        raise JsonLimitError(f"number of {len(text)} characters (at most 64)")
    value = float(text)
    if not math.isfinite(value):
        raise JsonLimitError(f"number {text} is out of range")
    return value


def _parse_constant(name: str):
    raise JsonLimitError(f"{name} is not a JSON number")


_bounded_decoder = json.JSONDecoder(
    parse_int=parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)
# a string literal (skipped whole) or one bracket
_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def check_json_depth(text: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise JsonLimitError when ``text`` nests deeper than ``max_depth`` (before json.loads,
    whose recursion would otherwise end in RecursionError)."""
    if text.count("{") + text.count("[") <= max_depth:
        return  # cannot nest deeper than it has openers: the usual case, two C-speed counts
    depth = 0
    for match in _JSON_NESTING.finditer(text):
        ch = match.group()
        if ch in "{[":
            depth += 1
            if depth > max_depth:
                raise JsonLimitError(f"nested deeper than {max_depth} levels")
        elif ch in "}]":
            depth -= 1


def loads_bounded(text: str, max_depth: int = MAX_JSON_DEPTH):
    """json.loads with limits: nesting depth, integer length, finite numbers only. Every
    violation is a ValueError (JsonLimitError); never RecursionError or OverflowError."""
    check_json_depth(text, max_depth)
    try:
        return _bounded_decoder.decode(text)
    except RecursionError as exc:  # belt and braces: the depth check should have caught it
        raise JsonLimitError(f"nested too deeply: {exc}") from exc
