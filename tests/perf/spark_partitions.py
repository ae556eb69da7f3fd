"""Rows/s of ``df.write.format("amqp")`` at several partition counts (connection reuse).

Not part of the pytest run. Each task used to open its own connection, so many small
partitions paid one TCP connect, AMQP handshake, channel open and ``confirm.select`` each;
now a Python worker keeps its connection for the next task. Start a broker, then:

    .venv/bin/python tests/perf/spark_partitions.py \\
        --url amqp://guest:guest@127.0.0.1:5699/%2F --partitions 2,16,200

To measure the code of another revision, put an export of it first on PYTHONPATH (the Spark
workers inherit it); the script passes no option an older sink would not know, except those
given with ``--option``. Each write goes to a fresh durable queue (persistent ~75-byte JSON
bodies, a headers map, content_type, message_id); the queue count is checked after every
write. One warm-up write runs first (Python worker start-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import pika
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import interop.spark
from interop.spark import AmqpDataSource

QUEUE = "spark-partitions-bench"


def rows(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    return spark.range(n, numPartitions=partitions).select(
        F.to_json(
            F.struct(
                F.col("id").alias("order"),
                (F.col("id") % 97).alias("customer"),
                F.lit("2024-05-06T07:08:09Z").alias("at"),
                F.lit("created").alias("status"),
            )
        ).alias("value"),
        F.concat(F.lit("bench-"), F.col("id").cast("string")).alias("message_id"),
        F.lit("application/json").alias("content_type"),
        F.create_map(F.lit("source"), F.lit("spark")).alias("headers"),
    )


def queue(url: str, fresh: bool) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        if fresh:
            ch.queue_delete(QUEUE)
            return int(ch.queue_declare(QUEUE, durable=True).method.message_count)
        return int(ch.queue_declare(QUEUE, passive=True).method.message_count)
    finally:
        conn.close()


def timed_write(df: DataFrame, url: str, options: dict[str, str]) -> float:
    assert queue(url, fresh=True) == 0
    writer = df.write.format("amqp").option("url", url).option("routingKey", QUEUE)
    for key, value in options.items():
        writer = writer.option(key, value)
    started = time.perf_counter()
    writer.mode("append").save()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", default="2,16,200")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--option", action="append", default=[], help="KEY=VALUE (repeat)")
    args = parser.parse_args()
    options = dict(o.split("=", 1) for o in args.option)
    counts = [int(p) for p in args.partitions.split(",")]
    print(f"interop.spark from {os.path.dirname(interop.spark.__file__)}; options {options}")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(args.master)
        .appName("amqp-sink-partitions")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)
    timed_write(rows(spark, 1000, 2), args.url, options)  # warm-up

    results: dict[int, list[float]] = {}
    for partitions in counts:
        df = rows(spark, args.rows, partitions).cache()
        df.count()
        for _ in range(args.repeat):
            seconds = timed_write(df, args.url, options)
            count = queue(args.url, fresh=False)
            assert count == args.rows, f"{partitions} partitions: {count} != {args.rows}"
            results.setdefault(partitions, []).append(args.rows / seconds)
            print(
                f"{partitions:>4} partitions: {seconds:6.1f} s {args.rows / seconds:8,.0f} rows/s"
            )
        df.unpersist()
    queue(args.url, fresh=True)
    print()
    print("| partitions | rows/s (median) | rows/s (runs) |")
    print("|---:|---:|---|")
    for partitions, rates in results.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"| {partitions} | {statistics.median(rates):,.0f} | {runs} |")
    spark.stop()


if __name__ == "__main__":
    main()
