import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.nodes import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wait_port(proc, port: int, log_path, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"{what} did not start: {log_path.read_text()}") from None
            time.sleep(0.05)


class Proc:
    def __init__(self, argv, log_path, port, what):
        self.log_path = log_path
        self.log_file = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, cwd=ROOT, stderr=self.log_file)
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        _wait_port(self.proc, port, log_path, what)

    def terminate(self, timeout_s: float = 20) -> int:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout_s)
        self.log_file.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


@pytest.fixture
def namesrv(tmp_path):
    port = free_port()
    p = Proc(
        [sys.executable, "-m", "broker.namesrv", "--host", "127.0.0.1", "--listen-port", str(port)],
        tmp_path / "namesrv.log",
        port,
        "namesrv",
    )
    yield p
    p.kill()


def write_conf(path, store_dir, port, namesrv_addr, **extra) -> str:
    props = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "storePathRootDir": store_dir,
        "listenHost": "127.0.0.1",  # tests never listen beyond loopback
        "listenPort": port,
        "namesrvAddr": namesrv_addr,
        "mappedFileSizeCommitLog": 4 * 1024 * 1024,
        "flushConsumerOffsetInterval": 500,
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


@pytest.fixture
def start_broker(tmp_path, namesrv):
    started = []

    def start(name="broker-a", **extra):
        port = free_port()
        conf = write_conf(
            tmp_path / f"{name}.conf",
            str(tmp_path / f"store-{name}"),
            port,
            namesrv.addr,
            brokerName=name,
            **extra,
        )
        p = Proc(
            [sys.executable, "-m", "broker.cli", "--log-level", "INFO", "broker", "-c", conf],
            tmp_path / f"{name}.log",
            port,
            "broker",
        )
        p.store_dir = tmp_path / f"store-{name}"
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
