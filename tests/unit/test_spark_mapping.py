"""Spark sink: row → AMQP message mapping (no Spark session, no sockets)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from interop.spark.columns import plan_columns
from interop.spark.errors import RowError
from interop.spark.mapping import MessageBuilder
from interop.spark.options import SinkOptions
from interop.spark.publisher import OutgoingMessage

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def builder(
    fields: Sequence[tuple[str, DataType]], prefix: str = "q1-7-3", **options: Any
) -> MessageBuilder:
    opts = SinkOptions(url=URL, **options)
    sch = StructType([StructField(name, dtype, True) for name, dtype in fields])
    return MessageBuilder(plan_columns(sch, opts), opts, prefix)


def build(
    fields: Sequence[tuple[str, DataType]], row: tuple[Any, ...], index: int = 0, **options: Any
) -> OutgoingMessage:
    return builder(fields, **options).build(row, index)


def test_value_string_binary_and_null() -> None:
    text = [("value", StringType()), ("routing_key", StringType())]
    assert build(text, ("héllo", "q")).body == "héllo".encode()
    assert build(text, (None, "q")).body == b""
    binary = [("body", BinaryType()), ("routing_key", StringType())]
    message = build(binary, (bytearray(b"\x00\xff"), "q"))
    assert message.body == b"\x00\xff" and type(message.body) is bytes


def test_routing_options_override_columns_and_null_exchange_is_default() -> None:
    fields = [("value", StringType()), ("routing_key", StringType()), ("exchange", StringType())]
    message = build(fields, ("v", "rk", "ex"))
    assert (message.exchange, message.routing_key) == ("ex", "rk")
    message = build(fields, ("v", "rk", None))
    assert message.exchange == ""
    message = build(fields, ("v", "rk", "ex"), exchange="opt-ex", routing_key="opt-rk")
    assert (message.exchange, message.routing_key) == ("opt-ex", "opt-rk")
    with pytest.raises(RowError, match="row 41: null routing_key"):
        build(fields, ("v", None, "ex"), index=41)


def test_properties_and_null_means_unset() -> None:
    fields: Sequence[tuple[str, DataType]] = [
        ("value", StringType()),
        ("message_id", LongType()),
        ("correlation_id", StringType()),
        ("content_type", StringType()),
        ("content_encoding", StringType()),
        ("type", StringType()),
        ("app_id", StringType()),
        ("user_id", StringType()),
        ("reply_to", StringType()),
        ("priority", IntegerType()),
        ("expiration", LongType()),
        ("delivery_mode", IntegerType()),
    ]
    row = (b"v", 42, "c", "text/plain", "gzip", "t", "app", "guest", "r", 9, 60000, 1)
    props = build(fields, ("v", *row[1:]), routing_key="q").properties
    assert props.message_id == "42" and props.correlation_id == "c"
    assert props.content_type == "text/plain" and props.content_encoding == "gzip"
    assert props.type == "t" and props.app_id == "app" and props.user_id == "guest"
    assert props.reply_to == "r" and props.priority == 9 and props.expiration == "60000"
    assert props.delivery_mode == 1
    empty = build(fields, ("v", *([None] * 11)), routing_key="q").properties
    assert empty.message_id is None and empty.priority is None and empty.expiration is None
    assert empty.headers is None and empty.delivery_mode == 2  # the option's default


def test_bad_values_name_the_row() -> None:
    fields: Sequence[tuple[str, DataType]] = [
        ("value", StringType()),
        ("priority", IntegerType()),
        ("delivery_mode", IntegerType()),
        ("expiration", LongType()),
    ]
    b = builder(fields, routing_key="q")
    with pytest.raises(RowError, match=r"row 7: priority 300 is outside 0\.\.255"):
        b.build(("v", 300, None, None), 7)
    with pytest.raises(RowError, match="row 8: delivery_mode 3 is neither 1 nor 2"):
        b.build(("v", None, 3, None), 8)
    with pytest.raises(RowError, match="row 9: expiration -1 is negative"):
        b.build(("v", None, None, -1), 9)


def test_timestamps_become_epoch_seconds() -> None:
    epoch = 1_700_000_000
    local_naive = datetime.fromtimestamp(epoch)  # how PySpark hands over a timestamp
    props = build(
        [("value", StringType()), ("timestamp", TimestampType())],
        ("v", local_naive),
        routing_key="q",
    ).properties
    assert props.timestamp == epoch
    utc_wall = datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)  # timestamp_ntz
    props = build(
        [("value", StringType()), ("timestamp", TimestampNTZType())],
        ("v", utc_wall),
        routing_key="q",
    ).properties
    assert props.timestamp == epoch


def test_map_headers_convert_binary_timestamps_and_decimals() -> None:
    epoch = 1_700_000_000
    binary = builder(
        [("value", StringType()), ("headers", MapType(StringType(), BinaryType()))], routing_key="q"
    )
    assert binary.build(("v", {"a": bytearray(b"x"), "b": None}), 0).properties.headers == {
        "a": b"x",
        "b": None,
    }
    stamps = builder(
        [("value", StringType()), ("headers", MapType(StringType(), TimestampType()))],
        routing_key="q",
    )
    headers = stamps.build(("v", {"t": datetime.fromtimestamp(epoch)}), 0).properties.headers
    assert headers["t"].timestamp() == epoch and headers["t"].tzinfo is not None
    decimals = builder(
        [("value", StringType()), ("headers", MapType(StringType(), DecimalType(38, 2)))],
        routing_key="q",
    )
    assert decimals.build(("v", {"d": Decimal("12.34")}), 0).properties.headers == {
        "d": Decimal("12.34")
    }
    with pytest.raises(RowError, match=r"row 5: header decimal .* does not fit an AMQP decimal"):
        decimals.build(("v", {"d": Decimal("123456789012.34")}), 5)


def test_kafka_shaped_headers_last_repeated_key_wins() -> None:
    kafka = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", StringType())])
    )
    b = builder([("value", StringType()), ("headers", kafka)], routing_key="q")
    headers = b.build(("v", [("k", "1"), ("k", "2"), ("z", None), None]), 0).properties.headers
    assert headers == {"k": "2", "z": None}
    with pytest.raises(RowError, match="row 3: a header has a null key"):
        b.build(("v", [(None, "1")]), 3)


def test_message_id_modes() -> None:
    with_column = [("value", StringType()), ("message_id", StringType())]
    without = [("value", StringType())]
    assert build(with_column, ("v", "biz-1"), routing_key="q").message_id == "biz-1"
    assert build(with_column, ("v", None), routing_key="q").message_id is None
    assert build(without, ("v",), routing_key="q").message_id is None
    det = builder(without, prefix="query-4-1", routing_key="q", message_id_mode="deterministic")
    message = det.build(("v",), 17)
    assert message.message_id == "query-4-1-17" and message.properties.message_id == "query-4-1-17"
    det_col = builder(with_column, prefix="p", routing_key="q", message_id_mode="deterministic")
    assert det_col.build(("v", "biz"), 1).message_id == "biz"
    assert det_col.build(("v", None), 2).message_id == "p-2"
    random_id = build(without, ("v",), routing_key="q", message_id_mode="uuid").message_id
    assert random_id is not None and len(random_id) == 36


def test_hash_ids_depend_on_the_message_only() -> None:
    """``messageIdMode=hash``: the same row gives the same id in any task, partition, job or
    application (so a re-run deduplicates); a different body, routing key or exchange gives
    another; a ``message_id`` column still wins."""
    fields = [("value", StringType()), ("routing_key", StringType()), ("message_id", StringType())]
    first = builder(fields, prefix="app-1-0", message_id_mode="hash")
    again = builder(fields, prefix="app-2-5", message_id_mode="hash")
    one = first.build(("v", "q", None), 0).message_id
    assert one is not None and one.startswith("sha256:") and len(one) == 7 + 32
    assert again.build(("v", "q", None), 99).message_id == one
    assert first.build(("w", "q", None), 0).message_id != one
    assert first.build(("v", "r", None), 0).message_id != one
    assert first.build(("v", "q", "biz-1"), 0).message_id == "biz-1"
    routed = builder(fields, exchange="x", message_id_mode="hash").build(("v", "q", None), 0)
    assert routed.message_id not in (None, one)
    # length-prefixed parts: moving bytes between routing key and body changes the id
    assert (
        first.build(("bv", "q", None), 0).message_id != first.build(("v", "qb", None), 0).message_id
    )
