"""Per-task commit messages and the one summary line the driver logs per job or batch.

``commit()`` and ``abort()`` run on the driver host in a separate Python worker process, so
nothing can be handed back to the user's process: the log line is the interface. It goes to
the ``interop.spark`` logger at INFO (with Spark >= 4.1 and
``spark.sql.pyspark.worker.logging.enabled=true`` it is also queryable with
``spark.tvf.python_worker_logs()``), or to stderr when logging is not configured.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

__all__ = ["TaskReport", "emit", "summarize_abort", "summarize_commit"]

log = logging.getLogger("interop.spark")


@dataclass(slots=True)
class TaskReport(WriterCommitMessage):
    """What one successful task published (picklable; Spark sends it to ``commit``).

    Attributes:
        partition: Spark partition id.
        attempt: Task attempt number (0 = first try).
        stage: Stage id.
        batch_id: Streaming micro-batch id, None for batch writes.
        query_id: Streaming query id, None for batch writes.
        published: Messages published.
        acked: Messages the broker acked (equals ``published`` in a report).
        nacked: Messages nacked (0 in a report: a nack fails the task).
        returned: Messages returned (0 in a report: a return fails the task).
        republished: Messages published again after a lost connection (possible duplicates).
        reconnects: Connections the task opened after losing one.
        reused_connection: The task published on a connection an earlier task left open.
        bytes: Body bytes published.
        seconds: Wall time of the task's publishing.
        max_outstanding: Most unconfirmed messages at once.
        first_message_id: ``message_id`` of the first message.
        last_message_id: ``message_id`` of the last message.
    """

    partition: int
    attempt: int
    stage: int
    batch_id: int | None = None
    query_id: str | None = None
    published: int = 0
    acked: int = 0
    nacked: int = 0
    returned: int = 0
    republished: int = 0
    reconnects: int = 0
    reused_connection: bool = False
    bytes: int = 0
    seconds: float = 0.0
    max_outstanding: int = 0
    first_message_id: str | None = None
    last_message_id: str | None = None


def summarize_commit(
    messages: Sequence[WriterCommitMessage | None], target: str, batch_id: int | None = None
) -> str:
    """The summary line of a committed job or micro-batch.

    Args:
        messages: The commit messages Spark passes to ``commit()``.
        target: The redacted broker URL.
        batch_id: The micro-batch id for streaming writes.

    Returns:
        One ``key=value`` line: the counters Spark has no place for (published, confirmed,
        returned, nacked, republished, reconnects, task retries), tasks, connections reused,
        bytes, the slowest task, the target.
    """
    reports = [m for m in messages if isinstance(m, TaskReport)]
    what = "job" if batch_id is None else f"batch {batch_id}"
    query = next((r.query_id for r in reports if r.query_id), None)
    parts = [
        f"amqp sink: {what} committed",
        f"published={sum(r.published for r in reports)}",
        f"confirmed={sum(r.acked for r in reports)}",
        f"returned={sum(r.returned for r in reports)}",
        f"nacked={sum(r.nacked for r in reports)}",
        f"republished={sum(r.republished for r in reports)}",
        f"reconnects={sum(r.reconnects for r in reports)}",
        f"retries={sum(1 for r in reports if r.attempt > 0)}",
        f"tasks={len(reports)}",
        f"reused_connections={sum(1 for r in reports if r.reused_connection)}",
        f"bytes={sum(r.bytes for r in reports)}",
    ]
    if reports:
        slowest = max(reports, key=lambda r: r.seconds)
        parts.append(
            f"slowest_task=p{slowest.partition}.a{slowest.attempt}:{slowest.seconds:.2f}s"
            f"/{slowest.published}rows"
        )
        parts.append(f"max_outstanding={max(r.max_outstanding for r in reports)}")
    if query:
        parts.append(f"query={query}")
    parts.append(f"target={target}")
    return " ".join(parts)


def summarize_abort(
    messages: Sequence[WriterCommitMessage | None], target: str, batch_id: int | None = None
) -> str:
    """The summary line of an aborted job or micro-batch (what stays in the broker)."""
    reports = [m for m in messages if isinstance(m, TaskReport)]
    what = "job" if batch_id is None else f"batch {batch_id}"
    return (
        f"amqp sink: {what} aborted: {len(reports)} of {len(messages)} tasks had finished; "
        f"their {sum(r.acked for r in reports)} confirmed messages stay in the broker "
        f"(and failed attempts may have left more); abort cannot take them back "
        f"target={target}"
    )


def emit(line: str, level: int = logging.INFO) -> None:
    """Log ``line`` on ``interop.spark``; print it to stderr if logging is not set up."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if log.hasHandlers():
        log.log(level, line)
    else:
        print(line, file=sys.stderr, flush=True)
