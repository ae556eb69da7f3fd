"""Rows/s of ``df.write.format("amqp")`` for several confirm windows, against several brokers.

Not part of the pytest run. Start the brokers first, then for example:

    .venv/bin/python tests/perf/spark_rows.py \\
        --target amqpd=amqp://guest:guest@127.0.0.1:5699/%2F \\
        --target rabbitmq=amqp://guest:guest@127.0.0.1:5697/%2F

Each (window, target) pair writes ``--rows`` rows (default 100,000) in ``--partitions``
partitions (default 2) to a fresh durable queue: a ~75-byte JSON body, a ``headers`` map,
``content_type``, ``message_id``, persistent. Targets alternate inside each window so both
brokers see the same machine load; one warm-up write per target runs first (the first write
of a session pays 10-15 s of Python worker start-up). The queue count is checked after every
write.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator

import pika
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from interop.spark import AmqpDataSource

QUEUE = "spark-rows-bench"


def rows(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    """``n`` rows shaped like the design document's benchmark."""
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
        F.create_map(F.lit("source"), F.lit("spark"), F.lit("kind"), F.lit("order")).alias(
            "headers"
        ),
    )


def fresh_queue(url: str) -> int:
    """Delete and redeclare the durable benchmark queue; return its message count (0)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.queue_delete(QUEUE)
        return int(ch.queue_declare(QUEUE, durable=True).method.message_count)
    finally:
        conn.close()


def queue_count(url: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_declare(QUEUE, passive=True).method.message_count)
    finally:
        conn.close()


def timed_write(df: DataFrame, url: str, window: int) -> float:
    assert fresh_queue(url) == 0
    started = time.perf_counter()
    (
        df.write.format("amqp")
        .option("url", url)
        .option("routingKey", QUEUE)
        .option("maxInFlight", str(window))
        .mode("append")
        .save()
    )
    return time.perf_counter() - started


def parse_targets(values: list[str]) -> Iterator[tuple[str, str]]:
    for value in values:
        name, _, url = value.partition("=")
        if not url:
            raise SystemExit(f"--target wants NAME=URL, got {value!r}")
        yield name, url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--target", action="append", required=True, help="NAME=amqp://… (repeat)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--windows", default="1,100,1000")
    args = parser.parse_args()
    targets = list(parse_targets(args.target))
    windows = [int(w) for w in args.windows.split(",")]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(f"local[{args.partitions}]")
        .appName("amqp-sink-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)
    df = rows(spark, args.rows, args.partitions).cache()
    df.count()

    for name, url in targets:  # warm-up: Python workers, connections, JIT-free paths
        timed_write(rows(spark, 1000, args.partitions), url, 1000)
        print(f"warm-up {name}: ok", flush=True)

    results: dict[tuple[int, str], float] = {}
    for window in windows:
        for name, url in targets:
            seconds = timed_write(df, url, window)
            count = queue_count(url)
            assert count == args.rows, f"{name} window {window}: {count} != {args.rows}"
            rate = results[window, name] = args.rows / seconds
            print(
                f"window {window:>5} {name:>10}: {seconds:7.1f} s {rate:9,.0f} rows/s", flush=True
            )
    for _, url in targets:
        fresh_queue(url)

    names = [name for name, _ in targets]
    print()
    print("| maxInFlight | " + " | ".join(f"{n} rows/s" for n in names) + " |")
    print("|---:|" + "---:|" * len(names))
    for window in windows:
        cells = " | ".join(f"{results[window, n]:,.0f}" for n in names)
        print(f"| {window} | {cells} |")
    spark.stop()


if __name__ == "__main__":
    main()
