"""The on-disk format of a stream: chunks of entries, and the per-chunk filter (pure).

A segment file is a sequence of chunks. A chunk is a group of consecutive messages written
together (what one flush appended, at most `CHUNK_MAX_ENTRIES` messages or
`CHUNK_MAX_BYTES` bytes), as in RabbitMQ's osiris::

    header (CHUNK_HEADER, 48 bytes):
        magic b"AQS1", crc32 (of the rest of the header after this field and the payload),
        first offset (u64), timestamp (ms, i64), entries (u32), payload length (u32),
        flags (u8: bit 0 = some entry has no filter value), 3 pad bytes, bloom (FILTER_BYTES)
    payload: entries, each
        exchange shortstr (length byte + bytes), routing key shortstr,
        header length (u32) + raw content header, body length (u32) + body,
        filter length (u16) + filter value (x-stream-filter-value, 0 length: none)

The index file beside each segment holds one `INDEX_ENTRY` per chunk: (first offset, file
position, timestamp). Offsets are contiguous: entry i of a chunk has offset first + i.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

MAGIC: Final = b"AQS1"
FILTER_BYTES: Final = 16  # RabbitMQ's default x-stream-filter-size-bytes
CHUNK_HEADER: Final = struct.Struct(f"<4sIQqII B3x{FILTER_BYTES}s")
INDEX_ENTRY: Final = struct.Struct("<QQq")
ENTRY_LENGTHS: Final = struct.Struct("<I")
FILTER_LENGTH: Final = struct.Struct("<H")
CHUNK_MAX_ENTRIES: Final = 1024
CHUNK_MAX_BYTES: Final = 1 << 20
FLAG_UNFILTERED: Final = 1
_CRC_FROM: Final = 8  # the crc covers the header after magic and crc, then the payload


class StoredEntry:
    """One message read back from a stream."""

    __slots__ = ("body", "exchange_raw", "filter_value", "header", "offset", "routing_key_raw")

    def __init__(
        self,
        offset: int,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        header: bytes,
        body: bytes,
        filter_value: bytes | None,
    ) -> None:
        self.offset = offset
        self.exchange_raw = exchange_raw
        self.routing_key_raw = routing_key_raw
        self.header = header
        self.body = body
        self.filter_value = filter_value


def decode_entries(payload: bytes, first_offset: int) -> list[StoredEntry]:
    """The entries of a chunk's payload."""
    entries = []
    pos = 0
    offset = first_offset
    unpack_len = ENTRY_LENGTHS.unpack_from
    end = len(payload)
    while pos < end:
        ex_end = pos + 1 + payload[pos]
        exchange_raw = payload[pos:ex_end]
        rk_end = ex_end + 1 + payload[ex_end]
        routing_key_raw = payload[ex_end:rk_end]
        (header_len,) = unpack_len(payload, rk_end)
        header_end = rk_end + 4 + header_len
        header = payload[rk_end + 4 : header_end]
        (body_len,) = unpack_len(payload, header_end)
        body_end = header_end + 4 + body_len
        body = payload[header_end + 4 : body_end]
        (filter_len,) = FILTER_LENGTH.unpack_from(payload, body_end)
        pos = body_end + 2 + filter_len
        filter_value = payload[body_end + 2 : pos] if filter_len else None
        entries.append(
            StoredEntry(offset, exchange_raw, routing_key_raw, header, body, filter_value)
        )
        offset += 1
    return entries


def skip_entries(payload: bytes, pos: int, count: int) -> int:
    """Where the entry ``count`` entries after the one at ``pos`` starts (lengths only,
    nothing copied)."""
    unpack_len = ENTRY_LENGTHS.unpack_from
    unpack_filter = FILTER_LENGTH.unpack_from
    for _ in range(count):
        pos += 1 + payload[pos]
        pos += 1 + payload[pos]
        (header_len,) = unpack_len(payload, pos)
        pos += 4 + header_len
        (body_len,) = unpack_len(payload, pos)
        pos += 4 + body_len
        (filter_len,) = unpack_filter(payload, pos)
        pos += 2 + filter_len
    return pos


def filter_value_at(payload: bytes, pos: int, entry_end: int) -> bytes | None:
    """The ``x-stream-filter-value`` of the entry at ``pos`` (ending at ``entry_end``),
    None if it has none (the value is the entry's last field, after its u16 length)."""
    start = pos + 1 + payload[pos]
    start += 1 + payload[start]
    (header_len,) = ENTRY_LENGTHS.unpack_from(payload, start)
    start += 4 + header_len
    (body_len,) = ENTRY_LENGTHS.unpack_from(payload, start)
    start += 4 + body_len + 2
    return payload[start:entry_end] if entry_end > start else None


def bloom_bits(value: bytes) -> int:
    """The two bits ``value`` sets in a chunk's bloom filter (as an int bit mask)."""
    bits = FILTER_BYTES * 8
    first = zlib.crc32(value) % bits
    second = zlib.adler32(value) % bits
    return (1 << first) | (1 << second)


def encode_chunk(
    first_offset: int, timestamp_ms: int, count: int, payload: bytes, flags: int, bloom: int
) -> bytes:
    """A chunk: its header (with the crc) followed by ``payload``."""
    bloom_raw = bloom.to_bytes(FILTER_BYTES, "little")
    header = CHUNK_HEADER.pack(
        MAGIC, 0, first_offset, timestamp_ms, count, len(payload), flags, bloom_raw
    )
    crc = zlib.crc32(payload, zlib.crc32(header[_CRC_FROM:]))
    return MAGIC + struct.pack("<I", crc) + header[_CRC_FROM:] + payload


class ChunkHeader:
    """A decoded chunk header."""

    __slots__ = ("bloom", "count", "crc", "first_offset", "flags", "length", "raw", "timestamp")

    def __init__(self, raw: bytes) -> None:
        magic, crc, first, timestamp, count, length, flags, bloom = CHUNK_HEADER.unpack(raw)
        if magic != MAGIC:
            raise ValueError("not a chunk header")
        self.raw = raw
        self.crc: int = crc
        self.first_offset: int = first
        self.timestamp: int = timestamp
        self.count: int = count
        self.length: int = length
        self.flags: int = flags
        self.bloom = int.from_bytes(bloom, "little")

    def valid_payload(self, payload: bytes) -> bool:
        """Whether ``payload`` is complete and matches the header's crc."""
        if len(payload) != self.length:
            return False
        return zlib.crc32(payload, zlib.crc32(self.raw[_CRC_FROM:])) == self.crc
