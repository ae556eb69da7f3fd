"""``AmqpStreamDataSource``: the ``amqp-stream`` format, streams read into Spark.

For ``spark.readStream`` (``DataSourceStreamReader``) and ``spark.read``
(``DataSourceReader``). Modelled on Spark's Kafka source: the query, not the broker, owns the
progress. A source offset is ``{stream: next offset}`` and lives in the query's checkpoint; a
restarted query replays from the end of its last committed batch, and a partition reads exactly
the offsets ``[start, end)`` of one stream, so a replayed batch returns the same rows.

The driver finds where a stream ends by consuming from ``last`` (the highest offset seen, plus
one) and where it starts by consuming from ``first``, on one connection it keeps between
triggers; it never acknowledges anything for the query's sake and stores nothing in the
broker. ``queue.declare(passive)`` checks that each stream exists, and its message count
(exact on amqpd, lagging a few seconds on RabbitMQ) decides how long an apparently empty
stream is waited for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from interop.spark.errors import ConfigError
from interop.spark.source_options import (
    EARLIEST,
    LATEST,
    PREFIX,
    SourceOptions,
    parse_source_options,
)
from interop.spark.stream_client import StreamClient, StreamError
from interop.spark.stream_ranges import OffsetRange, cap_ends, split_ranges
from interop.spark.stream_read import DDL_SCHEMA, read_range

__all__ = ["AmqpStreamDataSource"]

log = logging.getLogger("interop.spark")


class AmqpStreamDataSource(DataSource):
    """Read AMQP 0-9-1 streams (``x-queue-type: stream``) into Spark.

    Register it once per session::

        spark.dataSource.register(AmqpStreamDataSource)
        df = (spark.readStream.format("amqp-stream")
              .option("url", "amqp://guest:guest@127.0.0.1:5672/%2F")
              .option("streams", "s1,s2")
              .option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", "5000")
              .load())

    Columns: ``stream``, ``offset``, ``timestamp`` (the AMQP timestamp property),
    ``routing_key``, ``message_id``, ``headers`` (map<string,string>), ``value`` (binary).
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``amqp-stream``."""
        return "amqp-stream"

    def schema(self) -> str:
        """The fixed schema (see the class docstring)."""
        return DDL_SCHEMA

    def streamReader(self, schema: StructType) -> AmqpStreamReader:
        """Validate the options and that every stream exists (one connection)."""
        return AmqpStreamReader(parse_source_options(self.options, batch=False))

    def reader(self, schema: StructType) -> AmqpStreamBatchReader:
        """``spark.read``: offsets ``startingOffsets`` (default earliest) up to
        ``endingOffsets`` (default latest: the end when the read is planned; a given end
        past it is cut there)."""
        return AmqpStreamBatchReader(parse_source_options(self.options, batch=True))


class _Positions:
    """Where streams start and end, asked over one driver connection (reopened when lost)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: StreamClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._client = None

    def _ask(self, question: Any) -> Any:
        for attempt in (0, 1):
            client = self._client
            if client is None or client.error is not None:
                if client is not None:
                    client.abort()
                name = f"spark-amqp-stream:driver-{os.getpid()}"
                try:
                    client = StreamClient(
                        self.options.url, self.options.connect_timeout_ms / 1000, name
                    ).open()
                except StreamError as exc:
                    raise _config(exc) from None
                self._client = client
            try:
                return question(client)
            except StreamError as exc:
                if exc.refused or attempt == 1:
                    raise _config(exc) from None
        raise AssertionError("unreachable")

    def check(self) -> None:
        """Every stream exists (passive declare); else ConfigError naming it."""
        for stream in self.options.streams:
            self._ask(lambda client, s=stream: client.message_count(s))

    def earliest(self, stream: str) -> int:
        """The first offset kept (0 for an empty stream)."""
        first = self._ask(
            lambda client: client.probe(
                stream, "first", 1, self._wait(client, stream, self.options)
            )
        )
        return 0 if first is None else int(first)

    def end(self, stream: str) -> int | None:
        """One past the last offset, or None for an empty stream."""
        last = self._ask(
            lambda client: client.probe(
                stream, "last", self.options.prefetch, self._wait(client, stream, self.options)
            )
        )
        return None if last is None else int(last) + 1

    def resolve(self, spec: Mapping[str, int]) -> dict[str, int]:
        """Turn ``EARLIEST`` / ``LATEST`` / offsets into offsets."""
        result: dict[str, int] = {}
        for stream in self.options.streams:
            wanted = spec.get(stream, EARLIEST)
            if wanted == EARLIEST:
                result[stream] = self.earliest(stream)
            elif wanted == LATEST:
                end = self.end(stream)
                result[stream] = self.earliest(stream) if end is None else end
            else:
                result[stream] = wanted
        return result

    @staticmethod
    def _wait(client: StreamClient, stream: str, options: SourceOptions) -> float:
        """How long to wait for a first delivery: a stream with messages answers soon; one
        that declares 0 may lag (RabbitMQ counts every ~5 s: wait ``emptyProbeMs``) or is
        empty (amqpd's count is exact: no wait)."""
        if client.message_count(stream) > 0:
            return options.read_timeout_ms / 1000
        return 0.0 if client.exact_counts else options.empty_probe_ms / 1000

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _config(exc: StreamError) -> Exception:
    """A driver-side failure, in one line: ``ConfigError`` when the broker refused (retrying
    cannot help), ``StreamError`` otherwise (unreachable, lost)."""
    if exc.refused:
        return ConfigError(PREFIX + str(exc))
    return StreamError(PREFIX + str(exc), exc.reply_code)


class AmqpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The micro-batch reader (driver side; ``read`` runs in the tasks)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.positions = _Positions(options)
        self.target: dict[str, int] | None = None
        try:
            self.positions.check()
        finally:
            self.positions.close()

    def initialOffset(self) -> dict[str, int]:
        """``startingOffsets`` resolved (used only when the checkpoint has no offsets)."""
        return self.positions.resolve(self.options.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxMessagesPerTrigger`` as ``ReadMaxRows``, else everything available."""
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of the query at the streams' ends now (``Trigger.AvailableNow``)."""
        self.target = {
            stream: end
            for stream in self.options.streams
            if (end := self.positions.end(stream)) is not None
        }

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """The end of the next batch: each stream's end, at most the ``AvailableNow``
        target, capped by the read limit."""
        begin = self._complete(start)
        ends: dict[str, int] = {}
        for stream in self.options.streams:
            if self.target is not None:
                end: int | None = self.target.get(stream, begin[stream])
            else:
                end = self.positions.end(stream)
            ends[stream] = begin[stream] if end is None else max(end, begin[stream])
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return cap_ends(begin, ends, max_rows)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """One partition per stream with new offsets (more with ``minPartitions``)."""
        return split_ranges(self._complete(start), end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (in a task)."""
        return _read_partition(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: progress lives in the checkpoint, not in the broker."""

    def stop(self) -> None:
        """Close the driver connection."""
        self.positions.close()

    def _complete(self, start: Mapping[str, int]) -> dict[str, int]:
        """``start`` plus streams added to the ``streams`` option since the checkpoint was
        written (they start at their earliest offset, as new Kafka partitions do)."""
        return {
            stream: int(start[stream]) if stream in start else self.positions.earliest(stream)
            for stream in self.options.streams
        }


class AmqpStreamBatchReader(DataSourceReader):
    """``spark.read.format("amqp-stream")``: a fixed range per stream."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve ``startingOffsets`` / ``endingOffsets`` now and split into ranges."""
        positions = _Positions(self.options)
        try:
            positions.check()
            start = positions.resolve(self.options.starting)
            ending = dict(self.options.ending)
            end: dict[str, int] = {}
            for stream in self.options.streams:
                last = positions.end(stream)
                available = start[stream] if last is None else last
                wanted = ending.get(stream, LATEST)
                # an end past the stream's end would wait for messages that may never come
                end[stream] = available if wanted == LATEST else min(wanted, available)
        finally:
            positions.close()
        return split_ranges(start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (in a task)."""
        return _read_partition(self.options, partition)


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Read one ``OffsetRange``. PySpark turns an empty list of partitions (nothing new in any
    stream) into one ``InputPartition(None)``: that reads nothing."""
    if not isinstance(partition, OffsetRange):
        return iter(())
    return read_range(options, partition, _task_name())


def _task_name() -> str:
    return f"spark-amqp-stream:worker-{os.getpid()}"
