"""Event kinds of controller mode (DESIGN.md section 3), and the fields each must carry: part
of the archive's event contract (``contracts/archive_layout.py`` accepts them), produced by
``broker/controller`` (elections, SyncStateSet changes) and the broker side (lease expiry).

- ``elected``: ``masterEpoch``, ``syncStateSetEpoch``, ``unclean``, ``candidates`` (each
  ``node``, ``brokerId``, ``epoch``, ``maxOffset``, ``confirmOffset``, ``priority``,
  ``inSyncStateSet``, ``alive``, as the controller saw them), ``brokerId`` of the new master.
- ``election_failed`` (proposed here, not in DESIGN.md): a controller-triggered election found no
  candidate; the group has no master under ``masterEpoch``.
- ``sync_state_set_changed``: ``members`` (node addresses), ``memberIds``, ``syncStateSetEpoch``.
- ``lease_lost``: a master that stopped taking writes, ``lastContactAt``.

The controller knows brokers by address, not by ``nodeName``: in the records it writes,
``node`` (and each candidate's ``node``) is the broker's address as registered.
"""

from __future__ import annotations

CONTROLLER_EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "elected": ("masterEpoch", "syncStateSetEpoch", "unclean", "candidates"),
    "election_failed": ("masterEpoch", "candidates"),
    "sync_state_set_changed": ("members", "syncStateSetEpoch"),
    "lease_lost": ("lastContactAt",),
}
