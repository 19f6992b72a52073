"""Event kinds about a node's own commit log (DESIGN.md section 3), and the fields each must
carry with their JSON types: part of the archive's event contract (``contracts/archive_layout.py``
accepts them), written by the shipper (``broker/archive/shipper.py``), judged by the audit's
log integrity (``spark_jobs/log_damage.py``).

- ``log_damaged``: shipping stopped at structural damage in the node's log (a bad magic code,
  sizes that do not chain, a torn record): ``offset``, the physical offset of the first byte
  that is not a record (the archive holds the log below it, nothing from it on), and
  ``reason``, what is wrong there. Written once per damaged offset, however often shipping is
  retried; a record whose body CRC fails is shipped as is instead (the audit finds it at its
  offset).
"""

from __future__ import annotations

LOG_DAMAGED = "log_damaged"

LOG_EVENT_FIELDS: dict[str, dict[str, type]] = {
    LOG_DAMAGED: {"offset": int, "reason": str},
}

#: the longest ``reason`` a ``log_damaged`` event carries (the rest is cut)
REASON_MAX_CHARS = 500
