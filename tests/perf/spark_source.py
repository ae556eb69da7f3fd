"""Rows/s of the ``amqp-stream`` source into Parquet, beside the ``amqp`` sink's write rate.

Not part of the pytest run. Against a running broker with streams (RabbitMQ >= 3.9, amqpd):

    .venv/bin/python tests/perf/spark_source.py --url amqp://guest:guest@127.0.0.1:5697/%2F

or against private brokers it starts (amqpd and a RabbitMQ node, rounds taking turns, so
both see the same machine load; RabbitMQ needs ``rabbitmq-server`` installed):

    .venv/bin/python -m tests.perf.spark_source --broker both

Per round: the sink writes ``--rows`` rows (a ~75-byte JSON body, ``headers`` map,
``message_id``) into ``--streams`` fresh streams, one DataFrame partition per stream (the
sink's rate); then ``spark.read.format("amqp-stream")`` writes all of them to Parquet (batch
read rate) and a ``readStream`` with ``Trigger.AvailableNow`` does the same on a fresh
checkpoint (streaming rate, ``--max-per-trigger`` rows per micro-batch). Each Parquet output
is counted. A warm-up round (``--warmup-rows``) runs first: the first job of a session pays
for Python worker start-up. ``--consumer-only`` also times the task's socket consumer alone
(no Spark) on the first stream. ``--ceiling`` also times Spark alone: a source of the same
schema and partitions that yields ready-made record batches (no broker, no decoding) written
to Parquet the same way; what no AMQP source can beat on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from interop.spark import AmqpDataSource, AmqpStreamDataSource
from interop.spark.stream_read import DDL_SCHEMA
from interop.spark.stream_rows import Rows
from interop.spark.stream_socket import SocketConsumer


def fresh_streams(url: str, names: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        for name in names:
            ch.queue_delete(name)
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        conn.close()


def write(spark: SparkSession, url: str, names: list[str], rows: int) -> float:
    """The sink writes ``rows`` rows spread over the streams; returns seconds."""
    frame = spark.range(rows, numPartitions=len(names)).select(
        F.to_json(
            F.struct(
                F.col("id").alias("order"),
                (F.col("id") % 97).alias("customer"),
                F.lit("2024-05-06T07:08:09Z").alias("at"),
                F.lit("created").alias("status"),
            )
        ).alias("value"),
        F.concat(F.lit("bench-"), F.col("id").cast("string")).alias("message_id"),
        F.element_at(
            F.array(*[F.lit(n) for n in names]), (F.col("id") % len(names) + 1).cast("int")
        ).alias("routing_key"),
        F.create_map(F.lit("source"), F.lit("spark")).alias("headers"),
    )
    started = time.perf_counter()
    frame.write.format("amqp").option("url", url).mode("append").save()
    return time.perf_counter() - started


def read_batch(spark: SparkSession, url: str, names: list[str], out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    (
        spark.read.format("amqp-stream")
        .option("url", url)
        .option("streams", ",".join(names))
        .load()
        .write.mode("overwrite")
        .parquet(str(out))
    )
    seconds = time.perf_counter() - started
    return seconds, spark.read.parquet(str(out)).count()


def read_stream(
    spark: SparkSession, url: str, names: list[str], out: Path, per_trigger: int
) -> tuple[float, int]:
    started = time.perf_counter()
    query = (
        spark.readStream.format("amqp-stream")
        .option("url", url)
        .option("streams", ",".join(names))
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    return seconds, spark.read.parquet(str(out / "data")).count()


def consumer_only(url: str, stream: str, wanted: int) -> float:
    """msgs/s of the task's socket consumer alone (reads ``wanted`` messages)."""
    consumer = SocketConsumer(url, 10.0, "bench").open(stream, "first", 2000)
    seen = unacked = 0
    started = time.perf_counter()
    try:
        while seen < wanted:
            rows = consumer.poll(30.0)
            if not rows:
                break
            seen += len(rows)
            unacked += len(rows)
            if unacked >= 1000:
                consumer.ack(rows.last_tag)
                unacked = 0
    finally:
        consumer.close()
    return seen / (time.perf_counter() - started)


class _ReadyReader(DataSourceReader):
    """``rows`` rows over ``parts`` partitions, as one record batch built once per task
    and yielded again and again (10,000 rows each, like the source's batches)."""

    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(number) for number in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        size = 10_000
        sample = Rows()
        body = b'{"order":1234,"customer":12,"at":"2024-05-06T07:08:09Z","status":"created"}'
        for offset in range(size):
            sample.add(offset, offset, "s", 1_700_000_000, f"bench-{offset}", {"a": "b"}, body)
        batch = sample.batch(f"bench-src-{partition.value}")
        left = self.rows // self.parts
        while left > 0:
            yield batch if left >= size else batch.slice(0, left)
            left -= size


class ReadySource(DataSource):
    """Spark alone: the stream schema from ready-made batches (``--ceiling``)."""

    @classmethod
    def name(cls) -> str:
        return "ready-batches"

    def schema(self) -> str:
        return DDL_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ReadyReader(int(self.options["rows"]), int(self.options["parts"]))


def ceiling(spark: SparkSession, rows: int, parts: int, out: Path) -> float:
    """rows/s of Spark writing ready-made batches of the source's schema to Parquet."""
    started = time.perf_counter()
    reader = spark.read.format("ready-batches").option("rows", str(rows))
    reader.option("parts", str(parts)).load().write.mode("overwrite").parquet(str(out))
    seconds = time.perf_counter() - started
    assert spark.read.parquet(str(out)).count() == rows
    return rows / seconds


def start_brokers(which: str, stack: contextlib.ExitStack) -> list[tuple[str, str]]:
    """Private brokers for ``--broker``: (label, url) each, stopped with ``stack``."""
    started: list[tuple[str, str]] = []
    if which in ("amqpd", "both"):
        from tests.integration.broker_process import BrokerProcess

        data = Path(tempfile.mkdtemp(prefix="spark-source-amqpd-"))
        stack.callback(shutil.rmtree, data, True)
        amqpd = BrokerProcess(data, extra=("--no-management",))
        stack.callback(amqpd.stop)
        started.append(("amqpd", amqpd.url))
    if which in ("rabbitmq", "both"):
        from tests.integration.rabbit_node import RabbitNode

        rabbit = RabbitNode(prefix="sparkbench")
        stack.callback(rabbit.stop)
        rabbit.wait()
        started.append(("RabbitMQ", rabbit.url))
    return started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="a running broker with streams")
    target.add_argument("--broker", choices=("amqpd", "rabbitmq", "both"))
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--warmup-rows", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--consumer-only", action="store_true")
    parser.add_argument("--ceiling", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(f"local[{max(2, args.streams)}]")
        .appName("spark-source-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)
    spark.dataSource.register(AmqpStreamDataSource)
    spark.dataSource.register(ReadySource)
    names = [f"bench-src-{i}" for i in range(args.streams)]
    work = Path(tempfile.mkdtemp(prefix="spark-source-bench-"))
    stack = contextlib.ExitStack()
    brokers = start_brokers(args.broker, stack) if args.broker else [("broker", args.url)]
    print(f"load average at start: {os.getloadavg()}")
    try:
        runs = [("warm-up", args.warmup_rows)] + [
            (f"round {r + 1}", args.rows) for r in range(args.rounds)
        ]
        for (label, rows), (broker, url) in itertools.product(runs, brokers):
            label = f"{broker} {label}" if args.broker else label
            fresh_streams(url, names)
            shutil.rmtree(work / "batch", ignore_errors=True)
            shutil.rmtree(work / "stream", ignore_errors=True)
            written = write(spark, url, names, rows)
            batch_s, batch_n = read_batch(spark, url, names, work / "batch")
            stream_s, stream_n = read_stream(
                spark, url, names, work / "stream", args.max_per_trigger
            )
            assert batch_n == rows and stream_n == rows, (batch_n, stream_n, rows)
            line = (
                f"{label}: {rows} rows, {len(names)} streams | sink write {rows / written:,.0f}"
                f" rows/s | batch read -> parquet {rows / batch_s:,.0f} rows/s | "
                f"readStream availableNow -> parquet {rows / stream_s:,.0f} rows/s"
            )
            if args.consumer_only and not label.endswith("warm-up"):
                alone = consumer_only(url, names[0], rows // len(names))
                line += f" | socket consumer alone {alone:,.0f} msgs/s"
            if args.ceiling:
                alone = ceiling(spark, rows, len(names), work / "ceiling")
                line += f" | Spark alone (ready batches) -> parquet {alone:,.0f} rows/s"
            print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
        stack.close()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
