"""Reading one ``OffsetRange`` of a stream in a Spark task, as Arrow record batches.

Theory of operation. The task consumes the stream from ``x-stream-offset = start`` (manual
acks, per-consumer prefetch) and walks the deliveries in offset order:

- an offset below ``start`` is skipped (RabbitMQ starts at the chunk that holds ``start``);
- an offset in ``[start, end)`` becomes a row;
- the task is done at the first offset ``>= end - 1`` (offsets need not be contiguous, so
  ``end - 1`` itself may not exist; a later offset then ends the range).

Deliveries are acknowledged (``multiple``) every half prefetch, which is what gives the
consumer credit. At the end the connection is closed, never ``basic.reject``-ed.

Data loss: if the first delivery is past ``start``, either ``start`` fell into a gap of the
offsets (RabbitMQ skips one per segment) or retention removed it. The task then asks for the
stream's first offset (``x-stream-offset = first``): past ``start`` means offsets
``[start, first)`` are gone, which fails the task when ``failOnDataLoss`` (the default) and is
logged otherwise. The rows are a function of the range alone, so a retried task returns the
same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from interop.spark.source_options import SourceOptions
from interop.spark.stream_client import OFFSET_HEADER, Delivery, StreamClient, StreamError
from interop.spark.stream_ranges import OffsetRange

__all__ = ["ARROW_SCHEMA", "DDL_SCHEMA", "DataLossError", "read_range"]

log = logging.getLogger("interop.spark")

DDL_SCHEMA = (
    "stream string, offset long, timestamp timestamp, routing_key string, "
    "message_id string, headers map<string,string>, value binary"
)
ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("routing_key", pa.string()),
        ("message_id", pa.string()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("value", pa.binary()),
    ]
)
BATCH_ROWS = 10_000


class DataLossError(StreamError):
    """Retention removed offsets a query still needed (``failOnDataLoss=true``)."""


def read_range(options: SourceOptions, part: OffsetRange, name: str) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``part`` as record batches of up to ``BATCH_ROWS`` rows.

    Raises:
        StreamError: The connection failed or was lost, the stream is gone, or nothing
            arrived for ``readTimeoutMs`` while offsets of the range were still missing.
        DataLossError: Offsets of the range were removed and ``failOnDataLoss`` is true.
    """
    client = StreamClient(options.url, options.connect_timeout_ms / 1000, name).open()
    try:
        yield from _Walk(client, options, part).batches()
    finally:
        client.close()


class _Walk:
    def __init__(self, client: StreamClient, options: SourceOptions, part: OffsetRange) -> None:
        self.client = client
        self.options = options
        self.part = part
        self.columns = _Columns(part.stream)
        self.first = True
        self.done = False
        self.unacked = 0

    def batches(self) -> Iterator[pa.RecordBatch]:
        part, options = self.part, self.options
        cursor = self.client.consume(part.stream, part.start, options.prefetch)
        ack_every = max(1, options.prefetch // 2)
        timeout = options.read_timeout_ms / 1000
        last = part.start - 1
        while not self.done:
            if not self.client.run_until(lambda: bool(cursor.buffer), timeout):
                raise StreamError(
                    f"no message from stream {part.stream!r} for {timeout * 1000:.0f} ms "
                    f"(readTimeoutMs) while reading offsets {part.start}..{part.end - 1} "
                    f"(last offset read {last}): was the stream deleted or truncated?"
                )
            buffer = cursor.buffer
            while buffer and not self.done:
                delivery = buffer.popleft()
                if self.first:
                    self.first = False
                    self._check_start(delivery.offset)
                if delivery.offset >= part.start and delivery.offset < part.end:
                    self.columns.add(delivery)
                    last = delivery.offset
                if delivery.offset >= part.end - 1:
                    self.done = True
                self.unacked += 1
                if self.unacked >= ack_every:
                    cursor.ack(delivery.tag)
                    self.unacked = 0
                if len(self.columns) >= BATCH_ROWS:
                    yield self.columns.flush()
        if len(self.columns):
            yield self.columns.flush()

    def _check_start(self, offset: int) -> None:
        part = self.part
        if offset <= part.start:
            return
        first = self.client.probe(part.stream, "first", 1, self.options.read_timeout_ms / 1000)
        if first is None or first <= part.start:
            return  # a gap in the offsets, nothing removed
        lost = f"{part.start}..{min(first, part.end) - 1}"
        text = (
            f"stream {part.stream!r}: offsets {lost} were removed (retention: the stream now "
            f"starts at {first}) before this query read them"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                text + "; set failOnDataLoss=false to skip them and go on", refused=True
            )
        log.warning("amqp-stream source: %s; skipped (failOnDataLoss=false)", text)


class _Columns:
    """Column lists of the rows read so far."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._clear()

    def _clear(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[datetime | None] = []
        self.keys: list[str] = []
        self.ids: list[str | None] = []
        self.headers: list[list[tuple[str, str | None]]] = []
        self.values: list[bytes] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, delivery: Delivery) -> None:
        props = delivery.properties
        self.offsets.append(delivery.offset)
        stamp = props.timestamp
        self.timestamps.append(None if stamp is None else datetime.fromtimestamp(stamp, UTC))
        self.keys.append(delivery.routing_key)
        message_id = props.message_id
        self.ids.append(None if message_id is None else str(message_id))
        self.headers.append(
            [(k, _text(v)) for k, v in (props.headers or {}).items() if k != OFFSET_HEADER]
        )
        self.values.append(delivery.body)

    def flush(self) -> pa.RecordBatch:
        size = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.stream] * size, pa.string()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.keys, pa.string()),
                pa.array(self.ids, pa.string()),
                pa.array(self.headers, pa.map_(pa.string(), pa.string())),
                pa.array(self.values, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        self._clear()
        return batch


def _text(value: Any) -> str | None:
    """A header value as a string: text as is, bytes decoded as UTF-8 (replacing what is
    not), anything else with ``str`` (numbers, booleans, timestamps, decimals)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return str(value)
