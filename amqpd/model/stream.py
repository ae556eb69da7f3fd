"""A stream queue (``x-queue-type: stream``): an append-only log read from an offset.

Theory of operation
-------------------
A `StreamQueue` is a `Queue` whose messages live in a log (`StreamLogPort`; the shell
plugs in persistence/stream/log.py) instead of the ready deque, which stays empty. A
publish appends (`enqueue`) and gets the next offset; offsets are contiguous. Nothing is
removed by consumption: only retention (``x-max-length-bytes``, ``x-max-age``) deletes
whole segments, oldest first.

Durability: with a store, an append asks the journal for a `barrier` (the confirm of the
publish waits for that batch, as for a persistent message) and puts the stream into the
broker's ``dirty`` set; before writing the batch, the group committer flushes and fsyncs
every dirty stream and reports `log_synced(upto)`. Consumers only see durable messages
(below ``synced_next``), so an offset a consumer has seen is never reused after a crash.
Without a store (memory-only broker) every appended message is visible at once.

Consumers: each consumer has a `_Reader`: a position in the log (the log's reader) and
the rest of the chunk it read last (at most one chunk). `dispatch` serves every consumer
independently while its channel gives credit (manual acks and a per-consumer prefetch
are required, so the prefetch is a hard cap; acks give credit back). Each delivery is a
new `Message` built from the log entry, its header carrying ``x-stream-offset`` (long),
original exchange and routing key, redelivered false. A consumer's filter
(``x-stream-filter``) skips whole chunks by their bloom filter, then checks each message's
``x-stream-filter-value`` exactly (RabbitMQ leaves that second step to the client).
A consumer with ``x-stream-automatic-offset-tracking`` stores its last acked offset
under its consumer tag; it resumes after it when it comes back without ``x-stream-offset``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from typing import Any, Final, Protocol

from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.queue_args import InvalidQueueArgument
from amqpd.model.stream_args import (
    OffsetSpec,
    StreamSettings,
    not_supported,
    parse_consumer_args,
    stream_settings,
)
from amqpd.wire.properties import HEADERS, RawProperties
from persistence.stream.format import StoredEntry, bloom_bits

log = logging.getLogger(__name__)

OFFSET_HEADER: Final = "x-stream-offset"
_OFFSET_ENTRY: Final = b"\x0fx-stream-offsetl"
_ENTRY_SIZE: Final = len(_OFFSET_ENTRY) + 8
_FLAGS: Final = struct.Struct(">H")
_TABLE_SIZE: Final = struct.Struct(">I")
_OFFSET_VALUE: Final = struct.Struct(">q")
_NEW_TABLE: Final = _TABLE_SIZE.pack(_ENTRY_SIZE) + _OFFSET_ENTRY
_NAMES_MAX: Final = 4096  # decoded exchange and routing key names kept


class LogReaderPort(Protocol):
    """A position in a stream's log."""

    offset: int

    def next_chunk(
        self, masks: list[int] | None = None, match_unfiltered: bool = False
    ) -> list[StoredEntry]:
        """Entries from ``offset`` to the end of its chunk (see persistence/stream/log.py)."""
        ...


class StreamLogPort(Protocol):
    """One stream's storage (persistence.stream.log.StreamLog)."""

    next_offset: int
    synced_next: int
    written_next: int

    @property
    def first_offset(self) -> int: ...
    @property
    def segment_count(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    def append(
        self,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        header: bytes,
        body: bytes,
        filter_value: bytes | None,
        now_ms: int,
    ) -> int: ...
    def flush(self) -> None: ...
    def sync_targets(self) -> tuple[list[int], int]: ...
    def synced(self, upto: int) -> None: ...
    def reader(self, offset: int) -> LogReaderPort: ...
    def last_chunk_offset(self) -> int: ...
    def offset_for_timestamp(self, timestamp_ms: int) -> int: ...
    def apply_retention(
        self, max_bytes: int | None, max_age_ms: int | None, now_ms: int
    ) -> int: ...
    def store_offset(self, name: str, offset: int) -> None: ...
    def tracked_offset(self, name: str) -> int | None: ...
    def close(self) -> None: ...
    def delete(self) -> None: ...


class StreamLogs(Protocol):
    """Opens stream logs (the shell's persistence.stream.log.StreamStorage)."""

    def open(self, vhost: str, name: str, max_segment_bytes: int | None) -> StreamLogPort:
        """Open (recovering) or create the log of a stream."""
        ...


class _Reader:
    """A consumer's place in the stream: the log reader and the rest of its last chunk."""

    __slots__ = ("chunk", "filters", "index", "masks", "match_unfiltered", "position", "tracking")

    def __init__(
        self,
        position: LogReaderPort,
        filters: tuple[bytes, ...] | None,
        match_unfiltered: bool,
        tracking: str | None,
    ) -> None:
        self.position = position
        self.chunk: list[StoredEntry] = []
        self.index = 0
        self.filters = filters
        self.masks = None if filters is None else [bloom_bits(value) for value in filters]
        self.match_unfiltered = match_unfiltered
        self.tracking = tracking  # the consumer tag under which acked offsets are stored

    def next(self, end: int) -> StoredEntry | None:
        """The next entry below offset ``end`` that the consumer's filter takes."""
        while True:
            chunk = self.chunk
            if self.index < len(chunk):
                entry = chunk[self.index]
                if entry.offset >= end:
                    return None
                self.index += 1
                filters = self.filters
                if filters is None:
                    return entry
                value = entry.filter_value
                if (value is None and self.match_unfiltered) or value in filters:
                    return entry
                continue
            position = self.position
            before = position.offset
            if before >= end:
                return None
            self.chunk = position.next_chunk(self.masks, self.match_unfiltered)
            self.index = 0
            if not self.chunk and position.offset == before:
                return None  # nothing readable there yet

    @property
    def offset(self) -> int:
        """The next offset this reader looks at."""
        if self.index < len(self.chunk):
            return self.chunk[self.index].offset
        return self.position.offset


class StreamDelivery(QueueEntry):
    """A delivered stream message (``seq`` is its offset)."""

    __slots__ = ("reader",)

    def __init__(self, message: Message, offset: int, reader: _Reader) -> None:
        super().__init__(message, offset)
        self.reader = reader


class StreamQueue(Queue):
    """An append-only log queue (see the module's theory of operation)."""

    __slots__ = ("_names", "_readers", "dirty", "log", "stream_settings")

    def __init__(
        self,
        name: str,
        vhost_name: str,
        arguments: dict[str, Any],
        logs: StreamLogs,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name, vhost_name, True, None, False, arguments, clock)
        self.stream_settings: StreamSettings = stream_settings(arguments)
        self.log: StreamLogPort = logs.open(
            vhost_name, name, self.stream_settings.max_segment_bytes
        )
        self.dirty: set[StreamQueue] | None = None  # the broker's, once a store is attached
        self._readers: dict[Consumer, _Reader] = {}
        self._names: dict[bytes, str] = {}

    def __repr__(self) -> str:
        return f"<StreamQueue {self.name!r} in vhost {self.vhost_name!r}>"

    # -- counts --------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Messages in the stream (exact, unlike RabbitMQ's, which lags a few seconds)."""
        return self.log.next_offset - self.log.first_offset

    @property
    def committed_next(self) -> int:
        """The offset below which messages are durable, hence visible to consumers."""
        return self.log.synced_next if self.dirty is not None else self.log.next_offset

    def consumer_offset(self, consumer: Consumer) -> int | None:
        """The next offset ``consumer`` will look at (management API)."""
        reader = self._readers.get(consumer)
        return None if reader is None else reader.offset

    # -- in ------------------------------------------------------------------------------
    def enqueue(
        self, message: Message, expiration_ms: int | None = None, promised: bool = False
    ) -> QueueEntry:
        """Append a message to the log (the confirm waits for its fsync with a store).

        ``promised`` needs nothing more here: a stream delivers nothing before its fsync.
        """
        filter_value = None
        headers_raw = message.headers_raw
        if headers_raw is not None and b"x-stream-filter-value" in headers_raw:
            headers = message.headers or {}
            value = headers.get("x-stream-filter-value")
            if isinstance(value, str):
                filter_value = value.encode()
            elif isinstance(value, bytes | bytearray):
                filter_value = bytes(value)
        offset = self.log.append(
            message.exchange_raw,
            message.routing_key_raw,
            message.header,
            message.payload,
            filter_value,
            int(self.clock.now * 1000),
        )
        self.stats.publish += 1
        dirty = self.dirty
        if dirty is not None and self.journal is not None:
            self.journal.barrier()
            dirty.add(self)
        elif self.consumers:
            self.dispatch()
        return QueueEntry(message, offset)

    def log_synced(self, upto: int) -> None:
        """The group committer fsynced the log below ``upto``: deliver, apply retention."""
        if self.deleted:
            return
        self.log.synced(upto)
        self._retain()
        if self.consumers:
            self.dispatch()

    def _retain(self) -> None:
        settings = self.stream_settings
        if settings.max_bytes is None and settings.max_age is None:
            return
        max_age_ms = None if settings.max_age is None else settings.max_age * 1000
        self.log.apply_retention(settings.max_bytes, max_age_ms, int(self.clock.now * 1000))

    # -- out -----------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        """Start a consumer where its ``x-stream-offset`` (or tracked offset) says."""
        where = f"for queue '{self.name}' in vhost '{self.vhost_name}'"
        args = parse_consumer_args(consumer.arguments, self.clock.now, where)
        tracking = consumer.tag if args.tracking else None
        start = self._start_offset(args.offset, tracking)
        reader = _Reader(self.log.reader(start), args.filters, args.match_unfiltered, tracking)
        self._readers[consumer] = reader
        super().add_consumer(consumer)

    def _start_offset(self, spec: OffsetSpec | None, tracking: str | None) -> int:
        stream_log = self.log
        if spec is None and tracking is not None:
            tracked = stream_log.tracked_offset(tracking)
            if tracked is not None:
                return tracked + 1
        if spec is None or spec.kind == "next":
            return stream_log.next_offset
        if spec.kind == "first":
            return stream_log.first_offset
        if spec.kind == "last":
            return stream_log.last_chunk_offset()
        if spec.kind == "timestamp":
            return stream_log.offset_for_timestamp(spec.value)
        return min(spec.value, stream_log.next_offset)  # one past the end: like next

    def remove_consumer(self, consumer: Consumer) -> None:
        """Unregister a consumer (its position is forgotten; a tracked offset stays)."""
        super().remove_consumer(consumer)
        self._readers.pop(consumer, None)

    def dispatch(self, arriving: QueueEntry | None = None) -> None:
        """Deliver durable messages to each consumer while its channel gives credit."""
        end = self.committed_next
        for consumer in list(self.consumers):
            reader = self._readers.get(consumer)
            if reader is None:
                continue
            channel = consumer.channel
            while channel.has_credit(consumer):
                entry = reader.next(end)
                if entry is None:
                    break
                delivery = StreamDelivery(self._message(entry), entry.offset, reader)
                channel.deliver(consumer, self, delivery)

    def _message(self, entry: StoredEntry) -> Message:
        names = self._names
        exchange = names.get(entry.exchange_raw)
        if exchange is None:
            exchange = names[entry.exchange_raw] = entry.exchange_raw[1:].decode()
        routing_key = names.get(entry.routing_key_raw)
        if routing_key is None:
            if len(names) > _NAMES_MAX:
                names.clear()
            routing_key = names[entry.routing_key_raw] = entry.routing_key_raw[1:].decode()
        header = self._with_offset(entry.header, entry.offset)
        return Message(
            exchange,
            routing_key,
            entry.exchange_raw,
            entry.routing_key_raw,
            header,
            entry.body,
            True,
        )

    @staticmethod
    def _with_offset(header: bytes, offset: int) -> bytes:
        """``header`` with ``x-stream-offset`` (a long) last in its headers table, as
        RabbitMQ puts it: spliced in after the two shortstrs that may precede the table
        (the publisher's bytes stay as they are)."""
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

    def settled(self, entry: QueueEntry) -> None:
        """An ack: nothing leaves the log; a tracking consumer's offset is stored."""
        if isinstance(entry, StreamDelivery):
            name = entry.reader.tracking
            if name is not None and not self.deleted:
                current = self.log.tracked_offset(name)
                if current is None or entry.seq > current:
                    self.log.store_offset(name, entry.seq)
                    if self.dirty is not None and self.journal is not None:
                        self.journal.barrier()  # the committer writes it with the next batch
                        self.dirty.add(self)

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """A closed channel's unacked deliveries: nothing to put back in a log."""

    def discard(self, entry: QueueEntry, reason: str) -> None:
        """Nothing leaves a log but by retention (nack/reject are refused earlier)."""

    def take(self) -> QueueEntry | None:
        """basic.get: refused as RabbitMQ refuses it (540)."""
        raise not_supported("basic.get", self.name, self.vhost_name)

    def purge(self) -> int:
        """queue.purge: refused (540); when the queue is deleted, its log goes."""
        if not self.deleted:
            raise not_supported("queue.purge", self.name, self.vhost_name)
        self._readers.clear()
        self.log.delete()
        return 0

    def tick(self) -> bool:
        """Retention by age (and size, for logs that are not synced by a committer)."""
        self._retain()
        return False

    @property
    def needs_ticks(self) -> bool:
        """Streams with a retention limit are ticked."""
        settings = self.stream_settings
        return settings.max_age is not None or settings.max_bytes is not None

    def next_deadline(self) -> float | None:
        """Retention is checked on the periodic tick."""
        return None

    def reconfigure(self, settings: Any) -> None:
        """Policies do not change a stream's arguments (RabbitMQ's stream policies
        are not supported yet)."""
        self.settings = settings


def new_stream_queue(
    name: str,
    vhost_name: str,
    arguments: dict[str, Any],
    logs: StreamLogs | None,
    clock: Clock,
    watch_set: set[Queue],
    dirty: set[StreamQueue] | None,
) -> StreamQueue:
    """A stream wired to its vhost's logs, clock and timers (``dirty``: the broker's set of
    streams to fsync before the next batch; None for a memory-only broker)."""
    if logs is None:
        raise InvalidQueueArgument("x-queue-type", "this broker has no stream storage")
    queue = StreamQueue(name, vhost_name, arguments, logs, clock)
    queue.watch_set = watch_set
    if queue.needs_ticks:
        queue.watch()
    queue.dirty = dirty
    return queue
