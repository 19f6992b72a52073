"""``python -m tests.support.hooked_broker [--crash-at STEP] ARGS...``: ``haproof ARGS...`` (a
broker) with two fault points for the process tests, without a fault switch in the broker:

- ``--crash-at STEP``: exit at once with status 9, as a kill -9 would (no flush, no cleanup),
  right after the step ``STEP`` of a rejoin cut (``broker/ha/rejoin_cut.py``: ``rejoin_marker``,
  ``epochs_cut``, ``marker``, ``commitlog``, ``queues``, ``epochs_adopted``);
- SIGUSR1: from then on, as a master, send nothing more to its slaves on their HA connections
  (the bytes are dropped; the connections stay open and the slaves' reports still arrive), as a
  link that went silent one way: what the node writes next reaches no slave.
"""

from __future__ import annotations

import os
import signal
import sys

from broker.ha import reconcile, service

EXIT_CODE = 9
_silent = False


class _SilenceableWriter:
    """An HA connection's writer that drops what it is given once SIGUSR1 came."""

    def __init__(self, writer) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        if not _silent:
            self._writer.write(data)

    def __getattr__(self, name: str):
        return getattr(self._writer, name)


def _crash_at(step: str) -> None:
    real = reconcile.rejoin_cut

    def crashing(store, role, point, theirs, notify, on_step=None):
        def hook(name: str) -> None:
            if on_step is not None:
                on_step(name)
            if name == step:
                sys.stderr.write(f"hooked_broker: exit at rejoin cut step {name}\n")
                sys.stderr.flush()
                os._exit(EXIT_CODE)

        real(store, role, point, theirs, notify, hook)

    reconcile.rejoin_cut = crashing


def _silence_on_sigusr1() -> None:
    real_init = service.HAConnection.__init__

    def init(self, svc, reader, writer, peer) -> None:
        real_init(self, svc, reader, _SilenceableWriter(writer), peer)

    def silence(_signum, _frame) -> None:
        global _silent
        _silent = True

    service.HAConnection.__init__ = init
    signal.signal(signal.SIGUSR1, silence)


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--crash-at"]:
        _crash_at(args[1])
        args = args[2:]
    _silence_on_sigusr1()
    from broker.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
