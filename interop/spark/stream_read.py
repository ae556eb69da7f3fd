"""Reading one ``OffsetRange`` of a stream in a Spark task, as Arrow record batches.

Theory of operation. The task consumes the stream from ``x-stream-offset = start`` (manual
acks, per-consumer prefetch) and walks the deliveries in offset order:

- an offset below ``start`` is skipped (RabbitMQ starts at the chunk that holds ``start``);
- an offset in ``[start, end)`` becomes a row;
- the task is done at the first offset ``>= end - 1`` (offsets need not be contiguous, so
  ``end - 1`` itself may not exist; a later offset then ends the range).

A poll hands over deliveries as columns (`Rows`, interop/spark/stream_rows.py); offsets
increase, so the rows a poll adds are one slice of it, found by bisection, and are copied
column by column. Record batches of ``BATCH_ROWS`` or a little more are cut from what was
gathered. Deliveries are acknowledged (``multiple``) every half prefetch, which is what gives
the consumer credit. At the end the connection is closed, never ``basic.reject``-ed.

Data loss: if the first delivery is past ``start``, either ``start`` fell into a gap of the
offsets (RabbitMQ skips one per segment) or retention removed it. The task then asks for the
stream's first offset (``x-stream-offset = first``): past ``start`` means offsets
``[start, first)`` are gone, which fails the task when ``failOnDataLoss`` (the default) and is
logged otherwise. The rows are a function of the range alone, so a retried task returns the
same rows.

Stalls: a consumer can wait for ever on offsets retention removed while it attached (seen
against RabbitMQ: no delivery at all from ``x-stream-offset = 0`` after the first segments
went). So after ``STALL_PROBE_S`` without a delivery the task probes the stream's first
offset; past the next offset it needs, the offsets in between are gone: data loss as above,
and with ``failOnDataLoss=false`` the task resubscribes at the first offset (or ends, if
retention took the rest of the range). Only ``readTimeoutMs`` without a delivery while the
needed offsets still exist fails the task with "no message".
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

import pyarrow as pa  # type: ignore[import-untyped]

from interop.spark.source_options import SourceOptions
from interop.spark.stream_client import PikaConsumer, StreamClient, StreamError
from interop.spark.stream_ranges import OffsetRange
from interop.spark.stream_rows import ARROW_SCHEMA, Rows
from interop.spark.stream_socket import SocketConsumer

__all__ = ["ARROW_SCHEMA", "DDL_SCHEMA", "DataLossError", "read_range"]

log = logging.getLogger("interop.spark")

DDL_SCHEMA = (
    "stream string, offset long, timestamp timestamp, routing_key string, "
    "message_id string, headers map<string,string>, value binary"
)
BATCH_ROWS = 10_000
STALL_PROBE_S = 5.0


class DataLossError(StreamError):
    """Retention removed offsets a query still needed (``failOnDataLoss=true``)."""


def read_range(options: SourceOptions, part: OffsetRange, name: str) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``part`` as record batches of ``BATCH_ROWS`` rows or a few more
    (what one poll added past it).

    Raises:
        StreamError: The connection failed or was lost, the stream is gone, or nothing
            arrived for ``readTimeoutMs`` while offsets of the range were still missing.
        DataLossError: Offsets of the range were removed and ``failOnDataLoss`` is true.
    """
    walk = _Walk(options, part, name)
    position = part.start
    while position < part.end:
        consumer = _consumer(options, name)
        try:
            consumer.open(part.stream, position, options.prefetch)
            yield from walk.run(consumer)
        finally:
            consumer.close()
        if walk.resume_at is None:
            break
        position, walk.resume_at = walk.resume_at, None
    if walk.rows is not None and len(walk.rows):
        yield walk.rows.batch(part.stream)


def _consumer(options: SourceOptions, name: str) -> SocketConsumer | PikaConsumer:
    timeout = options.connect_timeout_ms / 1000
    if options.url.lower().startswith("amqps://"):
        return PikaConsumer(options.url, timeout, name)
    return SocketConsumer(options.url, timeout, name)


class _Walk:
    """The deliveries of one range, in offset order, over one or more subscriptions."""

    def __init__(self, options: SourceOptions, part: OffsetRange, name: str) -> None:
        self.options = options
        self.part = part
        self.name = name
        self.rows: Rows | None = None  # gathered, not yet in a record batch
        self.last = part.start - 1  # the highest offset of the range read so far
        self.resume_at: int | None = None  # resubscribe here after data loss was skipped

    def run(self, consumer: SocketConsumer | PikaConsumer) -> Iterator[pa.RecordBatch]:
        """Walk one subscription until the range is done or it must resubscribe."""
        options, part = self.options, self.part
        ack_every = max(1, options.prefetch // 2)
        timeout = options.read_timeout_ms / 1000
        start, end = part.start, part.end
        first = self.last < start
        unacked = 0
        waited = 0.0
        while True:
            wait = min(STALL_PROBE_S, timeout - waited)
            polled = consumer.poll(wait)
            offsets = polled.offsets
            if not offsets:
                waited += wait
                if self._removed_ahead():
                    return
                if waited >= timeout:
                    raise StreamError(
                        f"no message from stream {part.stream!r} for {timeout * 1000:.0f} ms "
                        f"(readTimeoutMs) while reading offsets {start}..{end - 1} "
                        f"(last offset read {self.last}): was the stream deleted or truncated?"
                    )
                continue
            waited = 0.0
            if first:
                first = False
                _check_start(options, part, offsets[0], self.name)
            # the rows of the range past what was read; the range is done at ``end - 1``
            lo = bisect_right(offsets, max(self.last, start - 1))
            hi = bisect_left(offsets, end)
            done = bisect_left(offsets, end - 1) < len(offsets)
            if lo < hi:
                self._keep(polled, lo, hi)
                self.last = offsets[hi - 1]
            if done:
                return
            unacked += len(offsets)
            if unacked >= ack_every:
                consumer.ack(polled.last_tag)
                unacked = 0
            if self.rows is not None and len(self.rows) >= BATCH_ROWS:
                yield self.rows.batch(part.stream)
                self.rows = None

    def _keep(self, polled: Rows, lo: int, hi: int) -> None:
        rows = self.rows
        if rows is None and lo == 0 and hi == len(polled):
            self.rows = polled  # the whole poll: no copy
            return
        if rows is None:
            rows = self.rows = Rows(polled.headers)
        rows.extend(polled, lo, hi)

    def _removed_ahead(self) -> bool:
        """After a stall: did retention remove the next offsets this range needs? Raises
        ``DataLossError`` (``failOnDataLoss``) or sets ``resume_at`` and answers True."""
        part = self.part
        needed = max(part.start, self.last + 1)
        first = _first_offset(self.options, part.stream, self.name)
        if first is None or first <= needed:
            return False
        _lost(self.options, part, needed, first)
        self.resume_at = first if first < part.end else None
        return True


def _first_offset(options: SourceOptions, stream: str, name: str) -> int | None:
    client = StreamClient(options.url, options.connect_timeout_ms / 1000, name).open()
    try:
        return client.probe(stream, "first", 1, options.read_timeout_ms / 1000)
    finally:
        client.close()


def _check_start(options: SourceOptions, part: OffsetRange, offset: int, name: str) -> None:
    """The first delivery is past ``start``: a gap in the offsets, or data loss?"""
    if offset <= part.start:
        return
    first = _first_offset(options, part.stream, name)
    if first is None or first <= part.start:
        return  # a gap in the offsets, nothing removed
    _lost(options, part, part.start, first)


def _lost(options: SourceOptions, part: OffsetRange, needed: int, first: int) -> None:
    """Offsets ``needed..first-1`` of ``part`` are gone: fail, or log and go on."""
    lost = f"{needed}..{min(first, part.end) - 1}"
    text = (
        f"stream {part.stream!r}: offsets {lost} were removed (retention: the stream now "
        f"starts at {first}) before this query read them"
    )
    if options.fail_on_data_loss:
        raise DataLossError(
            text + "; set failOnDataLoss=false to skip them and go on", refused=True
        )
    log.warning("amqp-stream source: %s; skipped (failOnDataLoss=false)", text)
