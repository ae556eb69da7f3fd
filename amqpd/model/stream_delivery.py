"""Delivering a stream's messages (amqpd/model/stream.py) straight from its chunk bytes.

Theory of operation
-------------------
A consumer's `StreamReader` holds its position in the log (the log's reader) and the
undecoded payload of the chunk it read last, with where each entry starts in it
(`entry_positions`: lengths only, no per-message objects). `StreamReader.take` hands out
a `StreamRun`: up to the consumer's credit of consecutive entries of that chunk which the
consumer's filter takes (``x-stream-filter``: the chunk's bloom filter was checked by the
log reader, each entry's ``x-stream-filter-value`` is checked here exactly).

The channel gives a run its delivery tags (contiguous) and asks it for its frames
(`StreamRun.frames`): for each entry one byte string holding basic.deliver (consumer tag,
tag, redelivered false, then the stored exchange and routing key shortstrs copied as they
are), the publisher's content header with ``x-stream-offset`` (a long) spliced in last in
its headers table (`with_offset`, as RabbitMQ puts it) and the body frame(s). The unacked
records hold a `StreamDelivery` (offset and reader; the acking consumer's tracked offset
is stored from it) whose message is a shared placeholder: a stream keeps no body in
memory once sent.
"""

from __future__ import annotations

import struct
from typing import Final, Protocol, final

from amqpd.model.message import Message, QueueEntry
from amqpd.wire.properties import HEADERS, RawProperties
from persistence.stream.format import (
    bloom_bits,
    filter_value_at,
    skip_entries,
)

OFFSET_HEADER: Final = "x-stream-offset"
_OFFSET_ENTRY: Final = b"\x0fx-stream-offsetl"
_ENTRY_SIZE: Final = len(_OFFSET_ENTRY) + 8
_FLAGS: Final = struct.Struct(">H")
_TABLE_SIZE: Final = struct.Struct(">I")
_OFFSET_VALUE: Final = struct.Struct(">q")
_NEW_TABLE: Final = _TABLE_SIZE.pack(_ENTRY_SIZE) + _OFFSET_ENTRY
_FRAME_HEADER: Final = struct.Struct(">BHI")
_TAG_NOT_REDELIVERED: Final = struct.Struct(">QB")
_DELIVER_METHOD: Final = b"\x00\x3c\x00\x3c"
_FRAME_END: Final = b"\xce"
_FRAME_OVERHEAD: Final = 8
_NO_MESSAGE: Final = Message("", "", b"\x00", b"\x00", b"", None, True)


class LogReaderPort(Protocol):
    """A position in a stream's log (persistence.stream.log.LogReader)."""

    offset: int

    def next_raw(
        self, masks: list[int] | None = None, match_unfiltered: bool = False
    ) -> tuple[bytes, int, int]:
        """The chunk at ``offset``, undecoded: (its payload, its first offset, the reader's
        offset before); see persistence/stream/log.py."""
        ...


@final
class StreamReader:
    """A consumer's place in the stream: the log reader and the rest of its last chunk."""

    __slots__ = (
        "count",
        "cursor",
        "filters",
        "first",
        "index",
        "masks",
        "match_unfiltered",
        "payload",
        "pending",
        "position",
        "tracking",
    )

    def __init__(
        self,
        position: LogReaderPort,
        filters: tuple[bytes, ...] | None,
        match_unfiltered: bool,
        tracking: str | None,
    ) -> None:
        self.position = position
        self.payload = b""  # the chunk read last
        self.first = 0  # the offset of its first entry
        self.count = 0  # its entries
        self.index = 0  # the next entry to look at
        self.cursor = 0  # where that entry starts in ``payload``
        self.pending: StreamRun | None = None  # handed out; ``cursor`` is where it ends
        self.filters = filters
        self.masks = None if filters is None else [bloom_bits(value) for value in filters]
        self.match_unfiltered = match_unfiltered
        self.tracking = tracking  # the consumer tag under which acked offsets are stored

    @property
    def offset(self) -> int:
        """The next offset this reader looks at."""
        if self.index < self.count:
            return self.first + self.index
        return self.position.offset

    def take(self, end: int, limit: int) -> StreamRun | None:
        """Up to ``limit`` (> 0) entries below offset ``end`` that the filter takes, from
        one chunk; None if there is none now."""
        filters = self.filters
        while True:
            pending = self.pending
            if pending is not None:  # its frames found where it ends
                self.cursor = pending.end_position()
                self.pending = None
            index = self.index
            if index >= self.count:
                if not self._read(end):
                    return None
                continue
            first = self.first
            stop = min(self.count, end - first)
            if index >= stop:
                return None  # the next entry is not durable yet
            payload = self.payload
            if filters is None:
                taken = min(stop - index, limit)
                run = StreamRun(payload, self.cursor, taken, first + index, self)
                self.index = index + taken
                self.pending = run
                return run
            starts: list[int] = []
            offsets: list[int] = []
            pos = self.cursor
            while index < stop and len(starts) < limit:
                after = skip_entries(payload, pos, 1)
                value = filter_value_at(payload, pos, after)
                if (value is None and self.match_unfiltered) or value in filters:
                    starts.append(pos)
                    offsets.append(first + index)
                pos = after
                index += 1
            self.index = index
            self.cursor = pos
            if starts:
                run = StreamRun(payload, starts[0], len(starts), offsets[0], self)
                run.starts = starts
                run.offsets = offsets
                return run

    def _read(self, end: int) -> bool:
        """Read the next chunk; False if the log has nothing more below ``end`` now."""
        position = self.position
        before = position.offset
        if before >= end:
            return False
        payload, first, start = position.next_raw(self.masks, self.match_unfiltered)
        if not payload:
            self.payload, self.first, self.count, self.index, self.cursor = b"", 0, 0, 0, 0
            return position.offset != before  # a skipped chunk (filter): look further
        self.payload = payload
        self.first = first
        self.count = position.offset - first  # the log reader moved past the chunk
        self.index = start - first
        self.cursor = skip_entries(payload, 0, start - first)
        return True


@final
class StreamDelivery(QueueEntry):
    """A delivered stream message awaiting its ack (``seq`` is its offset)."""

    __slots__ = ("reader",)

    def __init__(self, offset: int, reader: StreamReader) -> None:
        super().__init__(_NO_MESSAGE, offset)
        self.reader = reader


@final
class StreamRun:
    """Entries of one chunk about to be delivered to one consumer (see the module's
    theory of operation): ``count`` consecutive entries from byte ``start`` of
    ``payload`` (offsets from ``first``), or those at ``starts`` with ``offsets``
    (a filtered run)."""

    __slots__ = ("count", "end", "first", "offsets", "payload", "reader", "start", "starts")

    def __init__(
        self, payload: bytes, start: int, count: int, first: int, reader: StreamReader
    ) -> None:
        self.payload = payload
        self.start = start
        self.count = count
        self.first = first
        self.reader = reader
        self.starts: list[int] | None = None
        self.offsets: list[int] | None = None
        self.end = -1  # where the run ends in ``payload`` (consecutive runs, once known)

    def __len__(self) -> int:
        return self.count

    def offset_list(self) -> list[int]:
        """The offsets of the run's entries."""
        offsets = self.offsets
        if offsets is not None:
            return offsets
        return list(range(self.first, self.first + self.count))

    def end_position(self) -> int:
        """Where the entry after a consecutive run starts in ``payload``."""
        if self.end < 0:
            self.end = skip_entries(self.payload, self.start, self.count)
        return self.end

    def entries(self) -> list[QueueEntry]:
        """One unacked record's entry per delivery: its own (with its offset) for a
        consumer whose acks store its offset, else one shared by the run (nothing is done
        with it on ack)."""
        reader = self.reader
        if reader.tracking is None:
            return [StreamDelivery(self.first, reader)] * self.count
        return [StreamDelivery(offset, reader) for offset in self.offset_list()]

    def messages(self) -> list[tuple[bytes, bytes, bytes, bytes]]:
        """The run's messages as (exchange, routing key: shortstrs as stored; content header
        with the offset spliced in, as `frames` sends it; body), for a consumer on another
        worker (amqpd/engine/served_consumers.py sends them as DELIVER records)."""
        payload = self.payload
        starts = self.starts
        pos = self.start
        out = []
        for number, offset in enumerate(self.offset_list()):
            if starts is not None:
                pos = starts[number]
            exchange_end = pos + 1 + payload[pos]
            names_end = exchange_end + 1 + payload[exchange_end]
            header_start = names_end + 4
            header_end = header_start + _u32(payload, names_end)
            body_start = header_end + 4
            body_end = body_start + _u32(payload, header_end)
            header = with_offset(payload[header_start:header_end], offset)
            out.append(
                (
                    payload[pos:exchange_end],
                    payload[exchange_end:names_end],
                    header,
                    payload[body_start:body_end],
                )
            )
            pos = body_end + 2 + (payload[body_end] | payload[body_end + 1] << 8)
        if starts is None:
            self.end = pos
        return out

    def frames(
        self, channel: int, consumer_tag: bytes, first_tag: int, frame_max: int
    ) -> list[bytes]:
        """The run's deliveries (tags from ``first_tag`` on) as byte strings to send in
        order: pieces, not one string per delivery, since the connection joins all it
        sends once. What does not change between consecutive entries is built once: the
        method frame's head (same exchange and routing key), the body frame's head (same
        body size), and when the content header is the same too, everything around the
        offset's 8 bytes. A content header that differs from the one before (a message id
        each, say) is sent as three slices of the chunk around the new table size and the
        offset entry (`offset_cut`), nothing patched in a copy first."""
        payload = self.payload
        parts: list[bytes] = []
        prefix = _DELIVER_METHOD + consumer_tag
        method_fixed = len(prefix) + 9
        body_max = frame_max - _FRAME_OVERHEAD
        pack_frame = _FRAME_HEADER.pack
        pack_tag = _TAG_NOT_REDELIVERED.pack
        pack_offset = _OFFSET_VALUE.pack
        tag = first_tag
        last_names = last_header = b""
        last_body_len = -1
        method_head = names_end_frame = body_head = b""
        middle = tail = b""  # around the offset for ``last_header`` (once both are known)
        header_cut = False  # ``middle``/``tail`` are stale: ``last_header`` was sent in cuts
        starts = self.starts
        pos = self.start
        for number, offset in enumerate(self.offset_list()):
            if starts is not None:
                pos = starts[number]
            names_end = pos + 1 + payload[pos]
            names_end += 1 + payload[names_end]
            header_start = names_end + 4
            header_end = header_start + _u32(payload, names_end)
            body_start = header_end + 4
            body_len = _u32(payload, header_end)
            body_end = body_start + body_len
            entry_end = body_end + 2 + (payload[body_end] | payload[body_end + 1] << 8)
            names = payload[pos:names_end]
            pos = entry_end  # the next entry
            if body_len > body_max:  # several body frames: built apart
                header = payload[header_start:header_end]
                parts.append(
                    _one_delivery(
                        channel,
                        prefix,
                        tag,
                        names,
                        header,
                        offset,
                        payload,
                        body_start,
                        body_len,
                        body_max,
                    )
                )
                tag += 1
                continue
            if names != last_names:
                last_names = names
                method_head = pack_frame(1, channel, method_fixed + len(names)) + prefix
                names_end_frame = names + _FRAME_END
                last_header = b""  # ``middle`` starts with the names
            if body_len != last_body_len:
                last_body_len = body_len
                body_head = _FRAME_END + pack_frame(3, channel, body_len) if body_len else b""
                last_header = b""  # ``tail`` ends with the body frame's head
            header = payload[header_start:header_end]
            if header != last_header:
                last_header = header
                cut = offset_cut(payload, header_start, header_end)
                if cut is not None:
                    table_at, table_end = cut
                    header_cut = True
                    parts += (
                        method_head,
                        pack_tag(tag, 0),
                        names_end_frame,
                        pack_frame(2, channel, header_end - header_start + _ENTRY_SIZE),
                        payload[header_start:table_at],
                        _TABLE_SIZE.pack(table_end - table_at - 4 + _ENTRY_SIZE),
                        payload[table_at + 4 : table_end],
                        _OFFSET_ENTRY,
                        pack_offset(offset),
                        payload[table_end:header_end],
                    )
                    _add_body(parts, body_head, payload, body_start, body_end)
                    tag += 1
                    continue
                header_cut = False
                before, after = offset_split(header)
                middle = names_end_frame + pack_frame(2, channel, len(before) + 8 + len(after))
                middle += before
                tail = after + body_head if body_len else after + _FRAME_END
            elif header_cut:  # the same header twice: build its pieces once from now on
                header_cut = False
                before, after = offset_split(header)
                middle = names_end_frame + pack_frame(2, channel, len(before) + 8 + len(after))
                middle += before
                tail = after + body_head if body_len else after + _FRAME_END
            parts += (method_head, pack_tag(tag, 0), middle, pack_offset(offset), tail)
            if body_len:
                parts += (payload[body_start:body_end], _FRAME_END)
            tag += 1
        if starts is None:
            self.end = pos
        return parts


def _u32(payload: bytes, at: int) -> int:
    """The little-endian u32 at ``at`` (an entry's header or body length)."""
    return payload[at] | payload[at + 1] << 8 | payload[at + 2] << 16 | payload[at + 3] << 24


def _add_body(parts: list[bytes], body_head: bytes, payload: bytes, start: int, end: int) -> None:
    """The header frame's end and the body frame (none for an empty body)."""
    if end > start:
        parts += (body_head, payload[start:end], _FRAME_END)
    else:
        parts.append(_FRAME_END)


def offset_cut(payload: bytes, start: int, end: int) -> tuple[int, int] | None:
    """Where the headers table of the content header ``payload[start:end]`` starts and
    ends, when `with_offset` would append the offset entry to it (a table without
    ``x-stream-offset``); None otherwise (no table: one is added; or it has one)."""
    flags = (payload[start + 12] << 8) | payload[start + 13]
    if flags & 1 or not flags & 0x2000:
        return None
    pos = start + 14
    if flags & 0x8000:  # content_type
        pos += 1 + payload[pos]
    if flags & 0x4000:  # content_encoding
        pos += 1 + payload[pos]
    table_end = (
        pos
        + 4
        + (payload[pos] << 24 | payload[pos + 1] << 16 | payload[pos + 2] << 8 | payload[pos + 3])
    )
    if payload.find(_OFFSET_ENTRY, pos + 4, table_end) >= 0:
        return None
    return pos, table_end


def _one_delivery(
    channel: int,
    prefix: bytes,
    tag: int,
    names: bytes,
    header: bytes,
    offset: int,
    payload: bytes,
    body_start: int,
    body_len: int,
    body_max: int,
) -> bytes:
    """One delivery whose body takes several frames."""
    pack_frame = _FRAME_HEADER.pack
    patched = with_offset(header, offset)
    pieces = [
        pack_frame(1, channel, len(prefix) + 9 + len(names)),
        prefix,
        _TAG_NOT_REDELIVERED.pack(tag, 0),
        names,
        _FRAME_END,
        pack_frame(2, channel, len(patched)),
        patched,
        _FRAME_END,
    ]
    start = body_start
    body_end = body_start + body_len
    while start < body_end:
        size = min(body_max, body_end - start)
        pieces += (pack_frame(3, channel, size), payload[start : start + size], _FRAME_END)
        start += size
    return b"".join(pieces)


def offset_split(header: bytes) -> tuple[bytes, bytes]:
    """``header`` patched by `with_offset`, cut where the offset's 8 bytes go.

    Once per delivery when the headers differ from one message to the next (a message id
    each, say), so the usual cases are cut directly: a headers table without
    ``x-stream-offset`` (the entry goes last), or none (a table of that entry alone)."""
    flags = (header[12] << 8) | header[13]
    if not flags & 1:
        pos = 14
        if flags & 0x8000:  # content_type
            pos += 1 + header[pos]
        if flags & 0x4000:  # content_encoding
            pos += 1 + header[pos]
        if not flags & 0x2000:
            before = header[:12] + _FLAGS.pack(flags | 0x2000) + header[14:pos] + _NEW_TABLE
            return before, header[pos:]
        (size,) = _TABLE_SIZE.unpack_from(header, pos)
        end = pos + 4 + size
        if header.find(_OFFSET_ENTRY, pos + 4, end) < 0:
            before = b"".join(
                (header[:pos], _TABLE_SIZE.pack(size + _ENTRY_SIZE), header[pos + 4 : end])
            )
            return before + _OFFSET_ENTRY, header[end:]
    zeros = with_offset(header, 0)  # the publisher sent x-stream-offset: cut by difference
    ones = with_offset(header, -1)  # the offset's bytes are all that differ
    at = 0
    while zeros[at] == ones[at]:
        at += 1
    return zeros[:at], zeros[at + 8 :]


def with_offset(header: bytes, offset: int) -> bytes:
    """``header`` with ``x-stream-offset`` (a long) last in its headers table, as RabbitMQ
    puts it: spliced in after the two shortstrs that may precede the table (the
    publisher's bytes stay as they are)."""
    flags = (header[12] << 8) | header[13]
    if not flags & 1:  # one property-flags word (always, for basic)
        pos = 14
        if flags & 0x8000:  # content_type
            pos += 1 + header[pos]
        if flags & 0x4000:  # content_encoding
            pos += 1 + header[pos]
        if not flags & 0x2000:  # no headers table: add one
            return b"".join(
                (
                    header[:12],
                    _FLAGS.pack(flags | 0x2000),
                    header[14:pos],
                    _NEW_TABLE,
                    _OFFSET_VALUE.pack(offset),
                    header[pos:],
                )
            )
        (size,) = _TABLE_SIZE.unpack_from(header, pos)
        end = pos + 4 + size
        if header.find(_OFFSET_ENTRY, pos + 4, end) < 0:
            return b"".join(
                (
                    header[:pos],
                    _TABLE_SIZE.pack(size + _ENTRY_SIZE),
                    header[pos + 4 : end],
                    _OFFSET_ENTRY,
                    _OFFSET_VALUE.pack(offset),
                    header[end:],
                )
            )
    props = RawProperties(header)  # the publisher sent an x-stream-offset: replace it
    kept = [item for key, item in props.table_entries() if key != OFFSET_HEADER]
    body = b"".join(kept) + _OFFSET_ENTRY + _OFFSET_VALUE.pack(offset)
    props.fields[HEADERS] = _TABLE_SIZE.pack(len(body)) + body
    return props.encode()
