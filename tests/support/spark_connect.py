"""A local Spark Connect server for the tests that audit through ``sc://``: a plain local Spark
session with the Connect plugin (its jar ships with pyspark), in a child process of its own,
until the ``with`` block ends (its stdin closed, then its exit awaited; killed if it hangs)."""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

SERVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(sys.argv[2])
             .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.port", sys.argv[1])
             .config("spark.connect.grpc.binding.address", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    spark.stop()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spark_connect_server(master: str = "local[2]", ready_timeout_s: float = 300) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1, ready: yields its ``sc://127.0.0.1:PORT``."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), master],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        readable, _, _ = select.select([server.stdout], [], [], ready_timeout_s)
        line = server.stdout.readline() if readable else ""
        assert line.strip() == "ready", (
            f"the Spark Connect server did not say ready within {ready_timeout_s} s "
            f"(exit status {server.poll()})"
        )
        # whatever the server writes later must not fill the pipe and stop it
        threading.Thread(target=server.stdout.read, daemon=True).start()
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
