"""The ``amqp-stream`` Spark source against a real broker with streams (a parameter: see
``stream_support.STREAM_BROKERS``), with one local Spark session for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import SparkSession

from interop.spark import AmqpStreamDataSource
from tests.integration.stream_support import (
    STREAM_BROKERS,
    StreamBroker,
    restore_env,
    spark_env,
    stream_broker_fixture,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", params=STREAM_BROKERS)
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StreamBroker]:
    yield from stream_broker_fixture(request, tmp_path_factory.mktemp("broker"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    saved = spark_env()
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("amqpd-source-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.dataSource.register(AmqpStreamDataSource)
    yield session
    session.stop()
    restore_env(saved)


def _read(spark: SparkSession, url: str, streams: str, **options: str) -> Any:
    reader = spark.read.format("amqp-stream").option("url", url).option("streams", streams)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_returns_each_message_once_with_its_columns(
    spark: SparkSession, broker: StreamBroker
) -> None:
    broker.declare("src-a")
    broker.declare("src-b")
    broker.publish("src-a", range(3000))
    broker.publish("src-b", range(10_000, 12_000))
    rows = _read(spark, broker.url, "src-a,src-b").collect()
    assert len(rows) == 5000
    by_stream = {
        name: sorted((r.offset, int(r.message_id[1:])) for r in rows if r.stream == name)
        for name in ("src-a", "src-b")
    }
    # offset order is publish order, and each message is there once
    assert [n for _, n in by_stream["src-a"]] == list(range(3000))
    assert [n for _, n in by_stream["src-b"]] == list(range(10_000, 12_000))
    assert len({offset for offset, _ in by_stream["src-a"]}) == 3000
    row = next(r for r in rows if r.message_id == "m10005")
    assert row.routing_key == "src-b" and row.stream == "src-b"
    assert row.headers == {"n": "10005"}
    assert json.loads(bytes(row.value)) == {"n": 10005}
    assert row.timestamp.replace(tzinfo=UTC) == datetime.fromtimestamp(1_700_010_005, UTC)

    # a range of one stream, the whole of the other, split into several partitions
    first_a = by_stream["src-a"][0][0]
    ranged = _read(
        spark,
        broker.url,
        "src-a,src-b",
        startingOffsets=json.dumps({"src-a": first_a + 10, "src-b": -2}),
        endingOffsets=json.dumps({"src-a": first_a + 100, "src-b": 10**9}),  # b: cut to its end
        minPartitions="5",
    )
    assert ranged.rdd.getNumPartitions() >= 5
    got = ranged.select("stream", "offset").collect()
    offsets_a = sorted(r.offset for r in got if r.stream == "src-a")
    wanted = [o for o, _ in by_stream["src-a"] if first_a + 10 <= o < first_a + 100]
    assert offsets_a == wanted
    assert sum(1 for r in got if r.stream == "src-b") == 2000


def test_batch_read_of_an_empty_stream_returns_no_rows(
    spark: SparkSession, broker: StreamBroker
) -> None:
    # no partitions at all: PySpark then reads one InputPartition(None)
    broker.declare("src-empty")
    frame = _read(spark, broker.url, "src-empty")
    assert frame.count() == 0
    assert frame.columns == [
        "stream",
        "offset",
        "timestamp",
        "routing_key",
        "message_id",
        "headers",
        "value",
    ]


def test_streaming_trigger_cap_available_now_and_restart_from_the_checkpoint(
    spark: SparkSession, broker: StreamBroker, tmp_path: Path
) -> None:
    broker.declare("src-live")
    broker.publish("src-live", range(4000))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(starting: str = "earliest", where: Path = checkpoint) -> list[int]:
        query = (
            spark.readStream.format("amqp-stream")
            .option("url", broker.url)
            .option("streams", "src-live")
            .option("startingOffsets", starting)
            .option("maxMessagesPerTrigger", "1500")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(where))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    first = run()
    assert sum(first) == 4000 and max(first) <= 1500 and len(first) >= 3
    broker.publish("src-live", range(4000, 5000))
    assert run() == [1000]  # same checkpoint: only what came since
    assert run(starting="latest", where=tmp_path / "latest") == []  # starts at the end
    ids = [r.message_id for r in spark.read.parquet(str(out)).select("message_id").collect()]
    assert sorted(ids, key=lambda i: int(i[1:])) == [f"m{n}" for n in range(5000)]


def test_unknown_stream_credentials_url_and_options_fail_in_one_line(
    spark: SparkSession, broker: StreamBroker
) -> None:
    bad_password = broker.url.replace("guest:guest@", "guest:wrong-s3cret@")
    cases = [
        (broker.url, "src-nope", {}, "stream 'src-nope' not found in vhost '/'"),
        (bad_password, "src-a", {}, "check the user and password in the url option"),
        ("amqp://guest:guest@127.0.0.1:1/%2F", "src-a", {}, "cannot connect to"),
        (broker.url, "src-a", {"maxMessagesPerTriger": "5"}, "did you mean"),
    ]
    for url, streams, options, text in cases:
        with pytest.raises((AnalysisException, PythonException)) as info:
            _read(spark, url, streams, **options).count()
        message = str(info.value)
        assert text in message, message
        assert "wrong-s3cret" not in message
        line = next((x for x in message.splitlines() if "amqp-stream source: " in x), message)
        assert text in line


def test_offsets_removed_by_retention_fail_the_read_unless_told_otherwise(
    spark: SparkSession, broker: StreamBroker
) -> None:
    broker.declare(
        "src-short",
        **{"x-max-length-bytes": 60_000, "x-stream-max-segment-size-bytes": 20_000},
    )
    broker.publish("src-short", range(3000), size=200)
    published = broker.wait_retention("src-short", 3000, 200)
    start = json.dumps({"src-short": 0})
    with pytest.raises(PythonException) as info:
        _read(spark, broker.url, "src-short", startingOffsets=start).count()
    assert "DataLossError" in str(info.value) and "were removed" in str(info.value)
    assert "failOnDataLoss=false" in str(info.value)
    rows = _read(spark, broker.url, "src-short", startingOffsets=start, failOnDataLoss="false")
    numbers = sorted(int(r.message_id[1:]) for r in rows.select("message_id").collect())
    assert 0 < len(numbers) < published and numbers == list(range(numbers[0], published))
