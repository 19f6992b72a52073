"""One remoting connection, used by both sides: reads frames, answers requests through a
processor table, matches responses to pending requests by opaque."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable, Callable

from broker.remoting.codec import FrameReader, encode_frame
from broker.remoting.codes import ResponseCode
from broker.remoting.command import FrameError, MissingFieldError, RemotingCommand
from broker.remoting.limits import SYSTEM_SECONDS, ConnectionGuard
from contracts.errors import HaproofError, RemotingError

log = logging.getLogger(__name__)

Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]

CLOSE_FLUSH_TIMEOUT_MS = 5000  # a closing connection's unsent bytes get this long
# Above this many unsent bytes, writers wait for the socket (and the read loop stops reading).
WRITE_HIGH_WATER_BYTES = 1024 * 1024


def _expire(fut: asyncio.Future, peer: str, request: RemotingCommand, timeout_ms: int) -> None:
    if not fut.done():
        fut.set_exception(
            RemotingTimeoutError(
                f"{peer}: no response to request code {request.code} opaque "
                f"{request.opaque} within {timeout_ms} ms"
            )
        )


class Eager:
    """Marks a handler that may start inside the connection's read loop: it runs until its
    first real wait without a task of its own. Such a handler must not bind the current task
    before that first wait (``asyncio.timeout`` does); ``await asyncio.sleep(0)`` first moves
    it into its own task."""

    __slots__ = ("fn",)

    def __init__(self, fn: Handler) -> None:
        self.fn = fn

    def __call__(self, conn: Connection, request: RemotingCommand):
        return self.fn(conn, request)


@types.coroutine
def _resume(coro, pending):
    """Carry on a coroutine that was started eagerly and is waiting on ``pending`` (what its
    first ``send(None)`` yielded): re-yields to the task what the coroutine yields and passes
    back what the task sends or throws (cancellation included)."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:  # noqa: BLE001 - forwarded into the coroutine
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            pending = coro.send(sent)
        except StopIteration as stop:
            return stop.value


class RemotingTimeoutError(RemotingError):
    """No response arrived within timeout_ms."""


class ConnectionClosedError(RemotingError):
    """The connection closed before a response arrived."""


class Connection(asyncio.Protocol):
    """An asyncio protocol: bytes arrive in ``data_received`` and are dispatched at once (no
    read task, no stream buffer in between). Made by ``RemotingServer`` and ``connect``."""

    def __init__(
        self, processors: dict[int, Handler], guard: ConnectionGuard | None = None
    ) -> None:
        self.processors = processors
        self.peer = "unknown"
        self.transport: asyncio.Transport | None = None
        self._frames = FrameReader(self.peer)
        self._guard = guard  # a server's limits (None: a client's connection, unbounded)
        self._clock = guard.clock if guard is not None else SYSTEM_SECONDS
        self.last_io_s = self._clock()  # last read or write, for the idle timeout
        self.frame_started_s: float | None = None  # first byte of the partial frame held
        self._pending: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.closed = asyncio.Event()
        self.close_cause: BaseException | None = None
        self.attrs: dict = {}  # free space for processors (client id, group, ...)
        self._out: list[bytes] = []  # frames written this loop turn, sent together
        self._loop = asyncio.get_running_loop()
        self._lost = self._loop.create_future()  # set by connection_lost
        self._writable: asyncio.Future | None = None  # pending while the peer reads too slowly

    # ------------------------------------------------------------ protocol callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport
        addr = transport.get_extra_info("peername")
        self.peer = f"{addr[0]}:{addr[1]}" if addr else "unknown"
        self._frames.peer = self.peer
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        if self._guard is not None and not self._guard.admit(self):
            self.abort_with("connection limit reached")

    def data_received(self, data: bytes) -> None:
        if self.closed.is_set():
            return
        now = self.last_io_s = self._clock()
        try:
            commands = self._frames.feed(data)
        except FrameError as exc:
            if self._guard is not None:
                self._guard.refusals.refuse("dropped", self.peer, exc.reason)
            else:
                log.warning("closing connection: %s", exc)
            self.abort_with(exc)
            return
        for cmd in commands:
            self._dispatch(cmd)
        pending = self._frames.pending_bytes
        if not pending:
            self.frame_started_s = None
        elif commands or self.frame_started_s is None:
            self.frame_started_s = now  # the tail is a new frame, begun in this read
        if self._guard is not None and not self.closed.is_set():
            self._guard.account(self, pending)

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial frame held for this connection."""
        return self._frames.pending_bytes

    @property
    def busy(self) -> bool:
        """A request is being handled (a long poll, say): not idle whatever the clock says."""
        return bool(self._tasks)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            if self._frames.pending_bytes:
                exc = ConnectionClosedError(
                    f"{self.peer}: closed inside a frame "
                    f"({self._frames.pending_bytes} bytes pending)"
                )
                log.warning("%s", exc)
            else:
                exc = ConnectionClosedError(f"{self.peer}: peer closed")
        self._shutdown(exc)
        if not self._lost.done():
            self._lost.set_result(None)
        self._wake_writers()

    def pause_writing(self) -> None:
        # the peer reads too slowly: stop reading its requests until it catches up
        if self._writable is None:
            self._writable = self._loop.create_future()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------ sending
    async def invoke(self, request: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        """Send a request and wait for its response (matched by opaque)."""
        if self.closed.is_set():
            raise ConnectionClosedError(f"{self.peer}: connection closed") from self.close_cause
        loop = self._loop
        fut = loop.create_future()
        opaque = request.opaque
        self._pending[opaque] = fut
        # a plain timer failing the future: cheaper than asyncio.timeout's task cancellation
        timer = loop.call_later(timeout_ms / 1000, _expire, fut, self.peer, request, timeout_ms)
        try:
            await self._write(request)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        from broker.remoting.codes import FLAG_ONEWAY

        request.flag |= FLAG_ONEWAY
        await self._write(request)

    async def _write(self, cmd: RemotingCommand) -> None:
        if self.closed.is_set():
            raise ConnectionClosedError(f"{self.peer}: connection closed") from self.close_cause
        self._send_frame(encode_frame(cmd))
        if self._writable is not None:
            self._flush_out()
            await asyncio.shield(self._writable)
            if self.closed.is_set():
                raise ConnectionClosedError(f"{self.peer}: connection closed") from self.close_cause

    def _send_frame(self, frame: bytes) -> None:
        """Queue a frame; every frame queued in one loop turn goes out in one write."""
        out = self._out
        out.append(frame)
        if len(out) == 1:
            self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.last_io_s = self._clock()
        try:
            transport.write(data)
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.info("%s: write failed: %s", self.peer, exc)
            return
        if self._guard is not None:
            self._guard.check_unread(self, transport.get_write_buffer_size())

    # ------------------------------------------------------------ requests
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.get(cmd.opaque)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            else:
                log.info("%s: response with unknown opaque %d dropped", self.peer, cmd.opaque)
            return
        handler = self.processors.get(cmd.code)
        if handler is None:
            self._respond(
                cmd,
                cmd.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f"request code {cmd.code} not supported",
                ),
            )
            return
        if type(handler) is not Eager:
            task = self._loop.create_task(self._handle(cmd, handler))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        # Eager: most sends (ASYNC_FLUSH, no slave wait) finish without waiting at all.
        coro = handler(self, cmd)
        try:
            pending = coro.send(None)
        except StopIteration as stop:
            self._respond(cmd, stop.value)
            return
        except Exception as exc:
            self._respond(cmd, self._error_response(cmd, exc))
            return
        task = self._loop.create_task(self._finish(cmd, coro, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, request: RemotingCommand, handler: Handler) -> None:
        try:
            response = await handler(self, request)
        except Exception as exc:
            response = self._error_response(request, exc)
        self._respond(request, response)

    async def _finish(self, request: RemotingCommand, coro, pending) -> None:
        try:
            response = await _resume(coro, pending)
        except Exception as exc:
            response = self._error_response(request, exc)
        self._respond(request, response)

    def _error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, MissingFieldError | HaproofError):
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        # a handler bug must not kill the connection
        log.error("%s: handler for code %d failed", self.peer, request.code, exc_info=exc)
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}"
        )

    def _respond(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is None or request.is_oneway or self.closed.is_set():
            return  # nothing to answer, or the client vanished mid-request
        response.opaque = request.opaque
        response.flag |= 1
        response.serialize_type = request.serialize_type
        try:
            frame = encode_frame(response)
        except FrameError as exc:
            log.error("%s: response to code %d not sent: %s", self.peer, request.code, exc)
            frame = encode_frame(request.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc)))
        self._send_frame(frame)

    # ------------------------------------------------------------ closing
    def _shutdown(self, cause: BaseException) -> None:
        if self.closed.is_set():
            return
        self._flush_out()  # what was answered before the close still goes out
        self.close_cause = cause
        self.closed.set()
        self._frames.clear()  # a dropped partial frame's memory goes now
        if self._guard is not None:
            self._guard.release(self)
        for fut in list(self._pending.values()):
            if not fut.done():
                err = ConnectionClosedError(f"{self.peer}: connection closed: {cause}")
                err.__cause__ = cause
                fut.set_exception(err)
        self._pending.clear()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self.transport is not None:
            self.transport.close()

    def abort_with(self, cause: BaseException | str) -> None:
        """Drop the connection at once (unsent bytes discarded): for peers that broke a limit."""
        if isinstance(cause, str):
            cause = ConnectionClosedError(f"{self.peer}: {cause}")
        self._out.clear()
        self._shutdown(cause)
        if self.transport is not None:
            self.transport.abort()

    def close_soon(self, cause: str) -> None:
        """Close gracefully without waiting: unsent bytes get CLOSE_FLUSH_TIMEOUT_MS, then the
        transport is aborted (a peer that stopped reading cannot keep it open)."""
        self._shutdown(ConnectionClosedError(f"{self.peer}: {cause}"))
        if self.transport is not None and not self._lost.done():
            self._loop.call_later(CLOSE_FLUSH_TIMEOUT_MS / 1000, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if self.transport is not None and not self._lost.done():
            self.transport.abort()

    async def close(self, cause: BaseException | None = None) -> None:
        """Close and wait until the transport is gone (aborted if it cannot flush in time)."""
        self._shutdown(cause or ConnectionClosedError(f"{self.peer}: closed locally"))
        if self.transport is None or self._lost.done():
            return
        try:
            async with asyncio.timeout(CLOSE_FLUSH_TIMEOUT_MS / 1000):
                await asyncio.shield(self._lost)
        except TimeoutError:
            self.transport.abort()
