"""One ``haproof admin`` verb as data: its name, help, run function, which addresses it takes
and its own options. The tables are broker/admin/verbs.py (and controller_verbs.py's); the
parsers are built from them by broker/admin/cli.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Arg:
    """``add_argument(*flags, **options)``."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class Verb:
    """``targets``: "both" (``--namesrv`` and ``--broker-addr``) or "namesrv"."""

    name: str
    help: str
    run: Callable[..., int]
    targets: str = "both"
    args: tuple[Arg, ...] = ()


def namesrv_verb(name: str, help_text: str, run: Callable[..., int], *args: Arg) -> Verb:
    """A verb that takes ``--namesrv`` only."""
    return Verb(name, help_text, run, "namesrv", args)


def verb(name: str, help_text: str, run: Callable[..., int], *args: Arg) -> Verb:
    """A verb that takes ``--namesrv`` or ``--broker-addr``."""
    return Verb(name, help_text, run, "both", args)
