"""A synchronous stream client over one pika ``SelectConnection`` on its own I/O loop.

Theory of operation. ``StreamClient.open`` runs the loop until the connection is open (or
failed, bounded by ``connectTimeoutMs``). After that the loop runs only inside
``run_until(done, timeout)``: pika's callbacks record what arrived (deliveries into a
``Cursor``'s buffer, a channel or connection closed by the broker into ``error``) and stop the
loop as soon as ``done()`` holds, an error was recorded or the timeout passed. Frames the caller
sends in between (``basic.ack``) are buffered by pika and flushed when the loop runs again.

Why not pika's blocking adapter: cancelling a consumer (and closing its channel) makes it
*reject* the deliveries it still buffers, and a stream answers ``basic.reject`` with
connection error 540. Here a cursor is ended by closing its channel: pika sends
``basic.cancel`` and ``channel.close`` back to back and drops (never rejects) deliveries that
arrive in between; the broker forgets unacknowledged stream deliveries with the channel.

Every consume is ``basic.qos(prefetch, global=false)`` then ``basic.consume`` with manual
acks and ``x-stream-offset``, as RabbitMQ requires for streams; acks give credit back.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from interop.spark.errors import redact_url, scrub
from interop.spark.retry import is_retryable_open_error
from interop.spark.stream_rows import OFFSET_HEADER, Rows

__all__ = ["Cursor", "Delivery", "PikaConsumer", "StreamClient", "StreamError"]

CLOSE_GRACE = 2.0


class StreamError(RuntimeError):
    """Reading a stream failed: connection refused or lost, stream missing, broker error.

    Attributes:
        reply_code: The broker's reply code when it closed the channel or connection.
        refused: True when retrying cannot help (credentials, vhost, a missing stream).
    """

    def __init__(self, message: str, reply_code: int = 0, refused: bool = False) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        self.refused = refused


@dataclass(slots=True)
class Delivery:
    """One message read from a stream (as pika hands it over)."""

    offset: int
    tag: int
    routing_key: str
    properties: Any
    body: bytes


class Cursor:
    """A consumer on one channel; deliveries pile up in ``buffer`` while the loop runs.

    ``ack(tag)`` acknowledges everything up to ``tag`` (multiple=true), which is what gives
    the stream consumer credit for more.
    """

    def __init__(self, client: StreamClient, stream: str) -> None:
        self.client = client
        self.stream = stream
        self.channel: Any = None
        self.ready = False
        self.closed = False
        self.buffer: collections.deque[Delivery] = collections.deque()
        self.received = 0

    def on_message(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        headers = properties.headers or {}
        offset = headers.get(OFFSET_HEADER)
        if not isinstance(offset, int):
            self.client.fail(
                StreamError(
                    f"{self.stream!r} is not a stream: its deliveries carry no {OFFSET_HEADER} "
                    "header (declare it with x-queue-type=stream)",
                    refused=True,
                )
            )
            return
        self.buffer.append(
            Delivery(offset, method.delivery_tag, method.routing_key, properties, body)
        )
        self.received += 1
        self.client.check()

    def ack(self, tag: int) -> None:
        """``basic.ack`` up to ``tag`` (sent when the loop next runs)."""
        if self.channel is not None and self.channel.is_open:
            self.channel.basic_ack(tag, multiple=True)

    def close(self) -> None:
        """Close the channel (cancel + close, nothing rejected) and wait for close-ok."""
        channel = self.channel
        if channel is not None and channel.is_open:
            channel.close()
            self.client.run_until(lambda: self.closed, CLOSE_GRACE, raise_error=False)


class StreamClient:
    """A connection to a broker, driven synchronously (see the module docstring)."""

    def __init__(self, url: str, connect_timeout: float, name: str) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self.name = name
        self.ioloop = IOLoop()
        self.conn: Any = None
        self.error: StreamError | None = None
        self._done: Callable[[], bool] = _never
        self._running = False
        self._open = False

    # -- the loop ---------------------------------------------------------------------------

    def check(self) -> None:
        """Stop the loop when the condition of the current ``run_until`` holds."""
        if self._running and (self.error is not None or self._done()):
            self.ioloop.stop()

    def fail(self, error: StreamError) -> None:
        """Record the first error and stop the loop."""
        if self.error is None:
            self.error = error
        if self._running:
            self.ioloop.stop()

    def run_until(
        self, done: Callable[[], bool], timeout: float, *, raise_error: bool = True
    ) -> bool:
        """Run the loop until ``done()`` (True), ``timeout`` seconds pass (False) or an
        error (raised when ``raise_error``)."""
        if self.error is None and not done():
            self._done = done
            timer = self.ioloop.call_later(max(timeout, 0.0), self.ioloop.stop)
            self._running = True
            try:
                self.ioloop.start()
            finally:
                self._running = False
                self._done = _never
                self.ioloop.remove_timeout(timer)
        if self.error is not None and raise_error:
            raise self.error
        return done()

    # -- opening and closing ----------------------------------------------------------------

    def open(self) -> StreamClient:
        """Connect (TCP, handshake) within ``connect_timeout``.

        Raises:
            StreamError: Refused (credentials, vhost), unreachable or timed out.
        """
        params = pika.URLParameters(self.url)
        properties = dict(params.client_properties or {})
        properties.setdefault("connection_name", self.name)
        params.client_properties = properties
        params.socket_timeout = self.connect_timeout
        params.stack_timeout = self.connect_timeout
        if "heartbeat=" not in self.url.partition("?")[2]:
            params.heartbeat = 0  # the loop does not run between calls
        self.conn = pika.SelectConnection(
            params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=self.ioloop,
        )
        if not self.run_until(lambda: self._open, self.connect_timeout + 1.0):
            self.abort()
            raise StreamError(
                f"connecting to {redact_url(self.url)} timed out after "
                f"{self.connect_timeout * 1000:.0f} ms (connectTimeoutMs)"
            )
        return self

    @property
    def exact_counts(self) -> bool:
        """Whether the broker's declare-ok ``message_count`` of a stream is exact: amqpd
        (it says so in connection.start's ``information``); RabbitMQ's lags seconds."""
        properties = getattr(self.conn, "server_properties", None) or {}
        information = properties.get("information", "")
        if isinstance(information, bytes | bytearray):
            information = bytes(information).decode(errors="replace")
        return isinstance(information, str) and information.startswith("amqpd ")

    def close(self) -> None:
        """Close the connection (channels close with it; nothing is rejected)."""
        conn = self.conn
        if conn is not None and not conn.is_closed and not conn.is_closing:
            conn.close()
            self.run_until(lambda: bool(conn.is_closed), CLOSE_GRACE, raise_error=False)
        if conn is not None and not conn.is_closed:
            self.abort()
            return
        self.ioloop.close()

    def abort(self) -> None:
        """Drop the socket without the close handshake and free the loop."""
        conn = self.conn
        if conn is not None and not conn.is_closed:
            conn._terminate_stream(pika.exceptions.StreamLostError("dropped by amqp-stream"))
            self.run_until(lambda: bool(conn.is_closed), CLOSE_GRACE, raise_error=False)
        self.ioloop.close()

    # -- consuming --------------------------------------------------------------------------

    def consume(self, stream: str, offset: int | str, prefetch: int) -> Cursor:
        """Open a channel, set the per-consumer prefetch and start consuming ``stream`` at
        ``offset`` (a number, ``first``, ``last`` or ``next``).

        Raises:
            StreamError: The stream does not exist (404) or the broker refused the consume.
        """
        cursor = Cursor(self, stream)

        def on_consume_ok(_frame: Any) -> None:
            cursor.ready = True
            self.check()

        def on_qos_ok(_frame: Any) -> None:
            cursor.channel.basic_consume(
                stream,
                cursor.on_message,
                auto_ack=False,
                arguments={OFFSET_HEADER: offset},
                callback=on_consume_ok,
            )

        def on_channel_open(channel: Any) -> None:
            cursor.channel = channel
            channel.add_on_close_callback(on_channel_closed)
            channel.basic_qos(prefetch_count=prefetch, global_qos=False, callback=on_qos_ok)

        def on_channel_closed(_channel: Any, reason: BaseException) -> None:
            cursor.closed = True
            if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
                self.fail(self._channel_error(stream, reason))
            self.check()

        self.conn.channel(on_open_callback=on_channel_open)
        if not self.run_until(lambda: cursor.ready, self.connect_timeout):
            raise StreamError(
                f"the broker at {redact_url(self.url)} did not answer basic.consume on "
                f"{stream!r} within {self.connect_timeout * 1000:.0f} ms"
            )
        return cursor

    def probe(self, stream: str, where: str, prefetch: int, first_wait: float) -> int | None:
        """The offset of the first (``first``) or the last (``last``) message of ``stream``,
        or None when no delivery came within ``first_wait`` seconds (an empty stream).

        For ``last`` the broker sends the last chunk (RabbitMQ) or message (amqpd); the
        deliveries are taken until none arrived for a short pause, so the answer is the
        highest offset seen: a message that exists, never past the end.
        """
        cursor = self.consume(stream, where, prefetch)
        try:
            if not self.run_until(lambda: bool(cursor.buffer), first_wait):
                return None
            highest = cursor.buffer[-1].offset
            if where == "first":
                return cursor.buffer[0].offset
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                seen = cursor.received
                cursor.ack(cursor.buffer[-1].tag)
                highest = max(highest, cursor.buffer[-1].offset)
                cursor.buffer.clear()
                self.run_until(_more_than(cursor, seen), 0.05)
                if cursor.received == seen:
                    break
            if cursor.buffer:
                highest = max(highest, cursor.buffer[-1].offset)
            return highest
        finally:
            cursor.close()

    def message_count(self, stream: str) -> int:
        """``queue.declare(passive=True)``'s message count (exact on amqpd, lagging on
        RabbitMQ); also the existence check: a missing stream raises ``StreamError``."""
        result: list[int] = []
        closed: list[bool] = []

        def on_open(channel: Any) -> None:
            channel.add_on_close_callback(on_closed)
            channel.queue_declare(stream, passive=True, callback=on_declare_ok)

        def on_declare_ok(frame: Any) -> None:
            result.append(int(frame.method.message_count))
            frame_channel.close()

        def on_closed(_channel: Any, reason: BaseException) -> None:
            closed.append(True)
            if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
                self.fail(self._channel_error(stream, reason))
            self.check()

        frame_channel = self.conn.channel(on_open_callback=on_open)
        if not self.run_until(lambda: bool(closed), self.connect_timeout):
            raise StreamError(f"queue.declare of {stream!r} not answered in time")
        return result[0]

    # -- pika callbacks ---------------------------------------------------------------------

    def _on_open(self, _conn: Any) -> None:
        self._open = True
        self.check()

    def _on_open_error(self, _conn: Any, error: BaseException) -> None:
        refused = not is_retryable_open_error(error)
        hint = ""
        if isinstance(
            error,
            (pika.exceptions.AuthenticationError, pika.exceptions.ProbableAuthenticationError),
        ):
            hint = "; check the user and password in the url option"
        elif isinstance(error, pika.exceptions.ProbableAccessDeniedError):
            hint = "; check the vhost in the url option and the user's permissions"
        self.fail(
            StreamError(
                f"cannot connect to {redact_url(self.url)}: {self._text(error)}{hint}",
                refused=refused,
            )
        )

    def _on_closed(self, _conn: Any, reason: BaseException) -> None:
        if not isinstance(reason, pika.exceptions.ConnectionClosedByClient):
            code = getattr(reason, "reply_code", 0)
            self.fail(
                StreamError(
                    f"connection to {redact_url(self.url)} closed: {self._text(reason)}",
                    reply_code=code if isinstance(code, int) else 0,
                )
            )
        if self._running:
            self.ioloop.stop()

    def _channel_error(self, stream: str, reason: Any) -> StreamError:
        code = int(reason.reply_code)
        vhost = pika.URLParameters(self.url).virtual_host
        if code == 404:
            return StreamError(
                f"stream {stream!r} not found in vhost {vhost!r} ({code} {reason.reply_text})",
                code,
                refused=True,
            )
        return StreamError(
            f"the broker refused to read {stream!r}: {code} {reason.reply_text}",
            code,
            refused=code in (403, 406),
        )

    def _text(self, error: BaseException) -> str:
        return scrub(repr(error), self.url)


class PikaConsumer:
    """``SocketConsumer``'s interface over pika (for ``amqps://`` URLs)."""

    def __init__(self, url: str, connect_timeout: float, name: str) -> None:
        self.client = StreamClient(url, connect_timeout, name)
        self.cursor: Cursor | None = None

    def open(self, stream: str, offset: int | str, prefetch: int) -> PikaConsumer:
        self.client.open()
        self.cursor = self.client.consume(stream, offset, prefetch)
        return self

    def ack(self, tag: int) -> None:
        assert self.cursor is not None
        self.cursor.ack(tag)

    def poll(self, timeout: float) -> Rows:
        cursor = self.cursor
        assert cursor is not None
        self.client.run_until(lambda: bool(cursor.buffer), timeout)
        rows = Rows()
        while cursor.buffer:
            d = cursor.buffer.popleft()
            props = d.properties
            rows.add(
                d.offset,
                d.tag,
                d.routing_key,
                props.timestamp,
                props.message_id,
                props.headers or {},
                d.body,
            )
        return rows

    def close(self) -> None:
        self.client.close()


def _never() -> bool:
    return False


def _more_than(cursor: Cursor, seen: int) -> Callable[[], bool]:
    return lambda: cursor.received > seen
