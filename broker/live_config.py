"""The node's configuration as it is now: one holder every part reads through.

``BrokerConfig`` is frozen: what was configured. A runtime change (``haproof admin
updateBrokerConfig``, ``broker/runtime_config.py``) builds a new one and assigns it here, once;
every part was handed this same holder, so the next read anywhere sees the change. A part reads
a ``LiveConfig`` as it would read a ``BrokerConfig`` (``live.max_message_size_bytes``): the
assignment copies the new config's fields and derived values (its properties) into the holder
in one swap, so a read on the send path is a plain attribute read.
"""

from __future__ import annotations

from typing import Any

from broker.config import BrokerConfig

# the config's derived values (broker_addr, store_host, ...), copied with its fields
_DERIVED: dict[str, property] = {
    name: attr for name, attr in vars(BrokerConfig).items() if isinstance(attr, property)
}


class LiveConfig:
    """``current`` is the config now; assigning it is the whole of a runtime change."""

    current: BrokerConfig

    def __init__(self, config: BrokerConfig) -> None:
        self.current = config

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "current":
            raise AttributeError(f"a LiveConfig only changes by assigning .current, not .{name}")
        fields = dict(vars(value))
        fields.update({name: prop.fget(value) for name, prop in _DERIVED.items()})
        fields["current"] = value
        object.__setattr__(self, "__dict__", fields)  # one swap: readers see old or new

    def __getattr__(self, name: str) -> Any:
        # only reached for what is not copied: the config's methods
        return getattr(self.current, name)

    def __repr__(self) -> str:
        return f"LiveConfig({self.current.broker_name!r})"
