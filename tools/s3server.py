"""The embedded S3 API server: moto's server as a subprocess on 127.0.0.1.

Used by the demo, the tests and the benchmarks; boto3 talks to it over real HTTP.

Range GETs: moto answers one by building the whole object in memory and slicing it (a 1 KiB
range of a 64 MiB chunk costs ~35 ms of server CPU). The subprocess runs this module, which
patches only that path (:func:`serve_ranges_from_the_buffer`, ``tools/s3server_ranges.py``): a Range GET streams just its
bytes from the object's buffer, in 1 MiB pieces. ``HAPROOF_S3_MOTO_RANGES=1`` keeps moto's
range path.

Writes: werkzeug reads a body in 64 KiB pieces and copies them out of a bytearray, moto copies
the body into the object's buffer and later reads it all back to compute the MD5 ETag: three
fresh copies of every chunk, most of the server's CPU per MB. :func:`read_bodies_in_one_piece`
and :func:`store_bodies_without_copies` (``tools/s3server_writes.py``) keep one (the bytes read from the socket) and hash it
once (4.7 -> 2.7 ms of server CPU per MB PUT on 2 cores). What moto answers is unchanged.
``HAPROOF_S3_MOTO_PLAIN=1`` runs moto with no patches but the next one.

Conditional writes: moto honours ``If-None-Match: *`` and ``If-Match`` on PutObject, but checks
the condition and stores the object as two steps, and its server answers requests on threads:
two conditional PUTs of one key could both pass. :func:`conditional_puts_one_at_a_time` makes a
conditional PUT's check and write one step, as S3 does (the audit's lease rests on it).

Listings: moto walks and sorts every key of a bucket for each ListObjectsV2 page;
:func:`list_from_a_sorted_index` answers from a sorted index instead, as S3 does, so a
listing's cost follows what it returns (``bench history`` on a year of keys).

Memory per object: :func:`tools.s3server_keys.keep_keys_lean` cuts what moto holds besides an
object's name and bytes (~3.6 KB per small object) by sharing what every key holds alike
(``HAPROOF_S3_MOTO_FAT_KEYS=1`` keeps moto's keys). Preload: ``S3Server.start(preload=...)``
fills buckets from directories before the server answers (``tools/s3server_preload.py``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from contracts.errors import ArchiveError
from tools.proc_status import status_mb
from tools.s3server_index import list_from_a_sorted_index
from tools.s3server_keys import keep_keys_lean
from tools.s3server_preload import PRELOAD_ENV, REPORT_ENV, preload_from_env
from tools.s3server_ranges import serve_ranges_from_the_buffer
from tools.s3server_writes import (
    conditional_puts_one_at_a_time,
    read_bodies_in_one_piece,
    store_bodies_without_copies,
)

log = logging.getLogger(__name__)

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "haproof-test",
    "AWS_SECRET_ACCESS_KEY": "haproof-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# moto keeps an object in memory up to this size and spills larger ones to a temporary file
# (its default is just under 5 MiB); chunks are up to archiveChunkMaxBytes (64 MiB by default),
# and spilling them costs the server ~40 % more CPU per MB written here
KEY_BUFFER_BYTES = 72 * 1024 * 1024


class S3Server:
    """A running moto server; create with :meth:`start`, end with :meth:`stop`."""

    def __init__(self, port: int, proc: subprocess.Popen):
        self.port = port
        self.proc = proc
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self.preloaded: dict | None = None  # objects, bytes, s: what start's preload stored
        self._work = ""

    @classmethod
    def start(
        cls,
        port: int | None = None,
        timeout_s: float = 30.0,
        nice: int = 0,
        preload: dict[str, tuple[str, str]] | None = None,
        preload_timeout_s: float = 7200.0,
    ) -> S3Server:
        """``nice``: a CPU priority increment for the server process. ``bench archive`` runs it
        at 19: it stands in for remote storage and should not take CPU from the broker it
        measures (on a small machine it would otherwise, as a remote S3 never does).

        ``preload``: ``{bucket: (prefix, directory)}``, buckets the server creates and fills
        from directories before it answers (``tools/s3server_preload.py``; given up after
        ``preload_timeout_s`` more); what it loaded is in :attr:`preloaded`."""
        from tools.localcluster import free_port

        if importlib.util.find_spec("moto") is None:  # the tools extra is not installed
            raise ModuleNotFoundError("No module named 'moto'", name="moto")
        port = port or free_port()
        env = dict(os.environ)
        env.update(DUMMY_CREDENTIALS)
        env.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(KEY_BUFFER_BYTES))
        work = tempfile.mkdtemp(prefix="haproof-s3server-")
        if preload:
            env[PRELOAD_ENV] = json.dumps(
                {b: [p, os.path.abspath(d)] for b, (p, d) in preload.items()}
            )
            env[REPORT_ENV] = os.path.join(work, "preload.json")
            timeout_s += preload_timeout_s
        errors = open(os.path.join(work, "stderr"), "wb")  # noqa: SIM115 (the server's)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tools.s3server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=errors,
                env=env,
            )
        finally:
            errors.close()
        server = cls(port, proc)
        server._work = work
        if nice:
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        server._wait_ready(timeout_s)
        if preload:
            with open(env[REPORT_ENV]) as fh:
                server.preloaded = json.load(fh)
        log.info("embedded S3 server on %s", server.endpoint_url)
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                tail = self.stderr_tail()
                self.stop()
                raise ArchiveError(
                    f"moto S3 server exited with {self.proc.returncode} at start: {tail}"
                )
            try:
                with urllib.request.urlopen(self.endpoint_url + "/moto-api/", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise ArchiveError(
                        f"moto S3 server did not answer on port {self.port} in {timeout_s}s"
                    ) from None
                time.sleep(0.05)

    def stderr_tail(self, n: int = 2000) -> str:
        """The end of what the server wrote to stderr (its last lines: a traceback)."""
        try:
            with open(os.path.join(self._work, "stderr"), "rb") as fh:
                return fh.read()[-n:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def rss_mb(self, field: str = "VmRSS") -> float | None:
        """The server process's resident memory (``VmRSS``; ``VmHWM``: its peak) in MiB."""
        return status_mb(self.proc.pid, field)

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DUMMY_CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def store_options(self) -> dict[str, str]:
        """Keyword arguments for ``open_store`` / ``StoreSpec`` that reach this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "access_key": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret_key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region": DUMMY_CREDENTIALS["AWS_DEFAULT_REGION"],
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._work:
            shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def list_moto_modules_once() -> None:
    """Patch moto, in the server process, so that the list of its service packages (which its
    dispatcher asks for on every request, to map a host name to a backend) is read from disk
    once, not with a directory listing and a stat per package per request (a fifth of the
    server's CPU for a small PUT)."""
    import functools

    from moto import backends

    listed = backends.list_of_moto_modules
    backends.list_of_moto_modules = functools.cache(lambda: tuple(listed()))


def main() -> None:
    """``python -m tools.s3server -H HOST -p PORT``: moto's server, patched as above
    (``HAPROOF_S3_MOTO_PLAIN=1``: no patches at all)."""
    if os.environ.get("HAPROOF_S3_MOTO_PLAIN") != "1":
        list_moto_modules_once()
        read_bodies_in_one_piece()
        store_bodies_without_copies()
        if os.environ.get("HAPROOF_S3_MOTO_FAT_KEYS") != "1":
            keep_keys_lean()  # tools/s3server_keys.py
        list_from_a_sorted_index()  # tools/s3server_index.py
        if os.environ.get("HAPROOF_S3_MOTO_RANGES") != "1":
            serve_ranges_from_the_buffer()
    conditional_puts_one_at_a_time()
    preload_from_env()  # tools/s3server_preload.py: before the server answers
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
