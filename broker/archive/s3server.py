"""The embedded S3 API server: moto's server as a subprocess on 127.0.0.1.

Used by the demo, the tests and the benchmarks; boto3 talks to it over real HTTP.
"""

from __future__ import annotations

import logging
import os
import socket
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """A running moto server; create with :meth:`start`, end with :meth:`stop`."""

    def __init__(self, port: int, proc: subprocess.Popen):
        self.port = port
        self.proc = proc
        self.endpoint_url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, port: int | None = None, timeout_s: float = 30.0) -> S3Server:
        port = port or free_port()
        env = dict(os.environ)
        env.update(DUMMY_CREDENTIALS)
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
