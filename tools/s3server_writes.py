"""The embedded S3 server's writes (tools/s3server.py runs moto with these patches): a body read
and stored without copies (:func:`read_bodies_in_one_piece`, :func:`store_bodies_without_copies`)
and a conditional PUT's check and write as one step (:func:`conditional_puts_one_at_a_time`)."""

from __future__ import annotations


def read_bodies_in_one_piece() -> None:
    """Patch werkzeug, in the server process, so that a request body of known length is read
    with one ``read`` of the socket's buffered reader (a bytes object filled in place) instead
    of 64 KiB reads gathered into a bytearray and copied out: for an 8 MiB PUT that is one
    fresh 8 MiB buffer touched instead of two. Bodies without a Content-Length (chunked, or
    capped by a maximum) keep werkzeug's own path; a short read is a disconnect, as there."""
    from werkzeug.wsgi import LimitedStream

    readall = LimitedStream.readall

    def readall_in_one_piece(self) -> bytes:
        if self._limit_is_max or self.is_exhausted or not hasattr(self._stream, "read"):
            return readall(self)
        parts = []
        while not self.is_exhausted:
            try:
                data = self._stream.read(self.limit - self._pos)
            except (OSError, ValueError) as exc:
                self.on_disconnect(error=exc)
                break
            if not data:
                self.on_disconnect()
                break
            self._pos += len(data)
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    LimitedStream.readall = readall_in_one_piece


def store_bodies_without_copies() -> None:
    """Patch moto, in the server process, so that storing an object copies nothing: an object
    kept in memory (up to ``tools.s3server.KEY_BUFFER_BYTES``, the size it sets) is held in a ``BytesIO`` made from the
    request's own bytes object (it shares its memory) instead of a copy written into moto's
    spooled file, and its MD5 ETag is computed from those bytes at once instead of later from a
    second copy read back out. Larger objects (in a spooled file again, as moto keeps them), and
    keys that come with their ETag (multipart: "<md5 of the parts' md5s>-<parts>"), take moto's
    own path."""
    import io
    import tempfile

    from moto.s3.models import FakeKey
    from moto.utilities.utils import md5_hash

    value = FakeKey.value

    def set_value(key, new_value) -> None:
        if type(new_value) is bytes and len(new_value) <= key._max_buffer_size:
            key._value_buffer = io.BytesIO(new_value)  # shares new_value's memory until written
            key._value_buffer.seek(0, io.SEEK_END)  # where moto's write would have left it
            key.contentsize = len(new_value)
        else:
            if not isinstance(key._value_buffer, tempfile.SpooledTemporaryFile):
                key._value_buffer = tempfile.SpooledTemporaryFile(key._max_buffer_size)
            value.fset(key, new_value)
        if key._etag is None and isinstance(new_value, bytes):
            key._etag = md5_hash(new_value).hexdigest()

    FakeKey.value = property(value.fget, set_value)


def conditional_puts_one_at_a_time() -> None:
    """Patch moto, in the server process, so that PUTs carrying ``If-Match`` or
    ``If-None-Match`` run one at a time (their condition checked and the object stored under
    one lock); other requests are untouched."""
    import threading

    from moto.s3.responses import S3Response

    put_object = S3Response.put_object
    lock = threading.Lock()

    def put_object_conditionally(self):
        if "If-Match" in self.headers or "If-None-Match" in self.headers:
            with lock:
                return put_object(self)
        return put_object(self)

    S3Response.put_object = put_object_conditionally
