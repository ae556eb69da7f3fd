"""Records between two workers that hold queues of one vhost (issue 26 stage 2: docs/
multicore.md "Build plan", step 3): a publish forwarded to the worker that owns some of its
target queues, and that worker's answer once it has settled them.

Theory of operation
-------------------
Each pair of workers is joined by a byte stream each way (a Unix stream socket). The
publishing worker routes a message with its replica of the vhost's topology; for each other
worker holding target queues it appends one `FORWARD` record to that worker's outgoing
buffer with `encode_forward` (every record of one chunk read from publishers goes out in one
write: measured at 0.33 µs of CPU per crossing message at 100 or more per chunk, docs/
multicore.md). The record carries what the publishing worker already parsed (the flags and
fields `content_header.peek_header` read, the expiration in milliseconds), so the owner builds its
`Message` without decoding the publish again, and the raw content header and body unchanged,
as every queue keeps them.

Publish ids count up from 1 per (sender, receiver) pair. The owner answers with `SETTLED`
records: every id up to ``through`` is settled (enqueued, and committed when it had to be),
except the ids in ``refused``, which no queue of the owner holds (x-overflow=reject-publish,
a failed commit). One `SETTLED` covers a whole storage batch, so the answers cost one record
per batch, not per message; the sender joins them into its confirms (confirms/shards.py).
Only what the sender waits for is answered (a PROMISED publish, a TOPOLOGY record): a link
carrying plain publishes alone sends nothing back (amqpd/model/forwarded.py).

A TOPOLOGY record carries a change to a spread vhost's exchanges, queues or bindings
(amqpd/model/replica.py; the payload is the change, serialized by the shell) under the next
publish id, so the owner's `SETTLED` answer also says it was applied, and it is ordered with
the publishes around it.

Consuming across workers (a connection that cannot move consumes from another worker's
queue, amqpd/model/remote_consumers.py and amqpd/engine/remote_consuming.py): CONTROL
records carry the consumer's requests (consume, cancel, credit, settlements, basic.get) to
the owner, pickled by the shell, and the owner's events (consume-ok, a refusal, a cancel,
get answers) back; DELIVER records carry the deliveries back, on the same socket as the
SETTLED answers, so a consume-ok is before the consumer's first delivery.

A link carries the records of every vhost the two workers share: a VHOST record names the
vhost of the FORWARD and TOPOLOGY records after it (written when it changes, so a link busy with one
vhost pays for the name once).

`RecordReader` is the receiving side, sans-IO like `codec.FrameReader`: `feed` the bytes as
they arrive, then call `next_record` until it returns None; `vhost` is the vhost of the
FORWARD record it just returned (it consumes VHOST records itself). A record is never returned
before all of its bytes arrived; a corrupt stream (an unknown kind, a length that does not
match the fields) raises `ForwardingError`: the link is then closed and treated as lost.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "CONTROL",
    "DELIVER",
    "FORWARD",
    "SETTLED",
    "TOPOLOGY",
    "VHOST",
    "Control",
    "Delivery",
    "Forwarded",
    "ForwardingError",
    "RecordReader",
    "Settled",
    "TopologyChange",
    "decode_queue_names",
    "encode_control",
    "encode_delivery",
    "encode_forward",
    "encode_settled",
    "encode_topology",
    "encode_vhost",
    "queue_names",
]

FORWARD: Final = 1
SETTLED: Final = 2
VHOST: Final = 3
TOPOLOGY: Final = 4
DELIVER: Final = 5
CONTROL: Final = 6

# Forwarded.flags
PERSISTENT: Final = 1  # delivery mode 2
PROMISED: Final = 2  # the publisher waits for a confirm or a tx.commit-ok (model/held.py)
NO_EXPIRY: Final = -1  # Forwarded.expiration_ms when the message has no per-message TTL
NO_PRIORITY: Final = -1

# A FORWARD record: u32 length of what follows, u8 kind, u64 publish id, u8 flags, i16
# priority, i64 expiration ms, u32 queue count, u32 header length; then the queue names and
# exchange and routing key (short strings), the expiration and the headers table (u32 length
# or 0xFFFFFFFF for absent, then bytes), the header, and the body to the record's end.
_FORWARD_HEAD: Final = struct.Struct(">IBQBhqII")
_FORWARD_HEAD_SIZE: Final = 32  # _FORWARD_HEAD.size, a constant for the compiled code
_SETTLED_HEAD: Final = struct.Struct(">IBQI")  # length, kind, through, number of refused ids
_ID: Final = struct.Struct(">Q")
_VHOST_HEAD: Final = struct.Struct(">IB")  # length, kind; then the vhost's name (UTF-8)
_TOPOLOGY_HEAD: Final = struct.Struct(">IBQ")  # length, kind, publish id; then the payload
_CONTROL_HEAD: Final = struct.Struct(">IB")  # length, kind; then the payload
# A DELIVER record: u32 length, u8 kind, u64 consumer id, u64 delivery tag (the owner's),
# u8 flags, u32 delivery count, u32 header length; then the exchange and routing key (wire
# short strings), the header, and the body to the record's end.
_DELIVER_HEAD: Final = struct.Struct(">IBQQBII")
REDELIVERED: Final = 1  # Delivery.flags
ACK_REQUIRED: Final = 2
_U32: Final = struct.Struct(">I")
_ABSENT: Final = b"\xff\xff\xff\xff"
_MAX_RECORD: Final = 1 << 31  # far above any message (RabbitMQ's limit is 512 MiB)


class ForwardingError(Exception):
    """The stream between two workers is corrupt: close the link."""


class Forwarded:
    """One message forwarded to the worker that owns its ``count`` target queues (``names``:
    their names in routing order, as `queue_names` encodes them: decoded by the receiver,
    once per distinct routing result, `queues`); the fields the owner's `Message` needs,
    parsed by the publishing worker."""

    __slots__ = (
        "body",
        "count",
        "exchange_raw",
        "expiration",
        "expiration_ms",
        "flags",
        "header",
        "headers_raw",
        "names",
        "priority",
        "publish_id",
        "routing_key_raw",
    )

    def __init__(
        self,
        publish_id: int,
        flags: int,
        priority: int,
        expiration_ms: int,
        count: int,
        names: bytes,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        expiration: str | None,
        headers_raw: bytes | None,
        header: bytes,
        body: bytes,
    ) -> None:
        self.publish_id = publish_id
        self.flags = flags
        self.priority = priority
        self.expiration_ms = expiration_ms
        self.count = count
        self.names = names
        self.exchange_raw = exchange_raw  # wire shortstrs, length byte included
        self.routing_key_raw = routing_key_raw
        self.expiration = expiration  # the property as sent (x-death keeps it)
        self.headers_raw = headers_raw  # the headers table's bytes, no length prefix
        self.header = header
        self.body = body

    @property
    def queues(self) -> list[str]:
        """The target queues' names.

        Raises:
            ForwardingError: a name is not UTF-8.
        """
        return decode_queue_names(self.names, self.count)


class Settled:
    """The owner's answer: every publish id up to ``through`` is settled; the ``refused``
    ones (ascending) are in none of its queues."""

    __slots__ = ("refused", "through")

    def __init__(self, through: int, refused: list[int]) -> None:
        self.through = through
        self.refused = refused


class TopologyChange:
    """A change to a spread vhost's topology, sent under ``publish_id``."""

    __slots__ = ("payload", "publish_id")

    def __init__(self, publish_id: int, payload: bytes) -> None:
        self.publish_id = publish_id
        self.payload = payload


class Control:
    """A request or event of consuming across workers (its payload pickled by the shell)."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class Delivery:
    """One message the owner delivered to consumer ``consumer_id`` of the peer, under the
    owner's delivery tag ``tag``."""

    __slots__ = (
        "body",
        "consumer_id",
        "delivery_count",
        "exchange_raw",
        "flags",
        "header",
        "routing_key_raw",
        "tag",
    )

    def __init__(
        self,
        consumer_id: int,
        tag: int,
        flags: int,
        delivery_count: int,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        header: bytes,
        body: bytes,
    ) -> None:
        self.consumer_id = consumer_id
        self.tag = tag
        self.flags = flags
        self.delivery_count = delivery_count
        self.exchange_raw = exchange_raw
        self.routing_key_raw = routing_key_raw
        self.header = header
        self.body = body


def queue_names(queues: list[str]) -> bytes:
    """The target queues' names as a FORWARD record carries them (short strings, in order):
    computed once per routing result and reused, not once per message."""
    parts: list[bytes] = []
    for name in queues:
        raw = name.encode()
        if len(raw) > 255:
            raise ValueError(f"a short string holds at most 255 bytes, not {len(raw)}")
        parts.append(bytes((len(raw),)))
        parts.append(raw)
    return b"".join(parts)


def decode_queue_names(names: bytes, count: int) -> list[str]:
    """The ``count`` names `queue_names` encoded in ``names`` (bounds checked by the reader).

    Raises:
        ForwardingError: a name is not UTF-8.
    """
    queues: list[str] = []
    pos = 0
    try:
        for _ in range(count):
            size = names[pos]
            queues.append(names[pos + 1 : pos + 1 + size].decode())
            pos += 1 + size
    except (IndexError, UnicodeDecodeError) as exc:
        raise ForwardingError(f"bad queue names in a forward record: {exc}") from None
    return queues


def _optional(value: bytes | None) -> bytes:
    """A length-prefixed field that may be absent (length 0xFFFFFFFF)."""
    if value is None:
        return _ABSENT
    return _U32.pack(len(value)) + value


def encode_forward(
    out: bytearray,
    publish_id: int,
    flags: int,
    priority: int,
    expiration_ms: int,
    queue_count: int,
    names: bytes,
    exchange_raw: bytes,
    routing_key_raw: bytes,
    expiration: str | None,
    headers_raw: bytes | None,
    header: bytes,
    body: bytes,
) -> None:
    """Append one FORWARD record to ``out`` (the buffer written once per chunk); ``names``
    holds ``queue_count`` names, as `queue_names` encodes them."""
    expiry = _ABSENT if expiration is None else _optional(expiration.encode())
    table = _ABSENT if headers_raw is None else _optional(headers_raw)
    length = (
        _FORWARD_HEAD_SIZE
        - 4
        + len(names)
        + len(exchange_raw)
        + len(routing_key_raw)
        + len(expiry)
        + len(table)
        + len(header)
        + len(body)
    )
    if length >= _MAX_RECORD:
        raise ValueError(f"a record of {length} bytes is too large to forward")
    # one join and one append: measured compiled, cheaper than eight appends
    out += b"".join(
        (
            _FORWARD_HEAD.pack(
                length,
                FORWARD,
                publish_id,
                flags,
                priority,
                expiration_ms,
                queue_count,
                len(header),
            ),
            names,
            exchange_raw,
            routing_key_raw,
            expiry,
            table,
            header,
            body,
        )
    )


def encode_vhost(out: bytearray, name: str) -> None:
    """Append a VHOST record: the FORWARD records after it are for vhost ``name`` (a sender
    writes one when the vhost differs from the previous record's, so a link that carries one
    busy vhost pays for its name once, not per message)."""
    raw = name.encode()
    out += _VHOST_HEAD.pack(1 + len(raw), VHOST)
    out += raw


def encode_topology(out: bytearray, publish_id: int, payload: bytes) -> None:
    """Append one TOPOLOGY record to ``out``."""
    if len(payload) >= _MAX_RECORD - _TOPOLOGY_HEAD.size:
        raise ValueError(f"a topology change of {len(payload)} bytes is too large to send")
    out += _TOPOLOGY_HEAD.pack(_TOPOLOGY_HEAD.size - 4 + len(payload), TOPOLOGY, publish_id)
    out += payload


def encode_control(out: bytearray, payload: bytes) -> None:
    """Append one CONTROL record to ``out``."""
    if len(payload) >= _MAX_RECORD - _CONTROL_HEAD.size:
        raise ValueError(f"a control record of {len(payload)} bytes is too large to send")
    out += _CONTROL_HEAD.pack(_CONTROL_HEAD.size - 4 + len(payload), CONTROL)
    out += payload


def encode_delivery(
    out: bytearray,
    consumer_id: int,
    tag: int,
    flags: int,
    delivery_count: int,
    exchange_raw: bytes,
    routing_key_raw: bytes,
    header: bytes,
    body: bytes,
) -> None:
    """Append one DELIVER record to ``out``."""
    length = (
        _DELIVER_HEAD.size - 4 + len(exchange_raw) + len(routing_key_raw) + len(header) + len(body)
    )
    if length >= _MAX_RECORD:
        raise ValueError(f"a record of {length} bytes is too large to deliver")
    out += b"".join(
        (
            _DELIVER_HEAD.pack(
                length, DELIVER, consumer_id, tag, flags, delivery_count, len(header)
            ),
            exchange_raw,
            routing_key_raw,
            header,
            body,
        )
    )


def encode_settled(out: bytearray, through: int, refused: list[int]) -> None:
    """Append one SETTLED record to ``out``."""
    length = _SETTLED_HEAD.size - 4 + 8 * len(refused)
    out += _SETTLED_HEAD.pack(length, SETTLED, through, len(refused))
    for publish_id in refused:
        out += _ID.pack(publish_id)


class RecordReader:
    """Splits a link's byte stream into `Forwarded`, `TopologyChange`, `Settled`,
    `Delivery` and `Control` records."""

    __slots__ = ("_buf", "_pieces", "_pos", "vhost")

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._pieces: list[bytes] = []
        self.vhost = ""  # the vhost of the FORWARD records returned (the last VHOST record)

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if type(data) is not bytes:
            data = bytes(data)
        if self._pos == len(self._buf) and not self._pieces:
            self._buf = data
            self._pos = 0
        else:
            self._pieces.append(data)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as records."""
        return len(self._buf) - self._pos + sum([len(piece) for piece in self._pieces])

    def _have(self, size: int) -> bool:
        """Whether ``size`` bytes from ``_pos`` are in ``_buf`` (joining pieces if needed)."""
        if len(self._buf) - self._pos >= size:
            return True
        if not self._pieces:
            return False
        self._pieces.insert(0, self._buf[self._pos :])
        self._buf = b"".join(self._pieces)
        self._pos = 0
        self._pieces = []
        return len(self._buf) >= size

    def next_record(self) -> Forwarded | Settled | TopologyChange | Delivery | Control | None:
        """The next whole FORWARD, TOPOLOGY, SETTLED, DELIVER or CONTROL record, or None
        until more bytes arrive.

        Raises:
            ForwardingError: the stream is corrupt.
        """
        # Integers by hand, as in codec.FrameReader: compiled, indexing bytes is native,
        # several times cheaper than struct's unpack_from and its tuple.
        while True:
            if len(self._buf) - self._pos < 5 and not self._have(5):
                return None
            buf = self._buf
            start = self._pos
            length = _u32(buf, start)
            if length >= _MAX_RECORD or length < 1:
                raise ForwardingError(f"record length {length} out of range")
            if len(buf) - start < 4 + length:
                if not self._have(4 + length):
                    return None
                buf = self._buf
                start = self._pos
            end = start + 4 + length
            self._pos = end
            kind = buf[start + 4]
            if kind == FORWARD:
                return _decode_forward(buf, start, end)
            if kind == SETTLED:
                return _decode_settled(buf, start, end)
            if kind == TOPOLOGY:
                if end - start < _TOPOLOGY_HEAD.size:
                    raise ForwardingError("truncated topology record")
                return TopologyChange(_u64(buf, start + 5), buf[start + _TOPOLOGY_HEAD.size : end])
            if kind == DELIVER:
                return _decode_delivery(buf, start, end)
            if kind == CONTROL:
                return Control(buf[start + 5 : end])
            if kind != VHOST:
                raise ForwardingError(f"unknown record kind {kind}")
            try:
                self.vhost = buf[start + 5 : end].decode()
            except UnicodeDecodeError:
                raise ForwardingError("a vhost name that is not UTF-8") from None


def _u32(buf: bytes, pos: int) -> int:
    return (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]


def _u64(buf: bytes, pos: int) -> int:
    high = _u32(buf, pos)
    if high == 0:  # ids and tags: below 2**32 for a long time; no big-int arithmetic
        return _u32(buf, pos + 4)
    return (high << 32) | _u32(buf, pos + 4)


def _i64(buf: bytes, pos: int) -> int:
    high = _u32(buf, pos)
    if high == 0:
        return _u32(buf, pos + 4)
    if high == 0xFFFFFFFF:  # -1 (NO_EXPIRY) to -2**32: no big-int arithmetic either
        return _u32(buf, pos + 4) - 0x100000000
    value = (high << 32) | _u32(buf, pos + 4)
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_forward(buf: bytes, start: int, end: int) -> Forwarded:
    if end - start < _FORWARD_HEAD_SIZE:
        raise ForwardingError("truncated forward record")
    publish_id = _u64(buf, start + 5)
    flags = buf[start + 13]
    priority = (buf[start + 14] << 8) | buf[start + 15]
    if priority >= 0x8000:
        priority -= 0x10000
    expiration_ms = _i64(buf, start + 16)
    count = _u32(buf, start + 24)
    header_size = _u32(buf, start + 28)
    pos = start + 32
    try:
        for _ in range(count):  # the names stay raw: see Forwarded
            pos += 1 + buf[pos]
        names = buf[start + 32 : pos]
        stop = pos + 1 + buf[pos]
        exchange_raw = buf[pos:stop]
        pos = stop
        stop = pos + 1 + buf[pos]
        routing_key_raw = buf[pos:stop]
        pos = stop
        expiry: str | None = None
        size = _u32(buf, pos)
        pos += 4
        if size != 0xFFFFFFFF:
            expiry = buf[pos : pos + size].decode()
            pos += size
        headers_raw: bytes | None = None
        size = _u32(buf, pos)
        pos += 4
        if size != 0xFFFFFFFF:
            headers_raw = buf[pos : pos + size]
            pos += size
    except (IndexError, UnicodeDecodeError) as exc:
        raise ForwardingError(f"truncated forward record: {exc}") from None
    body_at = pos + header_size
    if body_at > end:
        raise ForwardingError("forward record fields overrun its length")
    return Forwarded(
        publish_id,
        flags,
        priority,
        expiration_ms,
        count,
        names,
        exchange_raw,
        routing_key_raw,
        expiry,
        headers_raw,
        buf[pos:body_at],
        buf[body_at:end],
    )


def _decode_settled(buf: bytes, start: int, end: int) -> Settled:
    if end - start < _SETTLED_HEAD.size:
        raise ForwardingError("truncated settled record")
    through = _u64(buf, start + 5)
    count = _u32(buf, start + 13)
    pos = start + _SETTLED_HEAD.size
    if pos + 8 * count != end:
        raise ForwardingError(f"settled record of {end - start} bytes cannot hold {count} ids")
    return Settled(through, [_u64(buf, pos + 8 * i) for i in range(count)])


def _decode_delivery(buf: bytes, start: int, end: int) -> Delivery:
    if end - start < _DELIVER_HEAD.size:
        raise ForwardingError("truncated deliver record")
    consumer_id = _u64(buf, start + 5)
    tag = _u64(buf, start + 13)
    flags = buf[start + 21]
    delivery_count = _u32(buf, start + 22)
    header_size = _u32(buf, start + 26)
    pos = start + _DELIVER_HEAD.size
    try:
        stop = pos + 1 + buf[pos]
        exchange_raw = buf[pos:stop]
        pos = stop
        stop = pos + 1 + buf[pos]
        routing_key_raw = buf[pos:stop]
        pos = stop
    except IndexError:
        raise ForwardingError("truncated deliver record") from None
    body_at = pos + header_size
    if body_at > end:
        raise ForwardingError("deliver record fields overrun its length")
    return Delivery(
        consumer_id,
        tag,
        flags,
        delivery_count,
        exchange_raw,
        routing_key_raw,
        buf[pos:body_at],
        buf[body_at:end],
    )
