"""An event log in memory (no I/O): for the deterministic simulation and unit tests. Same
contract as the journal: ``append`` applies the events in order once "committed"; ``entries``
keeps every encoded event so a run can be replayed into a fresh state machine."""

from __future__ import annotations

from broker.controller.events import Event, decode_event, encode_event
from broker.controller.state_machine import ControllerStateMachine


class MemoryLog:
    def __init__(self, sm: ControllerStateMachine, leader_addr: str | None = None) -> None:
        self.sm = sm
        self.entries: list[bytes] = []
        self.leader = True
        self._leader_addr = leader_addr

    def open(self) -> int:
        return 0

    def is_leader(self) -> bool:
        return self.leader

    def leader_addr(self) -> str | None:
        return self._leader_addr

    async def barrier(self) -> bool:
        return False  # one controller: it leads from its start (the start's grace covers it)

    async def append(self, events: list[Event]) -> None:
        for event in events:
            data = encode_event(event)
            self.entries.append(data)
            self.sm.apply(decode_event(data))

    def replay_into(self, sm: ControllerStateMachine) -> None:
        for data in self.entries:
            sm.apply(decode_event(data))

    def close(self) -> None:
        return None
