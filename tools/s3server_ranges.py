"""The embedded S3 server's Range GETs (tools/s3server.py runs moto with this patch): moto answers
one by building the whole object in memory and slicing it (a 1 KiB range of a 64 MiB chunk costs
~35 ms of server CPU); :func:`serve_ranges_from_the_buffer` streams just the range's bytes from
the object's buffer, in pieces of ``RANGE_PIECE_BYTES``."""

from __future__ import annotations

from contracts.errors import ArchiveError

# Range GETs are answered in pieces of this many bytes (each one copied out of the object's
# buffer on its own: no copy of the whole object per request)
RANGE_PIECE_BYTES = 1 << 20


class _KeyBytes:
    """Stands for a moto key's bytes during a Range GET: moto's range code asks its length and
    slices it, and the slice reads only that range."""

    def __init__(self, key):
        self.key = key

    def __len__(self) -> int:
        return self.key.size

    def __getitem__(self, span: slice) -> _RangeBody:
        start, stop, _step = span.indices(len(self))
        return _RangeBody(self.key, start, max(start, stop))

    def read_all(self) -> bytes:
        return b"".join(_RangeBody(self.key, 0, len(self)))


class _RangeBody:
    """The response body of a Range GET: bytes [start, end) of the key, read piece by piece
    under the key's lock (the object a GET started on stays the one it reads: a PUT to the same
    name makes a new moto key)."""

    def __init__(self, key, start: int, end: int):
        self.key, self.start, self.end = key, start, end

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self):
        pos = self.start
        while pos < self.end:
            n = min(RANGE_PIECE_BYTES, self.end - pos)
            with self.key.lock:
                buf = self.key._value_buffer
                buf.seek(pos)
                piece = buf.read(n)
            if len(piece) != n:
                raise ArchiveError(f"object {self.key.name} shrank while it was being read")
            yield piece
            pos += n


def serve_ranges_from_the_buffer() -> None:
    """Patch moto, in the server process, so that a GET with a Range header reads only its
    range. moto's ``get_object`` takes ``key.value`` (the whole object); during a Range GET that
    attribute yields a :class:`_KeyBytes` instead, which moto's own range handling slices into a
    streamed :class:`_RangeBody`. Where moto ends up not slicing (a multi-range or unparsable
    header: it answers 200 with the whole object), the bytes are read in full as before."""
    import threading

    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    ranged = threading.local()  # werkzeug serves each request on its own thread
    value = FakeKey.value

    def get_value(key):
        if getattr(ranged, "on", False):
            return _KeyBytes(key)
        return value.fget(key)

    FakeKey.value = property(get_value, value.fset)
    get_object = S3Response.get_object
    key_response = S3Response.key_response

    def get_object_ranged(self):
        ranged.on = bool(self.headers.get("range"))
        try:
            return get_object(self)
        finally:
            ranged.on = False

    def key_response_whole_when_unsliced(self, *args, **kwargs):
        result = key_response(self, *args, **kwargs)
        if isinstance(result, tuple) and len(result) == 3 and isinstance(result[2], _KeyBytes):
            result = (result[0], result[1], result[2].read_all())
        return result

    S3Response.get_object = get_object_ranged
    S3Response.key_response = key_response_whole_when_unsliced
