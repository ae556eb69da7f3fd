"""Prometheus' ``rabbitmq_io_*`` and ``rabbitmq_msg_store_*`` families with amqpd's meaning
(RabbitMQ's names, so Grafana's "RabbitMQ-Overview" dashboard draws them), from the store
counters (`StoreIO`, counted by amqpd/shell/store_io.py). docs/operations.md lists them:

- ``rabbitmq_io_write_ops_total`` / ``rabbitmq_io_sync_ops_total``: store transactions
  (one per group commit; each is made durable as ``--sync`` says);
- ``rabbitmq_io_write_bytes_total``: message headers and bodies written;
- ``rabbitmq_io_sync_time_seconds_total`` / ``rabbitmq_io_write_time_seconds_total``: time in
  those transactions (writing and committing are one call, so both show the same time);
- ``rabbitmq_io_read_ops_total`` / ``_read_bytes_total`` / ``_read_time_seconds_total``:
  pages of paged-out bodies read back, their bytes, the time;
- ``rabbitmq_msg_store_write_total`` / ``_read_total``: messages written / read back;
- ``rabbitmq_io_seek_ops_total``, ``rabbitmq_io_reopen_ops_total``,
  ``rabbitmq_io_seek_time_seconds_total``: 0 (SQLite / PostgreSQL do their own file work).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from amqpd.model.statistics import StoreIO

PREFIX = "rabbitmq_"


def store_families(io: StoreIO) -> Iterator[Metric]:
    """The io_* and msg_store_* counter families of one scrape."""
    for name, help_text, value in (
        ("io_read_ops", "Total number of I/O read operations", io.read_ops),
        ("io_read_bytes", "Total number of I/O bytes read", io.read_bytes),
        ("io_write_ops", "Total number of I/O write operations", io.write_ops),
        ("io_write_bytes", "Total number of I/O bytes written", io.write_bytes),
        ("io_sync_ops", "Total number of I/O sync operations", io.sync_ops),
        ("io_seek_ops", "Total number of I/O seek operations", 0),
        ("io_reopen_ops", "Total number of times files have been reopened", 0),
        ("msg_store_read", "Total number of Message Store read operations", io.messages_read),
        ("msg_store_write", "Total number of Message Store write operations", io.messages_written),
        ("io_read_time_seconds", "Total I/O read time", io.read_seconds),
        ("io_write_time_seconds", "Total I/O write time", io.sync_seconds),
        ("io_sync_time_seconds", "Total I/O sync time", io.sync_seconds),
        ("io_seek_time_seconds", "Total I/O seek time", 0.0),
    ):
        family = CounterMetricFamily(PREFIX + name, help_text)
        family.add_metric([], value)
        yield family
