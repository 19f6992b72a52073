"""The node's configuration as it is now: one holder every part reads through.

``BrokerConfig`` is frozen: what was configured. A runtime change (``haproof admin
updateBrokerConfig``, ``broker/runtime_config.py``) builds a new one and assigns it here, once;
every part was handed this same holder, so the next read anywhere sees the change. Attribute
reads go through to the current config (``live.max_message_size_bytes`` is
``live.current.max_message_size_bytes``), so a part reads a ``LiveConfig`` as it would read a
``BrokerConfig``.
"""

from __future__ import annotations

from typing import Any

from broker.config import BrokerConfig


class LiveConfig:
    """``current`` is the config now; assigning it is the whole of a runtime change."""

    __slots__ = ("current",)

    def __init__(self, config: BrokerConfig) -> None:
        self.current = config

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not this holder's own (``current``): a config field
        return getattr(self.current, name)

    def __repr__(self) -> str:
        return f"LiveConfig({self.current.broker_name!r})"
