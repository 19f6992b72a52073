"""How much of an archive object a reader takes: the documented limits every part that reads the
archive or the audit's outputs (the audit, the report, a broker resuming, a prune) holds to.
What is bigger, deeper or not a regular file is refused with an error naming the key: an archive
finding in the audit and the report, never a reader that runs out of memory or hangs.

- An object is read only from a regular file (``file://``: a FIFO, a device or a socket in the
  archive is refused, never opened for a blocking read), and never beyond a limit: a chunk's
  manifest size (one byte more is read to tell a longer object), else ``MAX_OBJECT_BYTES``.
- A JSON document (manifest, snapshot, event, ``verdict.json``, ``_audit/state.json``, a
  retention marker, the expectations summary): at most ``MAX_JSON_DOC_BYTES`` and nested at
  most ``MAX_JSON_DOC_DEPTH`` levels, integers of at most 20 digits, finite numbers only.
- A Parquet table of the audit's outputs: at most ``MAX_PARQUET_BYTES`` on disk and
  ``MAX_PARQUET_ROWS`` rows, ``MAX_PARQUET_UNCOMPRESSED_BYTES`` as its metadata declares.
"""

from __future__ import annotations

from typing import Any

from contracts.fastjson import loads_bounded

MAX_OBJECT_BYTES = 1 << 30  # any object read without a tighter limit (chunks are <= 64 MiB)
MAX_JSON_DOC_BYTES = 16 * 1024 * 1024
MAX_JSON_DOC_DEPTH = 32
MAX_PARQUET_BYTES = 512 * 1024 * 1024
MAX_PARQUET_ROWS = 50_000_000
MAX_PARQUET_UNCOMPRESSED_BYTES = 4 << 30


def load_json_doc(
    data: bytes | str, what: str = "document", error: type[ValueError] = ValueError
) -> Any:
    """Parse one JSON document within the limits above; ``error`` (a ValueError, naming
    ``what``) when it is not JSON or breaks a limit."""
    try:
        if len(data) > MAX_JSON_DOC_BYTES:
            raise ValueError(f"{len(data)} bytes, more than {MAX_JSON_DOC_BYTES}")
        if isinstance(data, bytes | bytearray):
            data = bytes(data).decode("utf-8")  # UnicodeDecodeError is a ValueError
        return loads_bounded(data, MAX_JSON_DOC_DEPTH)
    except ValueError as exc:
        raise error(f"{what}: not a usable JSON document: {exc}") from exc
