"""The ``amqp`` Spark sink against a real amqpd subprocess, with a real local Spark session.

One SparkSession for the module (``local[2,2]``: two cores, and a failed task is retried
once), one fresh broker subprocess per test (so a test can SIGSTOP it). Faults are injected by
test-only subclasses of the sink whose writer wraps the row iterator on attempt 0; they are
pickled by value so the Python workers need not import this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika
import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
from pyspark import TaskContext, cloudpickle
from pyspark.errors import AnalysisException, PythonException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from interop.spark import AmqpDataSource, activate_session
from interop.spark.options import SinkOptions
from interop.spark.writer import AmqpBatchWriter, AmqpStreamWriter
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# The fault-injecting classes below must reach the Python workers by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]


# -- broker subprocess and helpers --------------------------------------------------------


class Broker(BrokerProcess):
    """The shared broker subprocess plus helpers to look into its queues."""

    def channel(self) -> Any:
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        return conn.channel()

    def count(self, queue: str) -> int:
        ch = self.channel()
        try:
            return int(ch.queue_declare(queue, passive=True).method.message_count)
        finally:
            ch.connection.close()

    def drain(self, queue: str) -> list[tuple[Any, bytes]]:
        """Consume every message in ``queue``: (properties, body) in queue order."""
        ch = self.channel()
        try:
            expected = ch.queue_declare(queue, passive=True).method.message_count
            ch.basic_qos(prefetch_count=1000)
            got: list[tuple[Any, bytes]] = []
            for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=30):
                assert method is not None, f"{queue}: {len(got)} of {expected} then silence"
                got.append((props, body))
                if len(got) == expected:
                    break
            ch.cancel()
            return got
        finally:
            ch.connection.close()


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("amqpd-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.pyspark.worker.logging.enabled", "true")
        .getOrCreate()
    )
    session.dataSource.register(AmqpDataSource)
    session.dataSource.register(FaultyAmqpDataSource)
    session.dataSource.register(RecordingAmqpDataSource)
    session.dataSource.register(FailingStreamAmqpDataSource)
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    srv = Broker(tmp_path / "amqpd")
    try:
        yield srv
    finally:
        srv.stop()


def _sink_lines(spark: SparkSession, broker: Broker) -> list[str]:
    """The sink's summary lines for this test's broker (Python worker logs, Spark >= 4.1)."""
    rows = spark.tvf.python_worker_logs().where(F.col("logger") == "interop.spark").collect()
    return [r.msg for r in rows if f":{broker.port}/" in r.msg]


def _numbered(spark: SparkSession, n: int, partitions: int = 2) -> DataFrame:
    """``n`` rows: value JSON and message_id ``m{id}``, in ``partitions`` partitions."""
    return spark.range(n, numPartitions=partitions).select(
        F.to_json(F.struct("id")).alias("value"),
        F.concat(F.lit("m"), F.col("id").cast("string")).alias("message_id"),
    )


def _ids(messages: list[tuple[Any, bytes]]) -> list[str]:
    return [props.message_id for props, _ in messages]


# -- fault injection (test only) ------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """What to do on attempt 0 after ``after`` rows of a partition (of ``partition`` only
    when it is not -1).

    ``raise``: raise RuntimeError. ``sigstop``: SIGSTOP the broker ``pid`` and SIGCONT it
    ``seconds`` later (a negative ``pid``: that process group, a ``--workers`` node's
    supervisor and workers; BrokerProcess starts each broker in a session of its own).
    ``sigkill``: SIGKILL the broker ``pid`` (the test restarts it). Every failed attempt
    appends a line to ``record``.
    """

    kind: str
    after: int
    record: str
    pid: int = 0
    partition: int = -1
    seconds: float = 0.0


class FaultyWriter(AmqpBatchWriter):
    def __init__(self, options: SinkOptions, schema: StructType, fault: Fault) -> None:
        super().__init__(options, schema)
        self.fault = fault

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = TaskContext.get()
        assert context is not None
        attempt = context.attemptNumber()
        if attempt == 0 and self.fault.partition in (-1, context.partitionId()):
            iterator = self._inject(iterator)
        try:
            return super().write(iterator)
        except Exception as exc:
            with open(self.fault.record, "a") as out:
                out.write(f"p{context.partitionId()} a{attempt} {type(exc).__name__}: {exc}\n")
            raise

    def _inject(self, rows: Iterator[Any]) -> Iterator[Any]:
        for index, row in enumerate(rows):
            if index == self.fault.after:
                if self.fault.kind == "raise":
                    raise RuntimeError(f"injected failure at row {index}")
                if self.fault.kind == "sigkill":
                    os.kill(self.fault.pid, signal.SIGKILL)
                else:
                    os.kill(self.fault.pid, signal.SIGSTOP)
                    resume = threading.Timer(
                        self.fault.seconds, os.kill, (self.fault.pid, signal.SIGCONT)
                    )
                    resume.start()
            yield row


class FaultyAmqpDataSource(AmqpDataSource):
    @classmethod
    def name(cls) -> str:
        return "amqp_faulty"

    def writer(self, schema: StructType, overwrite: bool) -> FaultyWriter:
        fault = Fault(
            kind=self.options.pop("fault"),
            after=int(self.options.pop("faultafter")),
            record=self.options.pop("faultrecord"),
            pid=int(self.options.pop("faultpid", "0")),
            partition=int(self.options.pop("faultpartition", "-1")),
            seconds=float(self.options.pop("faultseconds", "0")),
        )
        plain = super().writer(schema, overwrite)
        return FaultyWriter(plain.options, plain.schema, fault)


class FailingStreamWriter(AmqpStreamWriter):
    """Every attempt of every partition fails after ``after`` rows (the query dies)."""

    def __init__(self, options: SinkOptions, schema: StructType, after: int) -> None:
        super().__init__(options, schema)
        self.after = after

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        def rows() -> Iterator[Any]:
            for index, row in enumerate(iterator):
                if index == self.after:
                    raise RuntimeError(f"injected streaming failure at row {index}")
                yield row

        return super().write(rows())


class FailingStreamAmqpDataSource(AmqpDataSource):
    @classmethod
    def name(cls) -> str:
        return "amqp_failing_stream"

    def streamWriter(self, schema: StructType, overwrite: bool) -> FailingStreamWriter:
        after = int(self.options.pop("faultafter"))
        plain = super().streamWriter(schema, overwrite)
        return FailingStreamWriter(plain.options, plain.schema, after)


class RecordingStreamWriter(AmqpStreamWriter):
    """Also appends the sink's summary lines to a file (Spark 4.3 keeps the streaming commit
    worker out of python_worker_logs)."""

    def __init__(self, options: SinkOptions, schema: StructType, record: str) -> None:
        super().__init__(options, schema)
        self.record = record

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        handler = logging.FileHandler(self.record)
        sink_log = logging.getLogger("interop.spark")
        sink_log.addHandler(handler)
        try:
            super().commit(messages, batchId)
        finally:
            sink_log.removeHandler(handler)
            handler.close()


class RecordingAmqpDataSource(AmqpDataSource):
    @classmethod
    def name(cls) -> str:
        return "amqp_recording"

    def streamWriter(self, schema: StructType, overwrite: bool) -> RecordingStreamWriter:
        record = self.options.pop("record")
        plain = super().streamWriter(schema, overwrite)
        return RecordingStreamWriter(plain.options, plain.schema, record)


# -- tests ----------------------------------------------------------------------------------


def test_batch_exact_count_and_properties_round_trip(spark: SparkSession, broker: Broker) -> None:
    ch = broker.channel()
    ch.queue_declare("orders", durable=True)
    ch.queue_declare("kafka-shaped")
    ch.connection.close()
    n = 10_000
    stamp = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    df = spark.range(n, numPartitions=2).select(
        F.to_json(F.struct("id")).alias("value"),
        F.lit("orders").alias("routing_key"),
        F.lit("").alias("exchange"),
        F.concat(F.lit("m"), F.col("id").cast("string")).alias("message_id"),
        F.concat(F.lit("c"), F.col("id").cast("string")).alias("correlation_id"),
        F.lit("application/json").alias("content_type"),
        F.lit("utf-8").alias("content_encoding"),
        F.lit("order.created").alias("type"),
        F.lit("spark-test").alias("app_id"),
        F.lit("guest").alias("user_id"),
        F.lit("replies").alias("reply_to"),
        (F.col("id") % 10).cast("int").alias("priority"),
        F.lit(60_000).cast("long").alias("expiration"),
        F.lit(stamp).alias("timestamp"),
        F.create_map(F.lit("n"), F.col("id"), F.lit("twice"), F.col("id") * 2).alias("headers"),
    )
    df.write.format("amqp").option("url", broker.url).mode("append").save()

    assert broker.count("orders") == n
    messages = broker.drain("orders")
    assert sorted(_ids(messages)) == sorted(f"m{i}" for i in range(n))
    for props, body in messages:
        i = json.loads(body)["id"]
        assert props.message_id == f"m{i}" and props.correlation_id == f"c{i}"
        assert props.content_type == "application/json" and props.content_encoding == "utf-8"
        assert props.type == "order.created" and props.app_id == "spark-test"
        assert props.user_id == "guest" and props.reply_to == "replies"
        assert props.priority == i % 10 and props.expiration == "60000"
        assert props.timestamp == int(stamp.timestamp()) and props.delivery_mode == 2
        assert props.headers == {"n": i, "twice": 2 * i}
    # within a partition, queue order is row order
    first_partition = [json.loads(b)["id"] for _, b in messages if json.loads(b)["id"] < n // 2]
    assert first_partition == list(range(n // 2))

    kafka = spark.createDataFrame(
        [(b"\x00\x01", [("k", b"v1"), ("k", b"v2"), ("z", None)])],
        "value binary, headers array<struct<key: string, value: binary>>",
    )
    (
        kafka.write.format("amqp")
        .option("url", broker.url)
        .option("routingKey", "kafka-shaped")
        .option("deliveryMode", "1")
        .mode("append")
        .save()
    )
    [(props, body)] = broker.drain("kafka-shaped")
    assert body == b"\x00\x01" and props.delivery_mode == 1
    assert props.headers == {"k": b"v2", "z": None}

    lines = _sink_lines(spark, broker)
    assert any("published=10000 confirmed=10000" in x and "tasks=2" in x for x in lines)
    # the second write's task ran in a Python worker that kept its connection from the first
    assert any("job committed published=1 " in x and "reused_connections=1" in x for x in lines)
    assert all("guest:***@" in x and "guest:guest" not in x for x in lines)


def test_nack_fails_the_job(spark: SparkSession, broker: Broker) -> None:
    ch = broker.channel()
    ch.queue_declare("small", arguments={"x-max-length": 1000, "x-overflow": "reject-publish"})
    ch.connection.close()
    with pytest.raises(PythonException) as info:
        (
            _numbered(spark, 3000, partitions=1)
            .write.format("amqp")
            .option("url", broker.url)
            .option("routingKey", "small")
            .mode("append")
            .save()
        )
    text = str(info.value)
    assert "BrokerNacked: broker nacked" in text and "reject-publish" in text
    assert "guest:guest" not in text
    assert broker.count("small") == 1000
    assert any("job aborted" in x for x in _sink_lines(spark, broker))


def test_mandatory_return_fails_the_job(spark: SparkSession, broker: Broker) -> None:
    with pytest.raises(PythonException) as info:
        (
            _numbered(spark, 100)
            .write.format("amqp")
            .option("url", broker.url)
            .option("routingKey", "no-such-queue")
            .mode("append")
            .save()
        )
    text = str(info.value)
    assert "MessageReturned: message returned as unroutable: 312 NO_ROUTE" in text
    assert "routing_key='no-such-queue'" in text


def test_injected_task_failure_republishes_with_duplicates(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    ch = broker.channel()
    ch.queue_declare("retried", durable=True)
    ch.connection.close()
    record = tmp_path / "failures.txt"
    n = 10_000
    (
        _numbered(spark, n)
        .write.format("amqp_faulty")
        .option("url", broker.url)
        .option("routingKey", "retried")
        .option("fault", "raise")
        .option("faultAfter", "3000")
        .option("faultRecord", str(record))
        .mode("append")
        .save()
    )
    failures = sorted(record.read_text().splitlines())
    assert failures == [
        "p0 a0 RuntimeError: injected failure at row 3000",
        "p1 a0 RuntimeError: injected failure at row 3000",
    ]
    ids = _ids(broker.drain("retried"))
    assert set(ids) == {f"m{i}" for i in range(n)}
    assert len(ids) > n  # attempt 0 of each partition got rows out before failing
    assert any("published=10000" in x and "retries=2" in x for x in _sink_lines(spark, broker))


def test_frozen_broker_stalls_confirms_and_the_task_reconnects(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    ch = broker.channel()
    ch.queue_declare("frozen", durable=True)
    ch.connection.close()
    record = tmp_path / "failures.txt"
    n = 5000
    (
        _numbered(spark, n, partitions=1)
        .write.format("amqp_faulty")
        .option("url", broker.url)
        .option("routingKey", "frozen")
        .option("confirmTimeoutMs", "1500")
        .option("connectTimeoutMs", "1000")
        .option("fault", "sigstop")
        .option("faultAfter", "2000")
        .option("faultSeconds", "5")
        .option("faultPid", str(-broker.proc.pid))  # its process group: every worker too
        .option("faultRecord", str(record))
        .mode("append")
        .save()
    )
    assert not record.exists()  # no attempt failed: the task rode out the freeze
    ids = _ids(broker.drain("frozen"))
    assert set(ids) == {f"m{i}" for i in range(n)}
    [line] = [x for x in _sink_lines(spark, broker) if "job committed" in x]
    assert "published=5000 confirmed=5000" in line and "retries=0" in line
    assert "reconnects=0 " not in line and "republished=0 " not in line


@pytest.mark.parametrize("outage", [5, 30])
def test_broker_killed_mid_write_and_restarted_loses_nothing(
    spark: SparkSession, broker: Broker, tmp_path: Path, outage: int
) -> None:
    ch = broker.channel()
    ch.queue_declare("restarted", durable=True)
    ch.connection.close()
    record = tmp_path / "failures.txt"
    n = 60_000

    def restart_after_the_kill() -> None:
        broker.reap()  # returns when the task's SIGKILL has landed
        time.sleep(outage)  # the outage is the scenario, not a synchronisation
        broker.restart()  # same port, same data directory

    restarter = threading.Thread(target=restart_after_the_kill, daemon=True)
    restarter.start()
    try:
        (
            _numbered(spark, n)
            .write.format("amqp_faulty")
            .option("url", broker.url)
            .option("routingKey", "restarted")
            .option("fault", "sigkill")
            .option("faultAfter", "10000")
            .option("faultPartition", "0")
            .option("faultPid", str(broker.proc.pid))
            .option("faultRecord", str(record))
            .mode("append")
            .save()
        )
    finally:
        restarter.join(timeout=outage + 60)
    assert not restarter.is_alive()
    assert not record.exists()  # no attempt failed: both tasks reconnected and republished
    ids = _ids(broker.drain("restarted"))
    assert set(ids) == {f"m{i}" for i in range(n)}  # 0 missing (duplicates allowed)
    [line] = [x for x in _sink_lines(spark, broker) if "job committed" in x]
    assert "published=60000 confirmed=60000" in line and "retries=0" in line
    assert "reconnects=0 " not in line


def test_bad_mode_options_and_columns_fail_before_any_task(
    spark: SparkSession, broker: Broker
) -> None:
    ch = broker.channel()
    ch.queue_declare("untouched")
    ch.connection.close()
    df = _numbered(spark, 10)

    def save(frame: DataFrame, mode: str | None = "append", **options: str) -> str:
        writer = frame.write.format("amqp").option("url", broker.url)
        writer = writer.option("routingKey", "untouched")
        for key, value in options.items():
            writer = writer.option(key, value)
        if mode is not None:
            writer = writer.mode(mode)
        with pytest.raises(AnalysisException) as info:
            writer.save()
        return str(info.value)

    assert "only append is supported, use .mode('append')" in save(df, mode="overwrite")
    assert "ErrorIfExists" in save(df, mode=None)
    text = save(df.withColumnRenamed("message_id", "messageid"))
    assert "unknown column 'messageid' (did you mean 'message_id'?)" in text
    text = save(df, maxinflite="5")
    assert "unknown option 'maxinflite' (did you mean 'maxInFlight'?)" in text
    assert "option maxInFlight must be an integer" in save(df, MaxInFlight="0")
    text = save(df, exchange="no-such-exchange")
    assert "exchange 'no-such-exchange' not found in vhost '/'" in text
    wrong = broker.url.replace("guest:guest", "guest:wrong")
    text = save(df, url=wrong)
    assert "refused the connection" in text and "check the user, password and vhost" in text
    assert ":wrong@" not in text
    # without the driver-side check, every task attempt fails at once, saying why
    with pytest.raises(PythonException) as info:
        df.write.format("amqp").option("url", wrong).option("routingKey", "untouched").option(
            "checkExchange", "false"
        ).mode("append").save()
    text = str(info.value)
    assert "ConnectError: cannot connect to amqp://guest:***@" in text
    assert "check the user name and password in the url option; not retried" in text
    text = save(df.select(F.col("value").cast("binary").alias("body"), F.lit(1.5).alias("x")))
    assert "unknown column 'x'" in text
    assert broker.count("untouched") == 0


def test_save_from_a_thread_after_activate_session(spark: SparkSession, broker: Broker) -> None:
    ch = broker.channel()
    ch.queue_declare("threaded")
    ch.connection.close()
    failures: list[BaseException] = []

    def job() -> None:
        try:
            activate_session(spark)  # a new thread has no active session in the JVM
            (
                _numbered(spark, 100)
                .write.format("amqp")
                .option("url", broker.url)
                .option("routingKey", "threaded")
                .mode("append")
                .save()
            )
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    thread.join()
    assert failures == []
    assert broker.count("threaded") == 100


def test_streaming_available_now_publishes_each_row_once_and_restart_adds_nothing(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    ch = broker.channel()
    ch.queue_declare("stream", durable=True)
    ch.connection.close()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    record = tmp_path / "commits.log"
    source.mkdir()

    def add_file(name: str, start: int, count: int) -> None:
        lines = (json.dumps({"n": i}) for i in range(start, start + count))
        (source / name).write_text("\n".join(lines) + "\n")

    def run() -> Any:
        query = (
            spark.readStream.schema("n long")
            .json(str(source))
            .select(F.to_json(F.struct("n")).alias("value"))
            .writeStream.format("amqp_recording")
            .option("record", str(record))
            .option("url", broker.url)
            .option("routingKey", "stream")
            .option("messageIdMode", "deterministic")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return query

    add_file("a.json", 0, 2000)
    add_file("b.json", 2000, 1000)
    first = run()
    assert broker.count("stream") == 3000
    run()  # restart on the same checkpoint: nothing new
    assert broker.count("stream") == 3000
    add_file("c.json", 3000, 500)
    run()
    messages = broker.drain("stream")
    values = sorted(json.loads(body)["n"] for _, body in messages)
    assert values == list(range(3500))  # exactly once per input row
    ids = _ids(messages)
    assert len(set(ids)) == 3500
    # deterministic ids: {queryId}-{batchId}-{partition}-{row}; batch 0 then batch 1
    batches = [i.removeprefix(f"{first.id}-").split("-")[0] for i in ids]
    assert batches.count("0") == 3000 and batches.count("1") == 500
    assert [p["sink"]["numOutputRows"] for p in first.recentProgress] == [3000]
    lines = record.read_text().splitlines()
    assert [line.split(" published=")[0] for line in lines] == [
        "amqp sink: batch 0 committed",
        "amqp sink: batch 1 committed",
    ]
    assert "published=3000 confirmed=3000" in lines[0] and f"query={first.id}" in lines[0]
    assert "published=500 confirmed=500" in lines[1]


# -- exactly-once into amqpd: deterministic ids + x-message-deduplication ---------------------

DEDUP_ARGS = {"x-message-deduplication": True, "x-deduplication-window": 100_000}


def test_batch_retry_with_deterministic_ids_leaves_each_row_once_in_a_dedup_queue(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    ch = broker.channel()
    ch.queue_declare("exactly-once", durable=True, arguments=DEDUP_ARGS)
    ch.connection.close()
    record = tmp_path / "failures.txt"
    n = 10_000
    (
        _numbered(spark, n)
        .drop("message_id")
        .write.format("amqp_faulty")
        .option("url", broker.url)
        .option("routingKey", "exactly-once")
        .option("messageIdMode", "deterministic")
        .option("fault", "raise")
        .option("faultAfter", "3000")
        .option("faultRecord", str(record))
        .mode("append")
        .save()
    )
    assert len(record.read_text().splitlines()) == 2  # both partitions failed once, retried
    messages = broker.drain("exactly-once")
    values = sorted(json.loads(body)["id"] for _, body in messages)
    assert values == list(range(n))  # 0 duplicates, 0 missing
    [line] = [x for x in _sink_lines(spark, broker) if "job committed" in x]
    assert "published=10000" in line and "retries=2" in line


def test_streaming_restart_after_a_failed_batch_leaves_each_row_once_in_a_dedup_queue(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    ch = broker.channel()
    ch.queue_declare("stream-once", durable=True, arguments=DEDUP_ARGS)
    ch.connection.close()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for name, start in (("a.json", 0), ("b.json", 2000)):
        lines = (json.dumps({"n": i}) for i in range(start, start + 2000))
        (source / name).write_text("\n".join(lines) + "\n")

    def run(fmt: str, **options: str) -> Any:
        writer = (
            spark.readStream.schema("n long")
            .json(str(source))
            .select(F.to_json(F.struct("n")).alias("value"))
            .writeStream.format(fmt)
            .option("url", broker.url)
            .option("routingKey", "stream-once")
            .option("messageIdMode", "deterministic")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.start()
        with contextlib.suppress(StreamingQueryException):  # the failing run: checked below
            query.awaitTermination()
        return query

    failed = run("amqp_failing_stream", faultAfter="700")
    assert "injected streaming failure at row 700" in str(failed.exception())
    assert broker.count("stream-once") > 0  # the failed batch left messages behind
    restarted = run("amqp")  # same checkpoint: the uncommitted batch is replayed
    assert restarted.exception() is None and restarted.id == failed.id
    messages = broker.drain("stream-once")
    values = sorted(json.loads(body)["n"] for _, body in messages)
    assert values == list(range(4000))  # 0 duplicates, 0 missing


def test_batch_rerun_with_hash_ids_adds_nothing_to_a_dedup_queue(
    spark: SparkSession, broker: Broker
) -> None:
    """A batch job run a second time (as after its driver died) with ``messageIdMode=hash``:
    the ids come from the data, not from the Spark execution, so the re-run's messages are
    duplicates the queue drops; ``deterministic`` ids would differ (new execution id)."""
    ch = broker.channel()
    ch.queue_declare("rerun-once", durable=True, arguments=DEDUP_ARGS)
    ch.connection.close()
    n = 5000

    def job(mode: str) -> None:
        (
            _numbered(spark, n)
            .drop("message_id")
            .write.format("amqp")
            .option("url", broker.url)
            .option("routingKey", "rerun-once")
            .option("messageIdMode", mode)
            .mode("append")
            .save()
        )

    job("hash")
    job("hash")  # the re-run
    assert broker.count("rerun-once") == n
    job("deterministic")  # ids from the execution: the same rows again, as new messages
    messages = broker.drain("rerun-once")
    assert len(messages) == 2 * n
    hashed = [props.message_id for props, _ in messages[:n]]
    assert all(i.startswith("sha256:") for i in hashed) and len(set(hashed)) == n
    values = sorted(json.loads(body)["id"] for _, body in messages[:n])
    assert values == list(range(n))
