"""Peeking into a raw content header: the few properties the broker looks at (class, body
size, delivery mode, priority, expiration, the headers table's bytes), read in place, the
header itself never re-encoded (amqpd/wire/codec.py forwards the publisher's bytes).
tests/unit/test_codec.py checks `peek_header` against pamqp's encoding."""

from __future__ import annotations

import struct
from typing import Final, final

from pamqp import decode
from pamqp.common import FieldTable

from amqpd.wire.errors import SYNTAX_ERROR, AMQPError

_LONG = struct.Struct(">I")
_CONTENT_HEADER = struct.Struct(">HHQH")  # class, weight, body size, first flag word

# Property flag bits, in wire order.
FLAG_CONTENT_TYPE: Final = 1 << 15
FLAG_CONTENT_ENCODING: Final = 1 << 14
FLAG_HEADERS: Final = 1 << 13
FLAG_DELIVERY_MODE: Final = 1 << 12
FLAG_PRIORITY: Final = 1 << 11
FLAG_CORRELATION_ID: Final = 1 << 10
FLAG_REPLY_TO: Final = 1 << 9
FLAG_EXPIRATION: Final = 1 << 8


@final
class HeaderPeek:
    """The content-header fields the broker looks at (a plain class: see PublishArgs)."""

    __slots__ = (
        "body_size",
        "class_id",
        "delivery_mode",
        "expiration",
        "flags",
        "headers_raw",
        "priority",
    )

    def __init__(
        self,
        class_id: int,
        body_size: int,
        flags: int,
        delivery_mode: int,
        priority: int | None,
        expiration: str | None,
        headers_raw: bytes | None,  # the field-table bytes, without the length prefix
    ) -> None:
        self.class_id = class_id
        self.body_size = body_size
        self.flags = flags
        self.delivery_mode = delivery_mode
        self.priority = priority
        self.expiration = expiration
        self.headers_raw = headers_raw


def peek_header(payload: bytes) -> HeaderPeek:
    """Read class id, body size and the properties up to expiration from a raw header.

    Raises:
        AMQPError: 502 SYNTAX_ERROR if the header is truncated.
    """
    try:
        class_id, _weight, body_size, flags = _CONTENT_HEADER.unpack_from(payload, 0)
        pos = 14
        while payload[pos - 1] & 1:  # continuation flag word(s): skip, nothing we use
            pos += 2
        delivery_mode = 0
        priority: int | None = None
        expiration: str | None = None
        headers_raw: bytes | None = None
        if flags & FLAG_CONTENT_TYPE:
            pos += 1 + payload[pos]
        if flags & FLAG_CONTENT_ENCODING:
            pos += 1 + payload[pos]
        if flags & FLAG_HEADERS:
            (n,) = _LONG.unpack_from(payload, pos)
            headers_raw = payload[pos + 4 : pos + 4 + n]
            pos += 4 + n
        if flags & FLAG_DELIVERY_MODE:
            delivery_mode = payload[pos]
            pos += 1
        if flags & FLAG_PRIORITY:
            priority = payload[pos]
            pos += 1
        if flags & FLAG_CORRELATION_ID:
            pos += 1 + payload[pos]
        if flags & FLAG_REPLY_TO:
            pos += 1 + payload[pos]
        if flags & FLAG_EXPIRATION:
            n = payload[pos]
            expiration = payload[pos + 1 : pos + 1 + n].decode()
            pos += 1 + n
        if pos > len(payload):
            raise IndexError(pos)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise AMQPError(SYNTAX_ERROR, "cannot decode content header properties") from exc
    return HeaderPeek(class_id, body_size, flags, delivery_mode, priority, expiration, headers_raw)


def decode_headers_table(headers_raw: bytes | None) -> FieldTable | None:
    """Decode the headers field table peeked from a content header."""
    if headers_raw is None:
        return None
    _, table = decode.field_table(_LONG.pack(len(headers_raw)) + headers_raw)
    return table
