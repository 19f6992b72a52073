"""Real processes on 127.0.0.1 for the demo and benchmarks: a name server and broker nodes.

Each process runs ``python -m broker.cli ...`` with its stderr in a log file; ``start`` returns
once its port accepts connections (or raises with the log's tail when the process died).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from contracts.errors import HaproofError


class LocalProcessError(HaproofError):
    """A local process did not start or did not stop in time."""


# Listening ports are picked below Linux's ephemeral range (32768-60999): a port the kernel
# hands to some outgoing connection between our probe and a (re)start's bind cannot clash.
PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A port that is free now, outside the ephemeral range."""
    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range is crowded: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat_fields(pid: int | str) -> list[str]:
    """``/proc/PID/stat`` after the command name: state, ppid, ... (utime is index 11)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux /proc)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                ppid = int(_stat_fields(name)[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(name))
    return out


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class LocalProcess:
    """Use ``LocalProcess.start(...)``; no process is started by ``__init__``."""

    def __init__(self, name: str, proc: subprocess.Popen, port: int, log_path: Path, log_file):
        self.name, self.proc, self.port, self.log_path = name, proc, port, log_path
        self._log_file = log_file
        self.addr = f"127.0.0.1:{port}"

    @classmethod
    def start(
        cls,
        name: str,
        args: list[str],
        port: int,
        log_path: Path,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        module: str = "broker.cli",
    ) -> LocalProcess:
        """Run ``python -m {module} {args}`` (tests wrap the CLI in a module of their own)."""
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=log_file,
            stderr=log_file,
            env={**os.environ, **(env or {})},
        )
        me = cls(name, proc, port, log_path, log_file)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return me
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    me.kill()
                    raise LocalProcessError(
                        f"{name} did not start listening on {port}; log {log_path}:\n"
                        + _tail(log_path)
                    ) from None
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the node flushes and persists everything."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired as exc:
                self.kill()
                raise LocalProcessError(f"{self.name} ignored SIGTERM for {timeout_s}s") from exc
        self._log_file.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (a crash), then reap."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


def start_namesrv(
    workdir: Path, env: dict[str, str] | None = None, log_level: str = "INFO"
) -> LocalProcess:
    port = free_port()
    args = ["--log-level", log_level, "namesrv", "--host", "127.0.0.1", "--listen-port", str(port)]
    return LocalProcess.start("namesrv", args, port, workdir / "namesrv.log", env)


def write_broker_conf(path: Path, props: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def start_broker(
    name: str,
    conf: Path,
    port: int,
    workdir: Path,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
) -> LocalProcess:
    args = ["--log-level", log_level, "broker", "-c", str(conf), "--host", "127.0.0.1"]
    return LocalProcess.start(name, args, port, workdir / f"{name}.log", env)


def start_controller(
    workdir: Path,
    props: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
    name: str = "controller",
    port: int = 0,
) -> LocalProcess:
    """A standalone controller (``haproof controller -c``) with its journal in the workdir;
    ``props`` are ControllerConfig keys; ``port`` 0: a free one."""
    port = port or free_port()
    conf = write_broker_conf(
        workdir / f"{name}.conf",
        {"listenPort": port, "controllerStorePath": workdir / name, **(props or {})},
    )
    args = ["--log-level", log_level, "controller", "-c", str(conf)]
    return LocalProcess.start(name, args, port, workdir / f"{name}.log", env)
