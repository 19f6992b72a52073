"""A name server and a broker group running as real processes on 127.0.0.1, for the tests of
what operators drive over the network (mqadmin verbs, the metrics endpoint): ``running_group``
starts a name server, a master ``m`` and optionally a slave ``s`` (cluster ``C``, group
``broker-a``), and kills them whatever happens; ``admin`` / ``admin_json`` run
``haproof admin`` (``--json`` documents validated against docs/schemas/admin.schema.json)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand
from tests.support import schemas
from tests.support.cluster import node_conf
from tools.localcluster import LocalProcess, free_port, start_broker, start_namesrv


def admin(*args: str) -> subprocess.CompletedProcess:
    """``haproof admin ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def admin_json(*args: str, rc: int = 0):
    """``haproof admin ARGS --json``: exit status ``rc``, the document checked against the
    verb's schema."""
    res = admin(*args, "--json")
    assert res.returncode == rc, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    schemas.validate(doc, "admin", args[0])
    return doc


@dataclass
class Group:
    tmp: Path
    ns: LocalProcess
    m: LocalProcess
    s: LocalProcess | None = None
    procs: list[LocalProcess] = field(default_factory=list)


@contextlib.contextmanager
def running_group(
    tmp: Path,
    *,
    slave: bool = False,
    namesrv_conf: dict[str, object] | None = None,
    master: dict[str, object] | None = None,
    slave_props: dict[str, object] | None = None,
    **props: object,
) -> Iterator[Group]:
    """A name server (``namesrv_conf``: a namesrv.conf's keys, given with ``-c``), a master
    (SYNC_MASTER with a slave, else ASYNC_MASTER) and with ``slave`` its slave; ``props`` go to
    both brokers' broker.conf, ``master`` / ``slave_props`` to one."""
    procs: list[LocalProcess] = []
    try:
        ns = _namesrv(tmp, namesrv_conf)
        procs.append(ns)
        m_port, m_ha = free_port(), free_port()
        role = "SYNC_MASTER" if slave else "ASYNC_MASTER"
        m_conf = node_conf(tmp, "m", 0, role, m_port, m_ha, ns.addr, **props, **(master or {}))
        procs.append(start_broker("m", m_conf, m_port, tmp))
        group = Group(tmp, ns, procs[-1], procs=procs)
        if slave:
            s_port = free_port()
            more = {"haMasterAddress": f"127.0.0.1:{m_ha}", **props, **(slave_props or {})}
            s_conf = node_conf(tmp, "s", 1, "SLAVE", s_port, free_port(), ns.addr, **more)
            group.s = start_broker("s", s_conf, s_port, tmp)
            procs.append(group.s)
        yield group
    finally:
        for p in procs:
            p.kill()


def _namesrv(tmp: Path, conf: dict[str, object] | None) -> LocalProcess:
    if conf is None:
        return start_namesrv(tmp)
    port = free_port()
    path = tmp / "namesrv.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in {"listenPort": port, **conf}.items()))
    args = ["namesrv", "--host", "127.0.0.1", "-c", str(path)]
    return LocalProcess.start("namesrv", args, port, tmp / "namesrv.log")


async def invoke(addr: str, code: RequestCode, fields: dict | None = None, body: bytes = b""):
    """One request to ``addr`` on a client of its own."""
    from broker.remoting.client import RemotingClient

    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, fields or {}, body), 10_000)
    finally:
        await client.close()
