"""Batch and streaming writers: options and schema only; the connection opens in ``write()``.

The writer objects are pickled on the driver and sent to every task, so they hold the parsed
options and the schema, never a connection.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from interop.spark.columns import plan_columns
from interop.spark.mapping import MessageBuilder
from interop.spark.options import SinkOptions
from interop.spark.pool import shared_pool
from interop.spark.publisher import PublisherSettings, publish
from interop.spark.report import TaskReport, emit, summarize_abort, summarize_commit
from interop.spark.task import TaskInfo

__all__ = ["AmqpBatchWriter", "AmqpStreamWriter", "write_partition"]


def write_partition(options: SinkOptions, schema: StructType, rows: Iterator[Any]) -> TaskReport:
    """Publish the rows of one partition and wait for every confirm.

    An empty partition opens no connection.

    Args:
        options: The sink options.
        schema: The DataFrame schema (already validated on the driver).
        rows: The partition's rows.

    Returns:
        The task's commit message.

    Raises:
        PublishError: The broker did not confirm every message, even after reconnecting for
            ``deliveryTimeoutMs`` (the task fails; Spark retries it and republishes the whole
            partition).
        RowError: A row cannot be sent.
    """
    task = TaskInfo.current()
    if task.speculation:
        emit(
            "amqp sink: spark.speculation=true can publish a partition twice at once; "
            "consumers must deduplicate by message_id",
            level=logging.WARNING,
        )
    builder = MessageBuilder(plan_columns(schema, options), options, task.id_prefix())
    report = TaskReport(
        partition=task.partition,
        attempt=task.attempt,
        stage=task.stage,
        batch_id=task.batch_id,
        query_id=task.query_id,
    )
    first = next(rows, None)
    if first is None:
        return report
    started = time.monotonic()
    messages = (builder.build(row, i) for i, row in enumerate(itertools.chain([first], rows)))
    settings = PublisherSettings(
        url=options.url,
        max_in_flight=options.max_in_flight,
        confirm_timeout=options.confirm_timeout_ms / 1000,
        connect_timeout=options.connect_timeout_ms / 1000,
        delivery_timeout=options.delivery_timeout_ms / 1000,
        idle_timeout=options.connection_idle_timeout_ms / 1000,
        mandatory=options.mandatory,
        connection_name=task.connection_name(options.connection_name),
    )
    result = publish(settings, messages, pool=shared_pool())
    stats = result.window
    report.published = stats.published
    report.acked = stats.acked
    report.nacked = stats.nacked
    report.returned = stats.returned
    report.republished = stats.republished
    report.reconnects = result.reconnects
    report.reused_connection = result.reused
    report.bytes = stats.bytes
    report.max_outstanding = stats.max_outstanding
    report.first_message_id = stats.first_message_id
    report.last_message_id = stats.last_message_id
    report.seconds = time.monotonic() - started
    return report


class AmqpBatchWriter(DataSourceWriter):
    """Writer of ``df.write.format("amqp")``.

    Args:
        options: The parsed sink options.
        schema: The DataFrame schema.
    """

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Publish one partition (runs in a task)."""
        return write_partition(self.options, self.schema, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log the job's summary line (runs in a driver-side worker)."""
        emit(summarize_commit(messages, self.options.redacted_url))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what stays in the broker after a failed job."""
        emit(summarize_abort(messages, self.options.redacted_url), level=logging.WARNING)


class AmqpStreamWriter(DataSourceStreamWriter):
    """Writer of ``df.writeStream.format("amqp")``: one ``write()`` per partition and batch.

    Args:
        options: The parsed sink options.
        schema: The DataFrame schema.
    """

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Publish one partition of a micro-batch (runs in a task)."""
        return write_partition(self.options, self.schema, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the micro-batch's summary line."""
        emit(summarize_commit(messages, self.options.redacted_url, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what stays in the broker after a failed micro-batch (it will be replayed)."""
        emit(summarize_abort(messages, self.options.redacted_url, batchId), level=logging.WARNING)
