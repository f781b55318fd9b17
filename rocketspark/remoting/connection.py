"""One remoting connection, used by both the server and the client side.

Either side may send requests on it: responses are matched to waiting requests by `opaque`
(RocketMQ may answer out of order), and incoming requests go to the connection's processors. A
frame that cannot be decoded closes this connection, and only this one, with a logged reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias, cast

from rocketspark.errors import ConnectionClosedError, ProtocolError, RemotingTimeoutError, RocketMQError
from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, encode, frame_head
from rocketspark.protocol.codes import ResponseCode, SerializeType, code_name
from rocketspark.protocol.command import RPC_TYPE_RESPONSE, RemotingCommand
from rocketspark.remoting.throttled_log import ThrottledLog

log = logging.getLogger(__name__)
#: requests refused with a RocketMQError (a bad header from any peer): one INFO line per 10 s
_refusals = ThrottledLog(log)
#: connections closed for a frame that cannot be decoded: one WARNING line per 10 s
_protocol_errors = ThrottledLog(log, logging.WARNING)

DEFAULT_IDLE_TIMEOUT_S = 120.0
#: bodies from this size on are written after their frame's head as they are, not joined into one frame
LARGE_BODY_BYTES = 256 * 1024
#: requests one connection dispatches in one turn of the event loop; the rest of a read waits for the
#: next turn, so a peer that pipelines thousands of small requests cannot hold the loop from the others
REQUESTS_PER_TURN = 64

#: what a request handler returns: the response, None for no response, or an awaitable of either
HandlerResult: TypeAlias = RemotingCommand | Awaitable[RemotingCommand | None] | None
#: a request handler: called with the connection the request came on and the request
RequestHandler: TypeAlias = Callable[["Connection", RemotingCommand], HandlerResult]


class HandlerLookup(Protocol):
    """Where a connection finds the handler of each incoming request: a ProcessorTable."""

    def get(self, code: int) -> RequestHandler | None: ...


class Connection(asyncio.Protocol):
    """A framed, bidirectional request/response channel over one TCP connection."""

    def __init__(
        self,
        processors: HandlerLookup,
        *,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        serialize_type: SerializeType = SerializeType.JSON,
        on_close: Callable[[Connection], None] | None = None,
        max_in_flight: int = 0,
        max_unsent_bytes: int = 0,
    ) -> None:
        """`max_in_flight` > 0: while that many requests are being handled, stop reading from the
        peer (TCP back-pressure), so one connection cannot pile up unbounded handler tasks. Requests
        already read then wait in `_backlog` (at most what one read delivered).

        `max_unsent_bytes` > 0 (the server's connections): while more than that many bytes of answers
        wait to be sent (a peer that does not read them), stop reading its requests, until a quarter of
        it is left; so a peer that never reads cannot make the answers queue without limit."""
        self._processors = processors
        self._max_in_flight = max_in_flight
        self._max_unsent_bytes = max_unsent_bytes
        self._unsent_paused = False  # more than max_unsent_bytes wait to be sent
        self._transport_paused = False  # reading the transport is paused
        self._next_turn: asyncio.Handle | None = None  # the backlog's next turn, when one is scheduled
        self._backlog: deque[RemotingCommand] = deque()
        self._decoder = FrameDecoder(max_frame_length)
        self._idle_timeout_s = idle_timeout_s
        self._serialize_type = serialize_type
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], asyncio.TimerHandle]] = {}
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._oneway_tasks: set[asyncio.Task[None]] = set()  # of those, the requests nobody awaits an answer to
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._close_reason: str | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._last_activity = self._loop.time()
        self._write_resumed: asyncio.Future[None] | None = None
        self.remote_address = "?"
        self.local_address = "?"
        self.attributes: dict[str, Any] = {}  # per-connection state owned by processors
        self.received_any = False  # whether the peer ever sent a byte

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.remote_address = _format_address(transport.get_extra_info("peername"))
        self.local_address = _format_address(transport.get_extra_info("sockname"))
        if self._max_unsent_bytes > 0:
            self._transport.set_write_buffer_limits(high=self._max_unsent_bytes, low=self._max_unsent_bytes // 4)
        if self._idle_timeout_s > 0:
            self._idle_handle = self._loop.call_later(self._idle_timeout_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        self.received_any = True
        dispatched = 0
        try:
            for command in self._decoder.feed(data):
                if command.is_response:
                    self._complete(command)
                elif self._backlog or self._holding() or dispatched >= REQUESTS_PER_TURN:
                    self._backlog.append(command)
                else:
                    self._dispatch(command)
                    dispatched += 1
        except ProtocolError as exc:
            _protocol_errors.log("protocol errors", "closing connection %s: %s", self.remote_address, exc)
            self.close(f"protocol error: {exc}")
        if self._backlog:
            self._schedule_turn()
            self._set_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._close_reason is None:
            self._close_reason = f"connection lost: {exc}" if exc else "closed by peer"
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        # A oneway request read before the peer closed still takes effect (a consumer's last offset
        # update, a producer's END_TRANSACTION are sent just before it closes): only the requests
        # whose answers nobody can receive any more are given up.
        backlog, self._backlog = self._backlog, deque()
        for request in backlog:
            if request.is_oneway:
                self._dispatch(request)
        for task in self._handler_tasks - self._oneway_tasks:
            task.cancel()
        pending, self._pending = self._pending, {}
        for future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(
                    ConnectionClosedError(f"connection to {self.remote_address} closed ({self._close_reason})")
                )
        if self._write_resumed is not None and not self._write_resumed.done():
            self._write_resumed.set_result(None)
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        if self._write_resumed is None or self._write_resumed.done():
            self._write_resumed = self._loop.create_future()
        if self._max_unsent_bytes > 0:
            self._unsent_paused = True
            self._set_reading()

    def resume_writing(self) -> None:
        if self._write_resumed is not None and not self._write_resumed.done():
            self._write_resumed.set_result(None)
        if self._unsent_paused:
            self._unsent_paused = False
            self._serve_backlog()

    @property
    def reading(self) -> bool:
        """Whether requests are being read from the peer (not paused for back-pressure)."""
        return not self._transport_paused

    # -- sending ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing() or self._closed.done()

    def send(self, command: RemotingCommand) -> None:
        """Write one command; raises ConnectionClosedError when the connection is gone."""
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.remote_address} is closed ({self._close_reason})")
        assert self._transport is not None
        body = command.wire_body
        if len(body) < LARGE_BODY_BYTES:
            self._transport.write(encode(command, self._serialize_type))
        else:
            self._transport.write(frame_head(command, self._serialize_type))
            self._transport.write(body)
        self._last_activity = self._loop.time()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._write_resumed is not None and not self._write_resumed.done():
            await self._write_resumed

    async def invoke(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request and wait for its response, at most `timeout_s` seconds."""
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        opaque = request.opaque
        timer = self._loop.call_later(timeout_s, self._expire, opaque, request.code, timeout_s)
        self._pending[opaque] = (future, timer)
        try:
            self.send(request)
        except BaseException:
            self._pending.pop(opaque, None)
            timer.cancel()
            raise
        return await future

    def invoke_oneway(self, request: RemotingCommand) -> None:
        request.flag |= 0x2
        self.send(request)

    def close(self, reason: str = "closed locally") -> None:
        if self._close_reason is None:
            self._close_reason = reason
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # -- internals -------------------------------------------------------------------------------

    def _complete(self, response: RemotingCommand) -> None:
        entry = self._pending.pop(response.opaque, None)
        if entry is None:
            log.debug("response for unknown or expired opaque %d from %s", response.opaque, self.remote_address)
            return
        future, timer = entry
        timer.cancel()
        if not future.done():
            future.set_result(response)

    def _expire(self, opaque: int, code: int, timeout_s: float) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(
                RemotingTimeoutError(
                    f"{code_name(code)} to {self.remote_address} got no response within {timeout_s:.3g} s"
                )
            )

    def _check_idle(self) -> None:
        idle = self._loop.time() - self._last_activity
        if idle >= self._idle_timeout_s:
            log.info("closing connection %s: idle for %.0f s", self.remote_address, idle)
            self.close(f"idle for {idle:.0f} s")
        else:
            self._idle_handle = self._loop.call_later(self._idle_timeout_s - idle, self._check_idle)

    def _dispatch(self, request: RemotingCommand) -> None:
        handler = self._processors.get(request.code)
        if handler is None:
            self._respond(
                request,
                request.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                ),
            )
            return
        try:
            result = handler(self, request)
        except Exception as exc:
            self._respond(request, self._error_response(request, exc))
            return
        if result is None or isinstance(result, RemotingCommand):
            self._respond(request, result)
        else:
            task = self._loop.create_task(self._await_handler(request, result))
            self._handler_tasks.add(task)
            if request.is_oneway:
                self._oneway_tasks.add(task)
            task.add_done_callback(self._handler_done)
            self._set_reading()

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handler_tasks.discard(task)
        self._oneway_tasks.discard(task)
        self._serve_backlog()

    def _holding(self) -> bool:
        """Whether requests must wait: `max_in_flight` handlers run, or too many answers are unsent."""
        return self._unsent_paused or 0 < self._max_in_flight <= len(self._handler_tasks)

    def _serve_backlog(self) -> None:
        """Dispatch a turn's worth of the requests read while holding, until holding again; the next
        turn is scheduled while some remain; reading resumes once all went."""
        self._next_turn = None
        if self.closed:
            return
        served = 0
        while self._backlog and not self._holding() and served < REQUESTS_PER_TURN:
            self._dispatch(self._backlog.popleft())
            served += 1
        if self._backlog:
            self._schedule_turn()
        self._set_reading()

    def _schedule_turn(self) -> None:
        """Serve the backlog in a later turn of the loop, unless holding (its end serves it) or scheduled."""
        if self._next_turn is None and not self._holding():
            self._next_turn = self._loop.call_soon(self._serve_backlog)

    def _set_reading(self) -> None:
        """Pause reading the transport while requests wait or must wait (TCP back-pressure), else resume."""
        paused = bool(self._backlog) or self._holding()
        if paused == self._transport_paused or self.closed:
            return
        assert self._transport is not None
        if paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()
        self._transport_paused = paused

    async def _await_handler(self, request: RemotingCommand, pending: Any) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            response = self._error_response(request, exc)
        self._respond(request, response)

    def _error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, RocketMQError):
            code = exc.code if exc.code is not None else ResponseCode.SYSTEM_ERROR
            _refusals.log(
                "refused requests", "%s from %s refused: %s", code_name(request.code), self.remote_address, exc
            )
            return request.response(code, str(exc))
        log.exception("processor for %s from %s failed", code_name(request.code), self.remote_address)
        return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _respond(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is None or request.is_oneway or self.closed:
            return
        response.opaque = request.opaque
        response.flag |= RPC_TYPE_RESPONSE
        self.send(response)

    def __repr__(self) -> str:
        return f"Connection({self.local_address} <-> {self.remote_address})"


def _format_address(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
