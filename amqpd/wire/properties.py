"""Edit a raw content header without re-encoding what the publisher sent.

The broker forwards content headers as received. A few features must change one property
(x-delivery-count on redelivery, x-death when dead-lettering, BCC removal, the direct
reply-to address, dropping expiration on dead-lettering). Re-encoding the whole header with
pamqp would change other values (pamqp writes floats as 32-bit and timestamps in whole
seconds), so this module splits the header into the raw bytes of each property, replaces
only the ones that change, and splices table entries the same way: every byte the broker
does not mean to change stays as the publisher sent it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pamqp import decode, encode

# Property bits in wire order (bit 15 first) with the way each value is framed.
_SHORTSTR, _TABLE, _OCTET, _LONGLONG = "s", "t", "o", "q"
PROPERTY_LAYOUT: Final = (
    (15, _SHORTSTR),  # content_type
    (14, _SHORTSTR),  # content_encoding
    (13, _TABLE),  # headers
    (12, _OCTET),  # delivery_mode
    (11, _OCTET),  # priority
    (10, _SHORTSTR),  # correlation_id
    (9, _SHORTSTR),  # reply_to
    (8, _SHORTSTR),  # expiration
    (7, _SHORTSTR),  # message_id
    (6, _LONGLONG),  # timestamp
    (5, _SHORTSTR),  # type
    (4, _SHORTSTR),  # user_id
    (3, _SHORTSTR),  # app_id
    (2, _SHORTSTR),  # cluster_id
)
HEADERS: Final = 13
REPLY_TO: Final = 9
EXPIRATION: Final = 8
_LONG = struct.Struct(">I")
_INT64 = struct.Struct(">q")


class RawProperties:
    """A content header split into its fixed prefix and the raw bytes of each property."""

    __slots__ = ("fields", "prefix")

    def __init__(self, header: bytes) -> None:
        self.prefix = header[:12]  # class id, weight, body size
        (flags,) = struct.unpack_from(">H", header, 12)
        pos = 14
        self.fields: dict[int, bytes] = {}
        for bit, kind in PROPERTY_LAYOUT:
            if not flags & (1 << bit):
                continue
            if kind == _SHORTSTR:
                size = 1 + header[pos]
            elif kind == _TABLE:
                size = 4 + _LONG.unpack_from(header, pos)[0]
            elif kind == _OCTET:
                size = 1
            else:
                size = 8
            self.fields[bit] = header[pos : pos + size]
            pos += size

    def encode(self) -> bytes:
        """The content header payload again."""
        flags = 0
        parts = [self.prefix, b""]
        for bit, _kind in PROPERTY_LAYOUT:
            value = self.fields.get(bit)
            if value is not None:
                flags |= 1 << bit
                parts.append(value)
        parts[1] = struct.pack(">H", flags)
        return b"".join(parts)

    def get_shortstr(self, bit: int) -> str | None:
        """A shortstr property's value, or None when absent."""
        raw = self.fields.get(bit)
        return raw[1:].decode() if raw is not None else None

    def set_shortstr(self, bit: int, value: str | None) -> None:
        """Set (or with None remove) a shortstr property."""
        if value is None:
            self.fields.pop(bit, None)
        else:
            raw = value.encode()
            self.fields[bit] = bytes((len(raw),)) + raw

    def table_entries(self) -> list[tuple[str, bytes]]:
        """The headers table as (key, raw entry bytes incl. key) pairs, in wire order."""
        raw = self.fields.get(HEADERS)
        if raw is None:
            return []
        entries = []
        data = raw[4:]
        pos = 0
        while pos < len(data):
            key_len = data[pos]
            key = data[pos + 1 : pos + 1 + key_len].decode()
            consumed, _value = decode.embedded_value(data[pos + 1 + key_len :])
            end = pos + 1 + key_len + consumed
            entries.append((key, data[pos:end]))
            pos = end
        return entries

    def header_value(self, key: str) -> Any:
        """Decode one entry of the headers table (None when absent)."""
        for entry_key, entry in self.table_entries():
            if entry_key == key:
                _consumed, value = decode.embedded_value(entry[1 + len(entry_key.encode()) :])
                return value
        return None

    def edit_headers(
        self, set_first: Mapping[str, Any] | None = None, remove: Iterable[str] = ()
    ) -> None:
        """Remove entries and put new ones first (encoded with pamqp; only the broker's own
        values are encoded here, the publisher's entries are kept byte for byte)."""
        drop = set(remove)
        new = dict(set_first or {})
        drop.update(new)
        kept = [entry for key, entry in self.table_entries() if key not in drop]
        added = [encode.short_string(key) + encode_broker_value(v) for key, v in new.items()]
        if not kept and not added and HEADERS not in self.fields:
            return
        body = b"".join(added + kept)
        self.fields[HEADERS] = _LONG.pack(len(body)) + body


def encode_broker_value(value: Any) -> bytes:
    """A header value the broker generates, typed as RabbitMQ types its own: integers as
    ``l`` (64-bit long, e.g. x-death count, x-delivery-count; Java clients read a Long),
    tables and arrays recursively, anything else as pamqp encodes it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return b"l" + _INT64.pack(value)
    if isinstance(value, dict):
        body = b"".join(encode.short_string(k) + encode_broker_value(v) for k, v in value.items())
        return b"F" + _LONG.pack(len(body)) + body
    if isinstance(value, list):
        body = b"".join(encode_broker_value(v) for v in value)
        return b"A" + _LONG.pack(len(body)) + body
    return encode.encode_table_value(value)


def with_delivery_count(header: bytes, count: int) -> bytes:
    """The header with ``x-delivery-count`` set (RabbitMQ's quorum-queue header)."""
    props = RawProperties(header)
    props.edit_headers({"x-delivery-count": count})
    return props.encode()
