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

Consumers: each consumer has a `StreamReader`: a position in the log (the log's reader)
and the undecoded rest of the chunk it read last (at most one chunk). `dispatch` serves
every consumer independently while its channel gives credit (manual acks and a
per-consumer prefetch are required, so the prefetch is a hard cap; acks give credit
back), handing it a run of up to its credit of one chunk's entries at once; the channel
builds the frames straight from the chunk's bytes (amqpd/model/stream_delivery.py): the
header carries ``x-stream-offset`` (long), the original exchange and routing key,
redelivered false. A consumer's filter
(``x-stream-filter``) skips whole chunks by their bloom filter, then checks each message's
``x-stream-filter-value`` exactly (RabbitMQ leaves that second step to the client).
A consumer with ``x-stream-automatic-offset-tracking`` stores its last acked offset
under its consumer tag; it resumes after it when it comes back without ``x-stream-offset``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol, cast

from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.policies import merge
from amqpd.model.queue import Consumer, Queue
from amqpd.model.queue_args import InvalidQueueArgument
from amqpd.model.stream_args import (
    OffsetSpec,
    StreamSettings,
    not_supported,
    parse_consumer_args,
    stream_policy_settings,
    stream_settings,
)
from amqpd.model.stream_delivery import LogReaderPort, StreamDelivery, StreamReader, StreamRun

log = logging.getLogger(__name__)


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
    def resize_segments(self, max_segment_bytes: int | None) -> None: ...
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


class StreamSink(Protocol):
    """What a stream needs of its consumers' channel (engine/channel.py) beyond the
    `ConsumerSink`: credit as a count, and runs of deliveries."""

    def credit(self, consumer: Consumer) -> int:
        """How many more messages ``consumer`` may be handed now."""
        ...

    def deliver_run(self, consumer: Consumer, queue: Queue, run: StreamRun) -> None:
        """Hand ``run`` to ``consumer`` (delivery tags, unacked records, frames)."""
        ...


class StreamLogs(Protocol):
    """Opens stream logs (the shell's persistence.stream.log.StreamStorage)."""

    def open(self, vhost: str, name: str, max_segment_bytes: int | None) -> StreamLogPort:
        """Open (recovering) or create the log of a stream."""
        ...


class StreamQueue(Queue):
    """An append-only log queue (see the module's theory of operation)."""

    __slots__ = ("_readers", "argument_settings", "dirty", "log", "stream_settings")

    def __init__(
        self,
        name: str,
        vhost_name: str,
        arguments: dict[str, Any],
        logs: StreamLogs,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name, vhost_name, True, None, False, arguments, clock)
        self.argument_settings = stream_settings(arguments)  # policies apply on top
        self.stream_settings: StreamSettings = self.argument_settings
        self.log: StreamLogPort = logs.open(
            vhost_name, name, self.stream_settings.max_segment_bytes
        )
        self.dirty: set[StreamQueue] | None = None  # the broker's, once a store is attached
        self._readers: dict[Consumer, StreamReader] = {}

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
    ) -> None:
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
        self.log.append(
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
        reader = StreamReader(self.log.reader(start), args.filters, args.match_unfiltered, tracking)
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
        """Deliver durable messages to each consumer while its channel gives credit, a run
        of one chunk's entries at a time (amqpd/model/stream_delivery.py)."""
        end = self.committed_next
        for consumer in list(self.consumers):
            reader = self._readers.get(consumer)
            if reader is None:
                continue
            # A stream's consumers are always a channel's (engine/channel.py), which
            # takes whole runs.
            channel = cast(StreamSink, consumer.channel)
            while True:
                credit = channel.credit(consumer)
                if credit <= 0:
                    break
                run = reader.take(end, credit)
                if run is None:
                    break
                channel.deliver_run(consumer, self, run)

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

    def requeue(self, entries: Iterable[QueueEntry], unsent: bool = False) -> None:
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
        """The policies changed (the vhost sets ``policy`` / ``operator_policy`` first):
        retention and the segment size follow at once (model/stream_args.py
        ``stream_policy_settings``). RabbitMQ 3.10 updates retention live too (the
        coordinator's ``policy_changed``) but a new segment size only when the stream's
        member restarts; a single node has no reason to wait."""
        self.settings = settings
        definition = merge(self.policy, self.operator_policy)
        wanted = stream_policy_settings(self.argument_settings, self.arguments, definition)
        if wanted == self.stream_settings:
            return
        self.stream_settings = wanted
        self.log.resize_segments(wanted.max_segment_bytes)
        if self.needs_ticks:
            self.watch()
        self._retain()


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
