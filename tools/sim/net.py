"""The simulated network: in-memory connections between simulated hosts.

Each connection keeps FIFO order per direction; every write is delivered after a delay drawn
from the run's random generator. Faults: a partition between two nodes black-holes their
connections (writes vanish, nothing is delivered, new connections hang until the caller's
timeout); a heal resets the black-holed connections (as TCP would once packets flow again); a
killed node's connections are reset at its peers; a node that lost power just goes silent.
"""

from __future__ import annotations

import asyncio
import itertools
import random

from tools.sim.vloop import NODE

MIN_GAP_S = 1e-6  # strictly increasing delivery times keep a direction's order


class _Sock:
    def __init__(self, host: str, port: int) -> None:
        self._addr = (host, port)

    def getsockname(self):
        return self._addr


class SimServer:
    def __init__(self, net: SimNetwork, node: str, host: str, port: int, factory, ctx) -> None:
        self.net, self.node, self.addr = net, node, (host, port)
        self.factory, self.ctx = factory, ctx
        self.sockets = [_Sock(host, port)]
        self._closed = asyncio.get_running_loop().create_future()

    def close(self) -> None:
        self.net.servers.pop(self.addr, None)
        if not self._closed.done():
            self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await self._closed

    def is_serving(self) -> bool:
        return self.addr in self.net.servers


class SimTransport(asyncio.Transport):
    def __init__(self, net: SimNetwork, node: str, local, peer_addr, ctx) -> None:
        super().__init__()
        self.net, self.node, self.local, self.peer_addr, self.ctx = net, node, local, peer_addr, ctx
        self.peer: SimTransport | None = None
        self.protocol: asyncio.BaseProtocol | None = None
        self.closing = False
        self.lost = False
        self.black_hole = False
        self._paused = False
        self._held: list = []
        self._last_at = 0.0

    # -- asyncio.Transport ---------------------------------------------------------------------

    def get_extra_info(self, name, default=None):
        return {"peername": self.peer_addr, "sockname": self.local}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol

    def get_protocol(self):
        return self.protocol

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        held, self._held = self._held, []
        for item in held:
            self._arrive(*item)

    def is_reading(self) -> bool:
        return not self._paused

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    def write(self, data) -> None:
        if self.closing or self.black_hole or not data:
            return
        self._send("data", bytes(data))

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if not self.black_hole:
            self._send("eof", None)
        self._lose(None)

    def abort(self) -> None:
        if self.closing and self.lost:
            return
        self.closing = True
        if not self.black_hole:
            self._send("reset", None)
        self._lose(None)

    # -- delivery ------------------------------------------------------------------------------

    def _send(self, kind: str, data) -> None:
        peer = self.peer
        if peer is None:
            return
        loop = asyncio.get_running_loop()
        at = max(loop.time() + self.net.delay_s(), self._last_at + MIN_GAP_S)
        self._last_at = at
        loop.call_at(at, peer._arrive, kind, data, context=peer.ctx)

    def _arrive(self, kind: str, data) -> None:
        if self.lost or self.black_hole or self.net.is_down(self.node):
            return
        if self._paused and kind == "data":
            self._held.append((kind, data))
            return
        if kind == "data":
            self.protocol.data_received(data)
        elif kind == "eof":
            keep_open = self.protocol.eof_received()
            if not keep_open:
                self.closing = True
                self._lose(None)
        else:
            self.closing = True
            self._lose(ConnectionResetError("connection reset by peer (simulated)"))

    def _lose(self, exc) -> None:
        if self.lost:
            return
        self.lost = True
        self.net.conns.discard(self)
        asyncio.get_running_loop().call_soon(self.protocol.connection_lost, exc, context=self.ctx)

    def reset_now(self) -> None:
        """Both ends see a reset at once (a heal after a black hole, a killed peer)."""
        self.closing = True
        self._lose(ConnectionResetError("connection reset (simulated)"))


class SimNetwork:
    def __init__(self, rng: random.Random, hosts: dict[str, str]) -> None:
        self.rng = rng
        self.hosts = hosts  # ip -> node name
        self.servers: dict[tuple[str, int], SimServer] = {}
        self.conns: set[SimTransport] = set()
        self.down: set[str] = set()
        self.cuts: set[frozenset[str]] = set()
        self.delay_ms = (0.2, 3.0)
        self._ports = itertools.count(40000)

    def delay_s(self) -> float:
        lo, hi = self.delay_ms
        return self.rng.uniform(lo, hi) / 1000

    def is_down(self, node: str) -> bool:
        return node in self.down

    def cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.cuts

    def listen(self, factory, host, port) -> SimServer:
        import contextvars

        host = host or "0.0.0.0"
        node = NODE.get()
        if not port:
            port = next(self._ports)
        server = SimServer(self, node, host, port, factory, contextvars.copy_context())
        self.servers[(host, port)] = server
        return server

    async def connect(self, factory, host, port):
        import contextvars

        src = NODE.get()
        dst = self.hosts.get(host, "?")
        await asyncio.sleep(self.delay_s())
        if self.cut(src, dst) or dst in self.down:
            await asyncio.get_running_loop().create_future()  # a SYN into the void
        server = self.servers.get((host, port)) or self.servers.get(("0.0.0.0", port))
        if server is None or server.node != dst:
            raise ConnectionRefusedError(f"connection refused by {host}:{port} (simulated)")
        src_ip = next((ip for ip, n in self.hosts.items() if n == src), "127.0.9.9")
        local = (src_ip, next(self._ports))
        client = SimTransport(self, src, local, (host, port), contextvars.copy_context())
        srv = SimTransport(self, dst, (host, port), local, server.ctx)
        client.peer, srv.peer = srv, client
        self.conns.update((client, srv))
        srv.protocol = server.ctx.run(server.factory)
        server.ctx.run(srv.protocol.connection_made, srv)
        proto = factory()
        client.protocol = proto
        proto.connection_made(client)
        return client, proto

    # -- faults --------------------------------------------------------------------------------

    def partition(self, a: str, b: str) -> None:
        self.cuts.add(frozenset((a, b)))
        for t in list(self.conns):
            if {t.node, t.peer.node if t.peer else None} == {a, b}:
                t.black_hole = True

    def heal(self) -> None:
        self.cuts.clear()
        for t in sorted(self.conns, key=lambda t: (t.node, t.local, t.peer_addr)):
            if t.black_hole:
                t.black_hole = False
                t.reset_now()

    def node_down(self, node: str, reset_peers: bool) -> None:
        """The node stops; with ``reset_peers`` (a killed process) its peers see resets."""
        self.down.add(node)
        for key in [k for k, s in self.servers.items() if s.node == node]:
            self.servers.pop(key).close()
        for t in sorted(self.conns, key=lambda t: (t.node, t.local, t.peer_addr)):
            if t.node == node:
                t.closing = True
                t._lose(ConnectionResetError("this node stopped (simulated)"))
            elif t.peer is not None and t.peer.node == node:
                if reset_peers:
                    t.reset_now()
                else:
                    t.black_hole = True

    def node_up(self, node: str) -> None:
        """The host is back: it answers the old connections its peers still hold with a
        reset (they were black holes while it was off)."""
        self.down.discard(node)
        for t in sorted(self.conns, key=lambda t: (t.node, t.local, t.peer_addr)):
            if t.peer is not None and t.peer.node == node and not self.cut(t.node, node):
                t.black_hole = False
                t.reset_now()
