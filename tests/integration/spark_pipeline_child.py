"""One Spark application of the exactly-once pipeline test, run as its own process so that the
test can SIGKILL it (driver JVM, Python workers and all).

    python spark_pipeline_child.py write URL STREAM ROWS
        the ``amqp`` sink writes ROWS rows ``{"n": i}`` (messageIdMode=deterministic) into
        STREAM and exits 0 once the job succeeded.
    python spark_pipeline_child.py read URL STREAM OUT CHECKPOINT MARKER MODE
        the ``amqp-stream`` source reads STREAM into Parquet at OUT. MODE ``hang``: a
        processing-time query whose third micro-batch (batch id 2) creates MARKER in its task
        (a pass-through UDF on ``message_id``), then stalls, waiting to be killed. MODE
        ``finish``: ``Trigger.AvailableNow`` on the same checkpoint, exits 0 when done.

Run as a script: the stalling function then lives in ``__main__`` and reaches the workers by
value.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def _session(name: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2,2]")
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


def write(url: str, stream: str, rows: int) -> None:
    from pyspark.sql import functions as F

    from interop.spark import AmqpDataSource

    spark = _session("pipeline-write")
    spark.dataSource.register(AmqpDataSource)
    (
        spark.range(rows, numPartitions=2)
        .select(F.to_json(F.struct(F.col("id").alias("n"))).alias("value"))
        .write.format("amqp")
        .option("url", url)
        .option("routingKey", stream)
        .option("messageIdMode", "deterministic")
        .mode("append")
        .save()
    )
    spark.stop()


def read(url: str, stream: str, out: str, checkpoint: str, marker: str, mode: str) -> None:
    from interop.spark import AmqpStreamDataSource

    spark = _session("pipeline-read")
    spark.dataSource.register(AmqpStreamDataSource)
    frame = (
        spark.readStream.format("amqp-stream")
        .option("url", url)
        .option("streams", stream)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "2000")
        .load()
    )
    if mode == "hang":
        from pyspark.sql import functions as F

        stall = F.udf(_stall_in_batch_2(marker), "string")
        frame = frame.withColumn("message_id", stall("message_id"))
    writer = (
        frame.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "finish":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    query.awaitTermination()
    spark.stop()


def _stall_in_batch_2(marker: str) -> Any:
    """A pass-through UDF that, in micro-batch 2, creates ``marker`` and then stalls: the
    batch is planned (its offsets are in the checkpoint), its tasks run, nothing is
    committed."""

    def stall(message_id: str | None) -> str | None:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.getLocalProperty("streaming.sql.batchId") == "2":
            Path(marker).touch()
            time.sleep(600)  # until the test kills this process
        return message_id

    return stall


def main() -> None:
    command, url, stream, *rest = sys.argv[1:]
    if command == "write":
        write(url, stream, int(rest[0]))
    else:
        read(url, stream, *rest)


if __name__ == "__main__":
    main()
