"""A minimal blocking AMQP 0-9-1 stream consumer on a plain socket: the tasks' hot path.

Theory of operation. pika decodes a delivery through several layers of objects and
callbacks (about 15k messages/s on this machine); a Spark task reading a stream needs only
``basic.deliver`` + content header + body, in order, on one channel. This client does the
handshake, ``channel.open``, ``basic.qos`` (per consumer) and ``basic.consume`` with pamqp,
then parses deliveries itself from a byte buffer straight into the columns of a `Rows`
(interop/spark/stream_rows.py): the 7-byte frame header, the deliver arguments, the
properties the source returns (walked by a plan per property-flags value) and the headers
table, decoded once per distinct table by `HeaderSets`. A delivery's fields are held aside
until its body is complete, so a `Rows` only ever holds whole deliveries. Any other frame
goes through pamqp: ``channel.close`` / ``connection.close`` from the broker become a
``StreamError`` with the reply code and text; heartbeats are answered (the client proposes
none).

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

from interop.spark.errors import redact_url
from interop.spark.stream_client import StreamError
from interop.spark.stream_rows import OFFSET_HEADER, HeaderSets, NotAStreamError, Rows

__all__ = ["SocketConsumer"]

_FRAME = struct.Struct(">BHI")
_DELIVER = b"\x00\x3c\x00\x3c"  # class 60, method 60
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_OFFSET = struct.Struct(">q")
_HEADER = struct.Struct(">HHQH")
_METHOD_HEAD = struct.Struct(">BHII")  # frame type, channel, size; class and method ids
_DELIVER_ID = 0x003C003C
_CONTENT_HEAD = struct.Struct(">BHIHHQH")  # frame head; class, weight, body size, flags
RECV = 1 << 18
FRAME_END = 0xCE
MAX_HEADER_SETS = 1024  # distinct headers tables interned before a fresh `HeaderSets`

# what each basic property is to the parser, by flag bit (15: content_type … 2: cluster_id)
_SKIP_SHORTSTR, _TABLE, _OCTET, _STAMP, _MESSAGE_ID = range(5)
_KINDS = {13: _TABLE, 12: _OCTET, 11: _OCTET, 7: _MESSAGE_ID, 6: _STAMP}
_PLANS: dict[int, tuple[int, ...]] = {}


def _plan(flags: int) -> tuple[int, ...]:
    """The fields present for ``flags``, in wire order (cached per flags value)."""
    plan = _PLANS.get(flags)
    if plan is None:
        bits = [bit for bit in range(15, 1, -1) if flags & (1 << bit)]
        plan = _PLANS[flags] = tuple(_KINDS.get(bit, _SKIP_SHORTSTR) for bit in bits)
    return plan


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
        self.buf = b""
        self.pos = 0
        self.frame_max = 131072
        # a delivery waiting for its header or body frames:
        # [tag, routing key, offset, timestamp, message id, headers set, body size, pieces]
        self._pending: list[Any] | None = None
        self.headers = HeaderSets()
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
        self.buf = self.buf[self.pos :] + chunk  # what is left is less than a frame
        self.pos = 0
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

    def poll(self, timeout: float) -> Rows:
        """Deliveries that arrived within ``timeout`` s (at least one unless it passed)."""
        if len(self.headers.pairs) >= MAX_HEADER_SETS:
            self._fresh_header_sets()
        rows = Rows(self.headers)
        deadline = time.monotonic() + timeout
        while True:
            self._parse(rows)
            if rows.offsets or not self._fill(deadline):
                return rows

    def _fresh_header_sets(self) -> None:
        """Start a fresh `HeaderSets`; a delivery read up to its body keeps the headers it
        was read with (its set moves along: its index is into the old one)."""
        old, self.headers = self.headers, HeaderSets()
        pending = self._pending
        if pending is not None and pending[5] >= 0:
            self.headers.pairs.append(old.pairs[pending[5]])
            pending[5] = 0

    def _parse(self, rows: Rows) -> None:
        """Take every complete frame in the buffer; complete deliveries go to ``rows``.

        A delivery whose three frames (deliver, header, one body frame) are all in the
        buffer is read in one step (`_whole`); anything else goes frame by frame."""
        buf = self.buf
        size = len(buf)
        pos = self.pos
        pending = self._pending
        unpack_length = _U32.unpack_from
        try:
            while size - pos >= 8:
                if pending is None and buf[pos] == 1:
                    after = _whole(buf, pos, size, rows)
                    if after:
                        pos = after
                        continue
                kind = buf[pos]
                start = pos + 7
                end = start + unpack_length(buf, pos + 3)[0]
                if end >= size:
                    return
                if buf[end] != FRAME_END:
                    raise StreamError("malformed frame from the broker (no frame end)")
                pos = end + 1
                if kind == 3:
                    if pending is None:
                        continue
                    pieces: list[bytes] = pending[7]
                    if not pieces and end - start == pending[6]:
                        _append(rows, pending, buf[start:end])
                        pending = None
                        continue
                    pieces.append(buf[start:end])
                    if sum(map(len, pieces)) >= pending[6]:
                        _append(rows, pending, b"".join(pieces))
                        pending = None
                elif kind == 2:
                    if pending is None:
                        continue
                    _class, _weight, body_size, flags = _HEADER.unpack_from(buf, start)
                    _properties(buf, start + 14, flags, pending, rows.headers)
                    pending[6] = body_size
                    if body_size == 0:
                        _append(rows, pending, b"")
                        pending = None
                elif kind == 1:
                    if buf[start : start + 4] == _DELIVER:
                        pending = _deliver(buf, start + 4)
                        continue
                    self.pos = pos
                    self._control(frame.unmarshal(buf[start - 7 : end + 1])[2])
                elif kind == 8:
                    self._send(bytes(frame.marshal(heartbeat.Heartbeat(), 0)))
        finally:
            self.pos = pos
            self._pending = pending

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


def _whole(buf: bytes, pos: int, size: int, rows: Rows) -> int:
    """Read the delivery at ``pos`` into ``rows`` if its deliver, header and single body
    frame are all in ``buf``; answers where the next frame starts, or 0 (nothing taken).
    The same reading as `_deliver` + `_properties` + `_append`, in one function: this is
    the per-message path.

    Raises:
        StreamError: No ``x-stream-offset`` header: the queue is not a stream.
    """
    if pos + 11 > size:
        return 0
    _kind, _channel, length, method = _METHOD_HEAD.unpack_from(buf, pos)
    header: int = pos + 8 + length  # the header frame
    if method != _DELIVER_ID or header + 21 > size:
        return 0
    kind, _channel, length, _class, _weight, body_size, flags = _CONTENT_HEAD.unpack_from(
        buf, header
    )
    content: int = header + 8 + length  # the body frame
    after: int = content + 8 + body_size
    if kind != 2 or not body_size or after > size:
        return 0
    kind, _channel, length = _FRAME.unpack_from(buf, content)
    if (
        kind != 3
        or length != body_size
        or buf[header - 1] != FRAME_END
        or buf[content - 1] != FRAME_END
        or buf[after - 1] != FRAME_END
    ):
        return 0
    at = pos + 11
    at += 1 + buf[at]  # consumer tag
    tag = _U64.unpack_from(buf, at)[0]
    at += 9  # delivery tag + redelivered
    at += 1 + buf[at]  # exchange
    key_end = at + 1 + buf[at]
    key = buf[at + 1 : key_end]
    stamp = message_id = None
    offset = -1
    headers = -1
    sets = rows.headers
    at = header + 21
    for field in _PLANS.get(flags) or _plan(flags):
        if field == _SKIP_SHORTSTR:
            at += 1 + buf[at]
        elif field == _TABLE:
            end = at + 4 + _U32.unpack_from(buf, at)[0]
            found = sets.index.get(buf[at : end - 8])
            if found is None:
                try:
                    offset, headers = sets.add_raw(buf[at:end])
                except NotAStreamError:
                    break
            else:
                offset, headers = _OFFSET.unpack_from(buf, end - 8)[0], found
            at = end
        elif field == _OCTET:
            at += 1
        elif field == _STAMP:
            stamp = _U64.unpack_from(buf, at)[0]
            at += 8
        else:  # message id
            end = at + 1 + buf[at]
            message_id = buf[at + 1 : end]
            at = end
    if headers < 0:
        _not_a_stream()
    rows.offsets.append(offset)
    rows.keys.append(key)
    rows.stamps.append(stamp)
    rows.ids.append(message_id)
    rows.sets.append(headers)
    rows.values.append(buf[content + 7 : after - 1])
    rows.last_tag = tag
    return after


def _not_a_stream() -> None:
    raise StreamError(
        f"deliveries carry no {OFFSET_HEADER} header: not a stream (declare it with "
        "x-queue-type=stream)",
        refused=True,
    )


def _deliver(buf: bytes, at: int) -> list[Any]:
    """A pending delivery from a ``basic.deliver``'s arguments at ``at``."""
    at += 1 + buf[at]  # consumer tag
    (tag,) = _U64.unpack_from(buf, at)
    at += 9  # delivery tag + redelivered
    at += 1 + buf[at]  # exchange
    key_end = at + 1 + buf[at]
    return [tag, buf[at + 1 : key_end], -1, None, None, -1, 0, []]


def _properties(buf: bytes, at: int, flags: int, pending: list[Any], sets: HeaderSets) -> None:
    """The offset, headers set, timestamp and message id from the property list at ``at``.

    Raises:
        StreamError: No ``x-stream-offset`` header: the queue is not a stream.
    """
    found = False
    for kind in _plan(flags):
        if kind == _SKIP_SHORTSTR:
            at += 1 + buf[at]
        elif kind == _TABLE:
            end = at + 4 + _U32.unpack_from(buf, at)[0]
            try:
                pending[2], pending[5] = sets.add_raw(buf[at:end])
            except NotAStreamError:
                break
            found = True
            at = end
        elif kind == _OCTET:
            at += 1
        elif kind == _STAMP:
            pending[3] = _U64.unpack_from(buf, at)[0]
            at += 8
        else:  # message id
            end = at + 1 + buf[at]
            pending[4] = buf[at + 1 : end]
            at = end
    if not found:
        _not_a_stream()


def _append(rows: Rows, pending: list[Any], body: bytes) -> None:
    tag, key, offset, stamp, message_id, headers, _size, _pieces = pending
    rows.offsets.append(offset)
    rows.keys.append(key)
    rows.stamps.append(stamp)
    rows.ids.append(message_id)
    rows.sets.append(headers)
    rows.values.append(body)
    rows.last_tag = tag
