"""The embedded S3 API server: moto's server as a subprocess on 127.0.0.1.

Used by the demo, the tests and the benchmarks; boto3 talks to it over real HTTP.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.request

from broker.errors import ArchiveError

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

    @classmethod
    def start(cls, port: int | None = None, timeout_s: float = 30.0) -> S3Server:
        from broker.localcluster import free_port

        port = port or free_port()
        env = dict(os.environ)
        env.update(DUMMY_CREDENTIALS)
        env.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(KEY_BUFFER_BYTES))
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        server = cls(port, proc)
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise ArchiveError(f"moto S3 server exited with {proc.returncode} at start")
            try:
                with urllib.request.urlopen(server.endpoint_url + "/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    server.stop()
                    raise ArchiveError(
                        f"moto S3 server did not answer on port {port} in {timeout_s}s"
                    ) from None
                time.sleep(0.05)
        log.info("embedded S3 server on %s", server.endpoint_url)
        return server

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

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
