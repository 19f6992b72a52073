"""One remoting connection, used by both sides: reads frames, answers requests through a
processor table, matches responses to pending requests by opaque."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.errors import HaproofError, RemotingError
from broker.remoting.codec import FrameReader, encode_frame
from broker.remoting.codes import ResponseCode
from broker.remoting.command import FrameError, MissingFieldError, RemotingCommand

log = logging.getLogger(__name__)

Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]

READ_CHUNK_BYTES = 64 * 1024


class RemotingTimeoutError(RemotingError):
    """No response arrived within timeout_ms."""


class ConnectionClosedError(RemotingError):
    """The connection closed before a response arrived."""


class Connection:
    """Use Connection.start(reader, writer, processors) (the read loop starts there)."""

    def __init__(self, reader, writer, processors: dict[int, Handler], peer: str) -> None:
        self._reader = reader
        self._writer = writer
        self.processors = processors
        self.peer = peer
        self._pending: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._read_task: asyncio.Task | None = None
        self.closed = asyncio.Event()
        self.close_cause: BaseException | None = None
        self.attrs: dict = {}  # free space for processors (client id, group, ...)

    @classmethod
    def start(cls, reader, writer, processors: dict[int, Handler] | None = None) -> Connection:
        addr = writer.get_extra_info("peername")
        peer = f"{addr[0]}:{addr[1]}" if addr else "unknown"
        conn = cls(reader, writer, dict(processors or {}), peer)
        conn._read_task = asyncio.get_running_loop().create_task(conn._read_loop())
        return conn

    # ------------------------------------------------------------ sending
    async def invoke(self, request: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        """Send a request and wait for its response (matched by opaque)."""
        if self.closed.is_set():
            raise ConnectionClosedError(f"{self.peer}: connection closed") from self.close_cause
        fut = asyncio.get_running_loop().create_future()
        self._pending[request.opaque] = fut
        try:
            await self._write(request)
            async with asyncio.timeout(timeout_ms / 1000):
                return await fut
        except TimeoutError as exc:
            raise RemotingTimeoutError(
                f"{self.peer}: no response to request code {request.code} opaque "
                f"{request.opaque} within {timeout_ms} ms"
            ) from exc
        finally:
            self._pending.pop(request.opaque, None)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        from broker.remoting.codes import FLAG_ONEWAY

        request.flag |= FLAG_ONEWAY
        await self._write(request)

    async def _write(self, cmd: RemotingCommand) -> None:
        if self.closed.is_set():
            raise ConnectionClosedError(f"{self.peer}: connection closed") from self.close_cause
        try:
            self._writer.write(encode_frame(cmd))
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            await self.close(exc)
            raise ConnectionClosedError(f"{self.peer}: write failed: {exc}") from exc

    # ------------------------------------------------------------ reading
    async def _read_loop(self) -> None:
        frames = FrameReader(self.peer)
        cause: BaseException | None = None
        try:
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    if frames.pending_bytes:
                        cause = ConnectionClosedError(
                            f"{self.peer}: closed inside a frame "
                            f"({frames.pending_bytes} bytes pending)"
                        )
                        log.warning("%s", cause)
                    break
                for cmd in frames.feed(data):
                    self._dispatch(cmd)
        except FrameError as exc:
            log.warning("closing connection: %s", exc)
            cause = exc
        except (ConnectionError, OSError) as exc:
            cause = exc
        except asyncio.CancelledError:
            cause = ConnectionClosedError(f"{self.peer}: closed locally")
        await self._shutdown(cause or ConnectionClosedError(f"{self.peer}: peer closed"))

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.get(cmd.opaque)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            else:
                log.info("%s: response with unknown opaque %d dropped", self.peer, cmd.opaque)
            return
        task = asyncio.get_running_loop().create_task(self._handle(cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, request: RemotingCommand) -> None:
        handler = self.processors.get(request.code)
        if handler is None:
            response = request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {request.code} not supported",
            )
        else:
            try:
                response = await handler(self, request)
            except MissingFieldError as exc:
                response = request.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
            except HaproofError as exc:
                response = request.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
            except Exception as exc:  # a handler bug must not kill the connection
                log.exception("%s: handler for code %d failed", self.peer, request.code)
                response = request.make_response(
                    ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}"
                )
        if response is None or request.is_oneway:
            return
        response.opaque = request.opaque
        response.flag |= 1
        response.serialize_type = request.serialize_type
        try:
            await self._write(response)
        except ConnectionClosedError:
            pass  # the client vanished mid-request; nothing to answer

    # ------------------------------------------------------------ closing
    async def _shutdown(self, cause: BaseException) -> None:
        if self.closed.is_set():
            return
        self.close_cause = cause
        self.closed.set()
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
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def close(self, cause: BaseException | None = None) -> None:
        await self._shutdown(cause or ConnectionClosedError(f"{self.peer}: closed locally"))
        task = self._read_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
