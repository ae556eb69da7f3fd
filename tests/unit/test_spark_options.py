"""Spark sink: option parsing and schema validation (no Spark session, no sockets)."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from interop.spark import AmqpDataSource, ConfigError
from interop.spark.columns import Kind, plan_columns
from interop.spark.errors import redact_url, scrub
from interop.spark.options import SinkOptions, parse_options
from interop.spark.writer import AmqpBatchWriter, AmqpStreamWriter

URL = "amqp://guest:s3cret@127.0.0.1:5672/%2F"


def schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, dtype, True) for name, dtype in fields])


def test_defaults_follow_the_design() -> None:
    options = parse_options({"url": URL})
    assert options == SinkOptions(url=URL)
    assert options.mandatory and options.delivery_mode == 2 and options.max_in_flight == 1000
    assert options.confirm_timeout_ms == 30_000 and options.connect_timeout_ms == 5_000
    assert options.delivery_timeout_ms == 120_000  # Kafka's delivery.timeout.ms
    assert options.connection_idle_timeout_ms == 60_000
    assert options.message_id_mode == "column" and options.check_exchange
    assert not options.ignore_unknown_columns


def test_option_names_ignore_case_as_spark_lower_cases_them() -> None:
    options = parse_options(
        {
            "URL": URL,
            "maxinflight": "5",
            "ConfirmTimeoutMs": "1500",
            "routingkey": "q",
            "EXCHANGE": "x",
            "mandatory": "FALSE",
            "deliverymode": "1",
            "messageIdMode": "Deterministic",
            "checkexchange": "false",
            "ignoreunknowncolumns": "true",
            "connectionname": "etl",
            "connecttimeoutms": "250",
            "deliveryTimeoutMs": "0",
            "connectionidletimeoutms": "0",
        }
    )
    assert options == SinkOptions(
        url=URL,
        exchange="x",
        routing_key="q",
        mandatory=False,
        delivery_mode=1,
        max_in_flight=5,
        confirm_timeout_ms=1500,
        connect_timeout_ms=250,
        delivery_timeout_ms=0,
        connection_idle_timeout_ms=0,
        message_id_mode="deterministic",
        check_exchange=False,
        ignore_unknown_columns=True,
        connection_name="etl",
    )


def test_unknown_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"url": URL, "maxinflite": "5"})
    assert "unknown option 'maxinflite' (did you mean 'maxInFlight'?)" in str(info.value)
    assert "known options: checkExchange, confirmTimeoutMs" in str(info.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(
            {
                "maxInFlight": "0",
                "mandatory": "yes",
                "deliveryMode": "3",
                "messageIdMode": "random",
                "confirmTimeoutMs": "soon",
            }
        )
    text = str(info.value)
    assert text.startswith("amqp sink: ")
    for expected in (
        'option "url" is required',
        "option maxInFlight must be an integer in 1..1000000, not '0'",
        "option mandatory must be true or false, not 'yes'",
        "option deliveryMode must be an integer in 1..2, not '3'",
        "option messageIdMode must be one of column, deterministic, hash, uuid, not 'random'",
        "option confirmTimeoutMs must be an integer",
    ):
        assert expected in text


def test_same_option_twice_in_different_case_is_rejected() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        parse_options({"url": URL, "maxInFlight": "1", "MAXINFLIGHT": "2"})


@pytest.mark.parametrize(
    "url",
    [
        "http://guest:s3cret@host/",
        "amqp://guest:s3cret@host:notaport/",
        "amqp://guest:s3cret@host/?heartbeat=x",
    ],
)
def test_bad_url_is_rejected_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"url": url})
    assert "s3cret" not in str(info.value) and "guest:***@host" in str(info.value)


def test_streaming_accepts_sparks_own_options() -> None:
    options = {"url": URL, "checkpointLocation": "/tmp/ck"}
    assert parse_options(options, streaming=True).url == URL
    with pytest.raises(ConfigError, match="unknown option 'checkpointlocation'"):
        parse_options(options)


def test_redaction() -> None:
    assert redact_url(URL) == "amqp://guest:***@127.0.0.1:5672/%2F"
    assert redact_url("amqp://host:5672/v?q=a@b") == "amqp://host:5672/v?q=a@b"
    assert redact_url("amqps://u:p%40ss@h/") == "amqps://u:***@h/"
    assert scrub(f"failed {URL}: password s3cret rejected", URL) == (
        "failed amqp://guest:***@127.0.0.1:5672/%2F: password *** rejected"
    )
    assert scrub("bad p@ss", "amqp://u:p%40ss@h/") == "bad ***"


# -- columns ------------------------------------------------------------------------------

OPTS = SinkOptions(url=URL, routing_key="q")


def test_value_column_with_routing_option_is_enough() -> None:
    plan = plan_columns(schema(("value", StringType())), OPTS)
    value = plan.get("value")
    assert value is not None and value.kind is Kind.STRING and value.index == 0


def test_body_is_an_alias_of_value_but_not_both() -> None:
    plan = plan_columns(schema(("routing_key", StringType()), ("body", BinaryType())), OPTS)
    value = plan.get("value")
    assert value is not None and value.kind is Kind.BINARY and value.index == 1
    with pytest.raises(ConfigError, match="either a 'value' or a 'body' column, not both"):
        plan_columns(schema(("value", StringType()), ("body", BinaryType())), OPTS)


def test_missing_value_and_missing_routing_key() -> None:
    with pytest.raises(ConfigError) as info:
        plan_columns(schema(("message_id", StringType())), SinkOptions(url=URL))
    text = str(info.value)
    assert "a 'value' (or 'body') column of type string or binary is required" in text
    assert "no routing key: add a routing_key column or the routingKey option" in text


def test_unknown_column_is_rejected_with_a_suggestion_unless_ignored() -> None:
    typo = schema(("value", StringType()), ("routingkey", StringType()))
    with pytest.raises(ConfigError) as info:
        plan_columns(typo, OPTS)
    assert "unknown column 'routingkey' (did you mean 'routing_key'?)" in str(info.value)
    plan = plan_columns(typo, SinkOptions(url=URL, routing_key="q", ignore_unknown_columns=True))
    assert plan.ignored == ("routingkey",) and plan.get("routing_key") is None


def test_column_types_are_checked() -> None:
    bad = schema(
        ("value", IntegerType()),
        ("priority", StringType()),
        ("timestamp", LongType()),
        ("routing_key", BinaryType()),
    )
    with pytest.raises(ConfigError) as info:
        plan_columns(bad, OPTS)
    text = str(info.value)
    assert "column 'value' has type int, expected binary or string" in text
    assert "column 'priority' has type string, expected integer" in text
    assert "column 'timestamp' has type bigint, expected timestamp or timestamp_ntz" in text
    assert "column 'routing_key' has type binary, expected string" in text


def test_headers_shapes() -> None:
    kafka = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    plan = plan_columns(schema(("value", StringType()), ("headers", kafka)), OPTS)
    headers = plan.get("headers")
    assert headers is not None and headers.kind is Kind.HEADER_LIST
    assert headers.header_values is Kind.BINARY
    as_map = MapType(StringType(), TimestampType())
    plan = plan_columns(schema(("value", StringType()), ("headers", as_map)), OPTS)
    headers = plan.get("headers")
    assert headers is not None and headers.kind is Kind.HEADER_MAP
    with pytest.raises(ConfigError, match="cast floating point to string or decimal"):
        plan_columns(
            schema(("value", StringType()), ("headers", MapType(StringType(), DoubleType()))),
            OPTS,
        )
    with pytest.raises(ConfigError, match="column 'headers' has type map<int,string>"):
        plan_columns(
            schema(("value", StringType()), ("headers", MapType(IntegerType(), StringType()))),
            OPTS,
        )


# -- data source entry points (driver side, no session) ------------------------------------


def test_writer_refuses_overwrite_and_validates_before_tasks() -> None:
    source = AmqpDataSource({"url": URL, "routingkey": "q"})
    with pytest.raises(ConfigError, match=r"only append is supported, use \.mode\('append'\)"):
        source.writer(schema(("value", StringType())), overwrite=True)
    with pytest.raises(ConfigError, match="unknown column 'x'"):
        source.writer(schema(("value", StringType()), ("x", StringType())), overwrite=False)


def test_writers_hold_only_picklable_options_and_schema() -> None:
    source = AmqpDataSource({"url": URL, "routingkey": "q", "checkpointlocation": "/ck"})
    sch = schema(("value", StringType()))
    stream = source.streamWriter(sch, overwrite=False)
    assert isinstance(stream, AmqpStreamWriter)
    batch = AmqpDataSource({"url": URL, "routingkey": "q"}).writer(sch, overwrite=False)
    assert isinstance(batch, AmqpBatchWriter)
    copy = pickle.loads(pickle.dumps(batch))
    assert copy.options == batch.options and copy.schema == sch
    assert AmqpDataSource.name() == "amqp"
