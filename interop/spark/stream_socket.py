"""A minimal blocking AMQP 0-9-1 stream consumer on a plain socket: the tasks' hot path.

Theory of operation. pika decodes a delivery through several layers of objects and
callbacks (about 15k messages/s on this machine); a Spark task reading a stream needs only
``basic.deliver`` + content header + body, in order, on one channel. This client does the
handshake, ``channel.open``, ``basic.qos`` (per consumer) and ``basic.consume`` with pamqp,
then parses deliveries itself from a byte buffer: the 7-byte frame header, the deliver
arguments, the property flags and the few properties the source returns, the headers table
through pamqp. Any other frame goes through pamqp: ``channel.close`` / ``connection.close``
from the broker become a ``StreamError`` with the reply code and text; heartbeats are
answered (the client proposes none).

It never sends ``basic.reject``/``nack`` (a stream answers them with connection error 540):
``close()`` sends ``connection.close`` and waits briefly for close-ok, ignoring deliveries
still in flight. Plain ``amqp://`` only; the caller uses pika for ``amqps://``.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any
from urllib.parse import unquote, urlsplit

import pika
from pamqp import commands, frame, heartbeat
from pamqp.decode import field_table

from interop.spark.errors import redact_url
from interop.spark.stream_client import OFFSET_HEADER, StreamError

__all__ = ["RawDelivery", "SocketConsumer"]

_FRAME = struct.Struct(">BHI")
_DELIVER = b"\x00\x3c\x00\x3c"  # class 60, method 60
_U64 = struct.Struct(">Q")
_HEADER = struct.Struct(">HHQH")
RECV = 1 << 18
FRAME_END = 0xCE

# (offset, delivery tag, routing key, timestamp or None, message id or None, headers, body)
RawDelivery = tuple[int, int, str, int | None, str | None, dict[str, Any], bytes]


class SocketConsumer:
    """One connection, one channel (1), one consumer; see the module docstring."""

    def __init__(self, url: str, connect_timeout: float, name: str) -> None:
        self.url = url
        self.timeout = connect_timeout
        params = pika.URLParameters(url)
        self.vhost = params.virtual_host
        parts = urlsplit(url)
        self.host = params.host
        self.port = params.port
        self.user = unquote(parts.username or "guest")
        self.password = unquote(parts.password or "guest")
        self.name = name
        self.sock: socket.socket | None = None
        self.buf = bytearray()
        self.pos = 0
        self.frame_max = 131072
        self._partial: list[Any] | None = None  # a delivery waiting for header/body frames
        self.stream = ""

    # -- frames -----------------------------------------------------------------------------

    def _send(self, *frames: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(b"".join(frames))

    def _method(self, channel: int, command: Any) -> bytes:
        return bytes(frame.marshal(command, channel))

    def _fill(self, deadline: float) -> bool:
        """Receive more bytes; False when ``deadline`` passed first."""
        assert self.sock is not None
        if self.pos > RECV:
            del self.buf[: self.pos]
            self.pos = 0
        wait = deadline - time.monotonic()
        if wait <= 0:
            return False
        ready, _, _ = select.select([self.sock], [], [], wait)
        if not ready:
            return False
        try:
            chunk = self.sock.recv(RECV)
        except OSError as exc:
            raise StreamError(f"connection to {redact_url(self.url)} lost: {exc!r}") from None
        if not chunk:
            raise StreamError(f"connection to {redact_url(self.url)} closed by the broker")
        self.buf += chunk
        return True

    def _next_frame(self, deadline: float) -> tuple[int, int, int, int] | None:
        """(type, channel, payload start, payload end) of the next complete frame."""
        while True:
            buf, pos = self.buf, self.pos
            if len(buf) - pos >= 7:
                kind, channel, size = _FRAME.unpack_from(buf, pos)
                end = pos + 7 + size
                if len(buf) > end:
                    if buf[end] != FRAME_END:
                        raise StreamError("malformed frame from the broker (no frame end)")
                    self.pos = end + 1
                    return kind, channel, pos + 7, end
            if not self._fill(deadline):
                return None

    def _expect(self, wanted: type, deadline: float) -> Any:
        """The next method frame, which must be ``wanted`` (handshake and setup)."""
        while True:
            got = self._next_frame(deadline)
            if got is None:
                raise StreamError(
                    f"{redact_url(self.url)} did not answer within "
                    f"{self.timeout * 1000:.0f} ms (waiting for {wanted.__name__})"
                )
            kind, _channel, start, end = got
            if kind == 8:
                continue
            value = frame.unmarshal(bytes(self.buf[start - 7 : end + 1]))[2]
            self._control(value)
            if isinstance(value, wanted):
                return value

    def _control(self, value: Any) -> None:
        if isinstance(value, commands.Connection.Close):
            self._send(self._method(0, commands.Connection.CloseOk()))
            raise StreamError(
                f"the broker at {redact_url(self.url)} closed the connection: "
                f"{value.reply_code} {value.reply_text}",
                value.reply_code or 0,
                refused=value.reply_code in (403, 530),
            )
        if isinstance(value, commands.Channel.Close):
            self._send(self._method(1, commands.Channel.CloseOk()))
            code = value.reply_code or 0
            if code == 404:
                text = f"stream {self.stream!r} not found in vhost {self.vhost!r}"
            else:
                text = f"the broker refused to read {self.stream!r}"
            raise StreamError(
                f"{text} ({code} {value.reply_text})", code, refused=code in (403, 404, 406)
            )
        if isinstance(value, heartbeat.Heartbeat):
            self._send(bytes(frame.marshal(heartbeat.Heartbeat(), 0)))

    # -- opening ----------------------------------------------------------------------------

    def open(self, stream: str, offset: int | str, prefetch: int) -> SocketConsumer:
        """Connect, open channel 1 and start consuming ``stream`` at ``offset``."""
        self.stream = stream
        deadline = time.monotonic() + self.timeout
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise StreamError(f"cannot connect to {redact_url(self.url)}: {exc!r}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(self.timeout)
        self._send(b"AMQP\x00\x00\x09\x01")
        try:
            self._expect(commands.Connection.Start, deadline)
        except StreamError as exc:
            raise StreamError(f"cannot connect to {redact_url(self.url)}: {exc}") from None
        properties: dict[str, Any] = {
            "product": "amqpd interop.spark",
            "connection_name": self.name,
            "capabilities": {"authentication_failure_close": True},
        }
        response = f"\0{self.user}\0{self.password}"
        self._send(self._method(0, commands.Connection.StartOk(properties, "PLAIN", response)))
        try:
            tune = self._expect(commands.Connection.Tune, deadline)
        except StreamError as exc:
            raise StreamError(
                f"cannot connect to {redact_url(self.url)}: {exc}; check the user and password "
                "in the url option",
                exc.reply_code,
                refused=True,
            ) from None
        self.frame_max = tune.frame_max or 131072
        self._send(
            self._method(0, commands.Connection.TuneOk(tune.channel_max, self.frame_max, 0)),
            self._method(0, commands.Connection.Open(self.vhost)),
        )
        try:
            self._expect(commands.Connection.OpenOk, deadline)
        except StreamError as exc:
            raise StreamError(
                f"cannot open vhost {self.vhost!r} at {redact_url(self.url)}: {exc}; check the "
                "vhost in the url option and the user's permissions",
                exc.reply_code,
                refused=True,
            ) from None
        self._send(self._method(1, commands.Channel.Open()))
        self._expect(commands.Channel.OpenOk, deadline)
        self._send(self._method(1, commands.Basic.Qos(prefetch_count=prefetch)))
        self._expect(commands.Basic.QosOk, deadline)
        consume = commands.Basic.Consume(queue=stream, arguments={OFFSET_HEADER: offset})
        self._send(self._method(1, consume))
        self._expect(commands.Basic.ConsumeOk, deadline)
        return self

    # -- consuming --------------------------------------------------------------------------

    def ack(self, tag: int) -> None:
        """``basic.ack`` everything up to ``tag`` (credit for the consumer)."""
        self._send(self._method(1, commands.Basic.Ack(tag, multiple=True)))

    def poll(self, timeout: float) -> list[RawDelivery]:
        """Deliveries that arrived within ``timeout`` s (at least one unless it passed)."""
        out: list[RawDelivery] = []
        deadline = time.monotonic() + timeout
        while not out:
            self._parse(out)
            if out or not self._fill(deadline):
                break
        return out

    def _parse(self, out: list[RawDelivery]) -> None:
        """Take every complete frame in the buffer; complete deliveries go to ``out``."""
        buf = self.buf
        size = len(buf)
        while size - self.pos >= 8:
            pos = self.pos
            kind, _channel, length = _FRAME.unpack_from(buf, pos)
            start = pos + 7
            end = start + length
            if end >= size:
                return
            if buf[end] != FRAME_END:
                raise StreamError("malformed frame from the broker (no frame end)")
            self.pos = end + 1
            partial = self._partial
            if kind == 1:
                if buf[start : start + 4] == _DELIVER:
                    self._partial = _deliver(buf, start + 4)
                    continue
                value = frame.unmarshal(bytes(buf[pos : end + 1]))[2]
                self._control(value)
            elif kind == 2 and partial is not None:
                _class, _weight, body_size, flags = _HEADER.unpack_from(buf, start)
                partial.extend(_properties(buf, start + 14, flags))
                partial.append(body_size)
                partial.append([])
                if body_size == 0:
                    out.append(_finish(partial))
                    self._partial = None
            elif kind == 3 and partial is not None:
                pieces: list[bytes] = partial[6]
                pieces.append(bytes(buf[start:end]))
                if sum(map(len, pieces)) >= partial[5]:
                    out.append(_finish(partial))
                    self._partial = None
            elif kind == 8:
                self._send(bytes(frame.marshal(heartbeat.Heartbeat(), 0)))

    def close(self) -> None:
        """``connection.close``, then wait up to 2 s for close-ok (deliveries ignored)."""
        sock = self.sock
        if sock is None:
            return
        try:
            self._send(self._method(0, commands.Connection.Close(200, "reading done", 0, 0)))
            deadline = time.monotonic() + 2.0
            while True:
                got = self._next_frame(deadline)
                if got is None:
                    break
                kind, _channel, start, _end = got
                if kind == 1 and self.buf[start : start + 4] == b"\x00\x0a\x00\x33":
                    break  # connection.close-ok
        except (OSError, StreamError):
            pass
        finally:
            sock.close()
            self.sock = None


def _deliver(buf: bytearray, at: int) -> list[Any]:
    """[tag, exchange, routing key] of a ``basic.deliver``'s arguments at ``at``."""
    tag_len = buf[at]
    at += 1 + tag_len
    (tag,) = _U64.unpack_from(buf, at)
    at += 9  # delivery tag + redelivered
    exchange_len = buf[at]
    at += 1 + exchange_len
    key_len = buf[at]
    routing_key = buf[at + 1 : at + 1 + key_len].decode()
    return [tag, routing_key]


def _properties(buf: bytearray, at: int, flags: int) -> list[Any]:
    """[headers, timestamp, message id] from the property list at ``at``."""
    headers: dict[str, Any] = {}
    timestamp = None
    message_id = None
    for bit in range(15, 1, -1):
        if not flags & (1 << bit):
            continue
        if bit == 13:  # headers table
            (length,) = struct.unpack_from(">I", buf, at)
            _used, headers = field_table(bytes(buf[at : at + 4 + length]))
            at += 4 + length
        elif bit in (12, 11):  # delivery mode, priority
            at += 1
        elif bit == 6:  # timestamp
            (timestamp,) = _U64.unpack_from(buf, at)
            at += 8
        else:  # short strings
            length = buf[at]
            if bit == 7:
                message_id = buf[at + 1 : at + 1 + length].decode("utf-8", "replace")
            at += 1 + length
    return [headers, timestamp, message_id]


def _finish(partial: list[Any]) -> RawDelivery:
    tag, routing_key, headers, timestamp, message_id, _size, pieces = partial
    body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    offset = headers.get(OFFSET_HEADER)
    if not isinstance(offset, int):
        raise StreamError(
            f"deliveries carry no {OFFSET_HEADER} header: not a stream (declare it with "
            "x-queue-type=stream)",
            refused=True,
        )
    return (offset, tag, routing_key, timestamp, message_id, headers, body)
