"""What a running task knows about itself, read from Spark's ``TaskContext``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyspark import TaskContext

__all__ = ["TaskInfo"]


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """Identity of the current task attempt.

    Attributes:
        partition: Partition id.
        attempt: Attempt number (0 = first try).
        stage: Stage id.
        app_id: ``spark.app.id``.
        app_name: ``spark.app.name``.
        execution_id: ``spark.sql.execution.id`` (same for all attempts of one write).
        batch_id: Streaming micro-batch id (``streaming.sql.batchId``), None in batch.
        query_id: Streaming query id (``sql.streaming.queryId``), None in batch.
        speculation: True when ``spark.speculation`` is on.
    """

    partition: int = 0
    attempt: int = 0
    stage: int = 0
    app_id: str = "app"
    app_name: str = "app"
    execution_id: str = "0"
    batch_id: int | None = None
    query_id: str | None = None
    speculation: bool = False

    @classmethod
    def current(cls) -> TaskInfo:
        """The running task's identity (defaults outside a Spark task)."""
        context = TaskContext.get()
        if context is None:
            return cls()

        def prop(key: str) -> str | None:
            value = context.getLocalProperty(key)
            return None if value is None else str(value)

        batch = prop("streaming.sql.batchId")
        return cls(
            partition=context.partitionId(),
            attempt=context.attemptNumber(),
            stage=context.stageId(),
            app_id=prop("spark.app.id") or "app",
            app_name=prop("spark.app.name") or "app",
            execution_id=prop("spark.sql.execution.id") or "0",
            batch_id=None if batch is None else int(batch),
            query_id=prop("sql.streaming.queryId"),
            speculation=(prop("spark.speculation") or "").lower() == "true",
        )

    def id_prefix(self) -> str:
        """Prefix of ``deterministic`` message ids; stable across attempts of this task.

        Streaming: ``{queryId}-{batchId}-{partition}`` (the query id survives restarts on the
        same checkpoint). Batch: ``{appId}-{executionId}-{partition}``.
        """
        if self.query_id is not None and self.batch_id is not None:
            return f"{self.query_id}-{self.batch_id}-{self.partition}"
        return f"{self.app_id}-{self.execution_id}-{self.partition}"

    def connection_name(self, prefix: str | None) -> str:
        """``{prefix or spark-{app name}}:worker-{pid}``.

        A connection serves every task of one Python worker (see ``pool.py``), so it is named
        after the worker process, not after the task that happened to open it.
        """
        base = prefix or f"spark-{self.app_name}"
        return f"{base}:worker-{os.getpid()}"
