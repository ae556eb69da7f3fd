"""The DataFrame columns the sink understands, checked against the schema on the driver.

Kafka-style: ``value`` (or its alias ``body``) is required; ``routing_key``, ``exchange``,
``headers`` and columns named like AMQP basic properties are optional. Unknown columns are an
error unless ``ignoreUnknownColumns`` is set, so a typo such as ``routingkey`` is caught before
any task runs.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from interop.spark.errors import ConfigError
from interop.spark.options import SinkOptions

__all__ = ["Column", "ColumnPlan", "Kind", "plan_columns"]


class Kind(enum.Enum):
    """What a Spark type becomes on the AMQP side."""

    STRING = "string"
    BINARY = "binary"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    DECIMAL = "decimal"
    TIMESTAMP = "timestamp"
    TIMESTAMP_NTZ = "timestamp_ntz"
    FLOAT = "float"
    HEADER_MAP = "map<string, …>"
    HEADER_LIST = "array<struct<key: string, value: …>>"


STRING_PROPERTIES = (
    "correlation_id",
    "content_type",
    "content_encoding",
    "type",
    "app_id",
    "user_id",
    "reply_to",
)
_TEXT = frozenset({Kind.STRING})
ACCEPTED: dict[str, frozenset[Kind]] = {
    "value": frozenset({Kind.STRING, Kind.BINARY}),
    "routing_key": _TEXT,
    "exchange": _TEXT,
    "headers": frozenset({Kind.HEADER_MAP, Kind.HEADER_LIST}),
    "message_id": frozenset({Kind.STRING, Kind.INTEGER}),
    **dict.fromkeys(STRING_PROPERTIES, _TEXT),
    "delivery_mode": frozenset({Kind.INTEGER}),
    "priority": frozenset({Kind.INTEGER}),
    "expiration": frozenset({Kind.STRING, Kind.INTEGER}),
    "timestamp": frozenset({Kind.TIMESTAMP, Kind.TIMESTAMP_NTZ}),
}
KNOWN_COLUMNS = ("body", *ACCEPTED)
MAP_HEADER_VALUES = frozenset(
    {
        Kind.STRING,
        Kind.BINARY,
        Kind.INTEGER,
        Kind.BOOLEAN,
        Kind.DECIMAL,
        Kind.TIMESTAMP,
        Kind.TIMESTAMP_NTZ,
    }
)
LIST_HEADER_VALUES = frozenset({Kind.STRING, Kind.BINARY})

_SCALARS: tuple[tuple[type[DataType], Kind], ...] = (
    (StringType, Kind.STRING),
    (BinaryType, Kind.BINARY),
    (ByteType, Kind.INTEGER),
    (ShortType, Kind.INTEGER),
    (IntegerType, Kind.INTEGER),
    (LongType, Kind.INTEGER),
    (BooleanType, Kind.BOOLEAN),
    (DecimalType, Kind.DECIMAL),
    (TimestampType, Kind.TIMESTAMP),
    (TimestampNTZType, Kind.TIMESTAMP_NTZ),
    (FloatType, Kind.FLOAT),
    (DoubleType, Kind.FLOAT),
)


@dataclass(frozen=True, slots=True)
class Column:
    """One recognised input column.

    Attributes:
        role: The AMQP role (``value`` for both ``value`` and ``body``).
        index: Position of the column in the row.
        kind: How its values are converted.
        header_values: For ``headers``: the kind of the header values.
    """

    role: str
    index: int
    kind: Kind
    header_values: Kind | None = None


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """The recognised columns of a schema, by role.

    Attributes:
        columns: Recognised columns keyed by role.
        ignored: Unknown column names skipped because of ``ignoreUnknownColumns``.
    """

    columns: dict[str, Column]
    ignored: tuple[str, ...] = ()

    def get(self, role: str) -> Column | None:
        """The column playing ``role``, or None."""
        return self.columns.get(role)


def plan_columns(schema: StructType, options: SinkOptions) -> ColumnPlan:
    """Check ``schema`` against the sink's column contract.

    Args:
        schema: The DataFrame schema Spark passes to ``writer()``.
        options: The parsed options (routing options and ``ignoreUnknownColumns``).

    Returns:
        The columns to use.

    Raises:
        ConfigError: Listing every unknown, duplicated or mistyped column, a missing
            ``value`` column or a missing routing key.
    """
    problems: list[str] = []
    columns: dict[str, Column] = {}
    ignored: list[str] = []
    for index, field in enumerate(schema.fields):
        role = "value" if field.name == "body" else field.name
        if role not in ACCEPTED:
            if options.ignore_unknown_columns:
                ignored.append(field.name)
            else:
                problems.append(_unknown(field.name))
            continue
        if role in columns:
            problems.append("give either a 'value' or a 'body' column, not both")
            continue
        column = _typed(role, field.name, index, field.dataType, problems)
        if column is not None:
            columns[role] = column
    if not any(field.name in ("value", "body") for field in schema.fields):
        problems.append("a 'value' (or 'body') column of type string or binary is required")
    if options.routing_key is None and "routing_key" not in columns:
        problems.append("no routing key: add a routing_key column or the routingKey option")
    if problems:
        raise ConfigError("amqp sink: " + "; ".join(problems))
    return ColumnPlan(columns, tuple(ignored))


def kind_of(data_type: DataType) -> Kind | None:
    """The ``Kind`` of a scalar Spark type, or None when the sink has no use for it."""
    for spark_type, kind in _SCALARS:
        if isinstance(data_type, spark_type):
            return kind
    return None


def _typed(
    role: str, name: str, index: int, data_type: DataType, problems: list[str]
) -> Column | None:
    if isinstance(data_type, MapType):
        return _header_map(role, name, index, data_type, problems)
    if isinstance(data_type, ArrayType):
        return _header_list(role, name, index, data_type, problems)
    kind = kind_of(data_type)
    if kind in ACCEPTED[role]:
        assert kind is not None
        return Column(role, index, kind)
    problems.append(_mistyped(name, data_type, ACCEPTED[role]))
    return None


def _header_map(
    role: str, name: str, index: int, data_type: MapType, problems: list[str]
) -> Column | None:
    value_kind = kind_of(data_type.valueType)
    if role != "headers" or not isinstance(data_type.keyType, StringType):
        problems.append(_mistyped(name, data_type, ACCEPTED[role]))
    elif value_kind not in MAP_HEADER_VALUES:
        problems.append(
            f"column 'headers': map values of type {data_type.valueType.simpleString()} "
            "cannot be sent (AMQP field tables via pika take string, binary, boolean, "
            "integer, decimal and timestamp values; cast floating point to string or decimal)"
        )
    else:
        return Column(role, index, Kind.HEADER_MAP, value_kind)
    return None


def _header_list(
    role: str, name: str, index: int, data_type: ArrayType, problems: list[str]
) -> Column | None:
    element = data_type.elementType
    if role == "headers" and isinstance(element, StructType):
        names = [f.name for f in element.fields]
        if names == ["key", "value"] and isinstance(element.fields[0].dataType, StringType):
            value_kind = kind_of(element.fields[1].dataType)
            if value_kind in LIST_HEADER_VALUES:
                return Column(role, index, Kind.HEADER_LIST, value_kind)
    problems.append(_mistyped(name, data_type, ACCEPTED[role]))
    return None


def _mistyped(name: str, data_type: DataType, accepted: frozenset[Kind]) -> str:
    wanted = " or ".join(sorted(kind.value for kind in accepted))
    return f"column {name!r} has type {data_type.simpleString()}, expected {wanted}"


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), KNOWN_COLUMNS, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown column {name!r}{hint}; known columns: {', '.join(KNOWN_COLUMNS)} "
        "(or set ignoreUnknownColumns=true)"
    )
