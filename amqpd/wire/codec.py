"""Frame codec: split the byte stream into frames, decode methods, encode the hot frames.

`FrameReader` works over the received ``bytes`` with a read offset: it reads the 7-byte frame
header by hand, rejects a frame whose payload is larger than frame_max (RabbitMQ's
FRAME_SIZE_FUDGE: frame_max + 8 bytes in all pass) before buffering its payload, and returns
``None`` (never raises) when it needs more data.

Methods are decoded with pamqp and encoded with pamqp's field encoders (`encode_method`,
without pamqp's name validation: any UTF-8 shortstr is a name), except the hot ones:
Basic.Publish, Ack and Nack are decoded here, and Basic.Deliver / Get-Ok / Get-Empty / Ack /
Nack are encoded here with `struct`. Content headers are never re-encoded: the broker keeps
the raw payload the publisher sent and forwards it, peeking only the few properties it needs
(amqpd/wire/content_header.py).
tests/unit/test_codec.py checks the fast paths byte for byte against pamqp.
"""

from __future__ import annotations

import inspect
import struct
from typing import Any, Final, TypeVar, cast, final

from pamqp import commands, encode
from pamqp.base import Frame as Method

from amqpd.wire.errors import FRAME_ERROR, SYNTAX_ERROR, AMQPError

M = TypeVar("M", bound=Method)

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = b"\xce"
FRAME_OVERHEAD: Final = 8  # 7-byte header + frame-end octet
PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_FRAME_HEADER = struct.Struct(">BHI")
_METHOD_INDEX = struct.Struct(">I")
_SHORT = struct.Struct(">H")
_LONG = struct.Struct(">I")
_LONGLONG = struct.Struct(">Q")

BASIC_PUBLISH: Final = 0x003C0028
BASIC_DELIVER: Final = 0x003C003C
BASIC_GET: Final = 0x003C0046
BASIC_ACK: Final = 0x003C0050
BASIC_NACK: Final = 0x003C0078
BASIC_CLASS: Final = 60


class FrameReader:
    """Incremental frame splitter.

    Theory of operation: the reader parses straight out of the ``bytes`` chunk it was fed
    (``_buf`` from ``_pos``): indexing ``bytes`` is native in the compiled build (a bytearray
    is not) and a payload is one slice, one copy. Bytes that arrive while an incomplete frame
    is pending are kept as a list of pieces (``_pieces``, ``_pieces_len``) and joined with
    the rest of ``_buf`` only once enough has arrived to make progress (a whole header, then
    the whole frame): a frame trickled in k pieces is copied a constant number of times, not
    k times (no O(n²) for a client that sends a byte at a time). ``compact``, once per fed
    chunk, keeps only the unparsed tail, so an idle connection holds no more than its
    incomplete frame.
    """

    __slots__ = ("_buf", "_pieces", "_pieces_len", "_pos", "channel", "frame_max", "frame_type")

    def __init__(self, frame_max: int) -> None:
        self._buf = b""
        self._pos = 0
        self._pieces: list[bytes] = []
        self._pieces_len = 0
        self.frame_max = frame_max
        self.frame_type = 0  # of the frame `next_payload` returned last
        self.channel = 0

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if type(data) is not bytes:
            data = bytes(data)
        if self._pos == len(self._buf) and not self._pieces:
            self._buf = data
            self._pos = 0
        else:
            self._pieces.append(data)
            self._pieces_len += len(data)

    def compact(self) -> None:
        """Drop consumed bytes (call once per received chunk, not per frame)."""
        pos = self._pos
        if pos:
            self._buf = self._buf[pos:]
            self._pos = 0

    def discard(self) -> None:
        """Drop everything buffered (the stream cannot be parsed any further)."""
        self._buf = b""
        self._pos = 0
        self._pieces = []
        self._pieces_len = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos + self._pieces_len

    def _join(self) -> None:
        """Move the pending pieces behind the unparsed rest of ``_buf``."""
        self._pieces.insert(0, self._buf[self._pos :])
        self._buf = b"".join(self._pieces)
        self._pos = 0
        self._pieces = []
        self._pieces_len = 0

    def next_frame(self) -> tuple[int, int, bytes] | None:
        """Return (frame_type, channel, payload) of the next complete frame, or None.

        Raises:
            AMQPError: 501 FRAME_ERROR for an oversized frame or a bad frame-end octet.
        """
        payload = self.next_payload()
        if payload is None:
            return None
        return self.frame_type, self.channel, payload

    def next_payload(self) -> bytes | None:
        """The next complete frame's payload (its type and channel in ``frame_type`` and
        ``channel``), or None: `next_frame` without a tuple per frame, for the connection.

        Raises:
            AMQPError: 501 FRAME_ERROR for an oversized frame or a bad frame-end octet.
        """
        buf = self._buf
        pos = self._pos
        have = len(buf) - pos
        if have < 7:
            if have + self._pieces_len < 7:
                return None
            self._join()
            buf = self._buf
            pos = 0
            have = len(buf)
        # The 7-byte header by hand (type, channel, size; big-endian): compiled, indexing
        # bytes is native, several times cheaper than struct's unpack_from and its tuple.
        frame_type = buf[pos]
        channel = (buf[pos + 1] << 8) | buf[pos + 2]
        size = (buf[pos + 3] << 24) | (buf[pos + 4] << 16) | (buf[pos + 5] << 8) | buf[pos + 6]
        if size > self.frame_max:
            # rabbit_reader's FRAME_SIZE_FUDGE: a payload of frame_max bytes (frame_max + 8
            # in all) is accepted because many clients get the limit wrong (rabbitpy sends
            # such frames for large bodies); anything larger is a fatal frame error
            raise AMQPError(
                FRAME_ERROR,
                f"type {frame_type}, all octets = <<>>: "
                f"{{frame_too_large,{size},{self.frame_max - FRAME_OVERHEAD}}}",
            )
        if have < size + 8:
            if have + self._pieces_len < size + 8:
                return None
            self._join()
            buf = self._buf
            pos = 0
        end = pos + 7 + size
        if buf[end] != FRAME_END:
            raise AMQPError(FRAME_ERROR, f"invalid frame end octet {buf[end]:#04x}")
        self._pos = end + 1
        self.frame_type = frame_type
        self.channel = channel
        return buf[pos + 7 : end]


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """Wrap a payload in a frame."""
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def encode_method(channel: int, method: Method) -> bytes:
    """Encode any method frame (cold path): pamqp's field encoders, in pamqp's argument
    order, but not pamqp's validation. pamqp checks names against the spec's grammar
    (``^[a-zA-Z0-9-_.:]*$``) and raises for ``café`` or ``orders!``; RabbitMQ accepts any
    UTF-8 shortstr as a name, so every reply must encode every name the broker accepted.
    What is sent is the method's own values: callers set every reserved field explicitly
    to what RabbitMQ sends (see `CHANNEL_OPEN_OK`)."""
    args: list[bytes] = [_METHOD_INDEX.pack(method.index)]
    bits = -1  # the octet being filled with consecutive bit arguments (-1: none)
    offset = 0
    for name in method.__slots__:
        kind = method.amqp_type(name)
        value = getattr(method, name, 0)
        if kind == "bit":
            if bits < 0:
                bits = offset = 0
            bits |= (1 if value else 0) << offset
            offset += 1
            if offset == 8:
                args.append(bytes((bits,)))
                bits = -1
            continue
        if bits >= 0:
            args.append(bytes((bits,)))
            bits = -1
        args.append(encode.by_type(value, kind))
    if bits >= 0:
        args.append(bytes((bits,)))
    return frame(FRAME_METHOD, channel, b"".join(args))


_DEFAULTS: dict[type[Method], dict[str, Any]] = {}


def build(cls: type[M], **values: Any) -> M:
    """A pamqp method with these argument values and pamqp's defaults for the others, not
    validated: pamqp's constructors check names against the spec grammar too, so a reply
    naming ``café`` must be built here (and encoded with `encode_method`)."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        parameters = inspect.signature(cls.__init__).parameters
        defaults = {n: p.default for n, p in parameters.items() if n != "self"}
        _DEFAULTS[cls] = defaults
    method = cls.__new__(cls)
    for name, default in defaults.items():
        setattr(method, name, values.pop(name, default))
    if values:
        raise TypeError(f"{cls.__name__} has no arguments {sorted(values)}")
    return method


# Channel.OpenOk as RabbitMQ sends it: the deprecated ``channel-id`` longstr is empty (pamqp's
# default is "0", and clients that parse the fixed size desynchronise on it).
CHANNEL_OPEN_OK: Final = build(commands.Channel.OpenOk, channel_id="")


@final
class PublishArgs:
    """Decoded Basic.Publish arguments (fast path).

    ``exchange_raw``/``routing_key_raw`` are the shortstrs as received (length byte included),
    reused verbatim in Deliver/Get-Ok/Return so names are never re-encoded per message.
    A plain class, not a dataclass: compiled, a dataclass's generated ``__init__`` stays
    interpreted Python (one per publish: 4-5 % of the broker's time in a py-spy profile).
    """

    __slots__ = (
        "exchange",
        "exchange_raw",
        "immediate",
        "mandatory",
        "routing_key",
        "routing_key_raw",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        mandatory: bool,
        immediate: bool,
        exchange_raw: bytes,
        routing_key_raw: bytes,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.exchange_raw = exchange_raw
        self.routing_key_raw = routing_key_raw


def method_index(payload: bytes) -> int:
    """The (class_id << 16 | method_id) index of a method frame payload."""
    if len(payload) < 4:
        raise AMQPError(FRAME_ERROR, "method frame too short")
    index: int = _METHOD_INDEX.unpack_from(payload, 0)[0]
    return index


def decode_publish(payload: bytes) -> PublishArgs:
    """Decode Basic.Publish without pamqp (4-byte index, ticket, two shortstrs, bits)."""
    try:
        pos = 6
        n = payload[pos]
        exchange_raw = payload[pos : pos + 1 + n]
        pos += 1 + n
        n = payload[pos]
        routing_key_raw = payload[pos : pos + 1 + n]
        pos += 1 + n
        bits = payload[pos]
        exchange = exchange_raw[1:].decode()
        routing_key = routing_key_raw[1:].decode()
    except (IndexError, UnicodeDecodeError) as exc:
        raise AMQPError(SYNTAX_ERROR, "cannot decode basic.publish arguments", 60, 40) from exc
    return PublishArgs(
        exchange, routing_key, bool(bits & 1), bool(bits & 2), exchange_raw, routing_key_raw
    )


def decode_method(index: int, payload: bytes) -> Method | None:
    """Decode a method with pamqp; None if the index is unknown.

    The method object is made with ``__new__``, not its constructor: ``unmarshal`` sets
    every argument, and the constructor would only set defaults and validate them (for
    basic.get, a round trip per message, that was ~4 % of the broker's time)."""
    if index == BASIC_GET:
        return _decode_get(payload)
    cls = commands.INDEX_MAPPING.get(index)
    if cls is None:
        return None
    method = cast(Method, object.__new__(cls))
    try:
        method.unmarshal(payload[4:])
    except (struct.error, ValueError, IndexError, TypeError, UnicodeDecodeError) as exc:
        raise AMQPError(
            SYNTAX_ERROR,
            f"cannot decode arguments of {method.name.lower()}",
            index >> 16,
            index & 0xFFFF,
        ) from exc
    return method


def _decode_get(payload: bytes) -> commands.Basic.Get:
    """Basic.Get without pamqp's generic decoder: ticket, queue shortstr, no-ack bit."""
    try:
        n = payload[6]
        queue = payload[7 : 7 + n].decode()
        if len(payload) < 8 + n:
            raise IndexError("basic.get arguments cut short")
        no_ack = bool(payload[7 + n] & 1)
    except (IndexError, UnicodeDecodeError) as exc:
        raise AMQPError(SYNTAX_ERROR, "cannot decode arguments of basic.get", 60, 70) from exc
    method = commands.Basic.Get.__new__(commands.Basic.Get)
    method.ticket = _SHORT.unpack_from(payload, 4)[0]
    method.queue = queue
    method.no_ack = no_ack
    return method


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    return bytes((len(raw),)) + raw


def encode_deliver(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: bytes,
    routing_key: bytes,
) -> bytes:
    """Basic.Deliver method frame. ``consumer_tag``/``exchange``/``routing_key`` are
    pre-encoded shortstrs (length byte included) so nothing is re-encoded per message."""
    payload = b"".join(
        (
            b"\x00\x3c\x00\x3c",
            consumer_tag,
            _LONGLONG.pack(delivery_tag),
            b"\x01" if redelivered else b"\x00",
            exchange,
            routing_key,
        )
    )
    return _FRAME_HEADER.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


_DELIVER_HEAD = struct.Struct(">BHII")  # method frame header + basic.deliver's index
_DELIVER_TAG = struct.Struct(">QB")  # delivery tag, redelivered
_FRAME_END_HEAD = struct.Struct(">BBHI")  # the previous frame's end octet + a frame header


def encode_delivery(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: bytes,
    routing_key: bytes,
    header: bytes,
    body: bytes,
    frame_max: int,
) -> list[bytes]:
    """Basic.Deliver, its content header and body as parts to write in order: the same
    bytes as `encode_deliver` followed by `encode_content`, in fewer objects (a delivery
    is the broker's most frequent output: four packed pieces, no intermediate joins).
    ``consumer_tag``/``exchange``/``routing_key`` are pre-encoded shortstrs."""
    size = 13 + len(consumer_tag) + len(exchange) + len(routing_key)
    parts = [
        _DELIVER_HEAD.pack(FRAME_METHOD, channel, size, BASIC_DELIVER),
        consumer_tag,
        _DELIVER_TAG.pack(delivery_tag, 1 if redelivered else 0),
        exchange,
        routing_key,
        _FRAME_END_HEAD.pack(FRAME_END, FRAME_HEADER, channel, len(header)),
        header,
    ]
    body_size = len(body)
    if body_size and body_size <= frame_max - FRAME_OVERHEAD:
        parts += (_FRAME_END_HEAD.pack(FRAME_END, FRAME_BODY, channel, body_size), body)
    elif body_size:
        parts.append(FRAME_END_BYTE)
        parts += encode_content_body(channel, body, frame_max)
        return parts
    parts.append(FRAME_END_BYTE)
    return parts


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: bytes,
    routing_key: bytes,
    message_count: int,
) -> bytes:
    """Basic.Get-Ok method frame (shortstr arguments pre-encoded)."""
    payload = b"".join(
        (
            b"\x00\x3c\x00\x47",
            _LONGLONG.pack(delivery_tag),
            b"\x01" if redelivered else b"\x00",
            exchange,
            routing_key,
            _LONG.pack(message_count),
        )
    )
    return _FRAME_HEADER.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


_ACK_FRAME = struct.Struct(">BHIIQBB")


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """Basic.Ack method frame."""
    return _ACK_FRAME.pack(
        FRAME_METHOD, channel, 13, BASIC_ACK, delivery_tag, 1 if multiple else 0, FRAME_END
    )


def encode_nack(channel: int, delivery_tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """Basic.Nack method frame."""
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, BASIC_NACK, delivery_tag, bits, FRAME_END)


_ACK_ARGS = struct.Struct(">qB")  # pamqp decodes a long-long as signed: so does this


def decode_ack(index: int, payload: bytes) -> tuple[int, int]:
    """Basic.Ack / Basic.Nack arguments without pamqp: (delivery tag, bits); bit 0 is
    ``multiple``, bit 1 (Nack) ``requeue``. A short payload is 502, as with pamqp."""
    try:
        tag, bits = _ACK_ARGS.unpack_from(payload, 4)
    except struct.error as exc:
        name = "basic.ack" if index == BASIC_ACK else "basic.nack"
        raise AMQPError(
            SYNTAX_ERROR, f"cannot decode arguments of {name}", BASIC_CLASS, index & 0xFFFF
        ) from exc
    return tag, bits


def encode_get_empty(channel: int) -> bytes:
    """Basic.Get-Empty method frame (an empty cluster-id)."""
    return _FRAME_HEADER.pack(FRAME_METHOD, channel, 5) + b"\x00\x3c\x00\x48\x00\xce"


def encode_shortstr(value: str) -> bytes:
    """Length-prefixed UTF-8 (for pre-encoding names once)."""
    return _shortstr(value)


def encode_content(channel: int, header: bytes, body: bytes, frame_max: int) -> list[bytes]:
    """The content header frame (raw payload forwarded unchanged) and body frames."""
    parts = [_FRAME_HEADER.pack(FRAME_HEADER, channel, len(header)), header, FRAME_END_BYTE]
    size = len(body)
    if size:
        if size <= frame_max - FRAME_OVERHEAD:
            parts += (_FRAME_HEADER.pack(FRAME_BODY, channel, size), body, FRAME_END_BYTE)
        else:
            parts += encode_content_body(channel, body, frame_max)
    return parts


def encode_content_body(channel: int, body: bytes, frame_max: int) -> list[bytes]:
    """A body larger than one frame, as body frames of at most ``frame_max`` bytes."""
    parts: list[bytes] = []
    chunk = frame_max - FRAME_OVERHEAD
    view = memoryview(body)
    for start in range(0, len(body), chunk):
        piece = view[start : start + chunk]
        parts += (_FRAME_HEADER.pack(FRAME_BODY, channel, len(piece)), bytes(piece), FRAME_END_BYTE)
    return parts


_METHOD_NAMES: dict[int, str] = {}


def method_name(index: int) -> str | None:
    """The dotted lower-case name of the method ``index`` (for error texts), or None for an
    index AMQP 0-9-1 does not define."""
    if not _METHOD_NAMES:
        for known, cls in commands.INDEX_MAPPING.items():
            _METHOD_NAMES[known] = str(getattr(cls, "name", known)).lower()
    return _METHOD_NAMES.get(index)
