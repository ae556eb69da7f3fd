"""Turn one DataFrame row into one AMQP message (exchange, routing key, body, properties).

Pure: no Spark and no sockets. Values arrive as PySpark gives them to a Python data source
writer: ``str``, ``bytes``/``bytearray``, ``int``, ``bool``, ``Decimal``, naive ``datetime``
(local wall time for ``timestamp``, UTC wall time for ``timestamp_ntz``), ``dict`` for maps and
lists of ``Row`` for arrays of structs. A null property column leaves the property unset.
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pika
import pika.data

from interop.spark.columns import STRING_PROPERTIES, Column, ColumnPlan, Kind
from interop.spark.errors import RowError
from interop.spark.message import OutgoingMessage
from interop.spark.options import SinkOptions

__all__ = ["MessageBuilder", "content_id"]


class MessageBuilder:
    """Builds messages from rows of one partition.

    Args:
        plan: The recognised columns.
        options: The sink options (routing overrides, delivery mode, message-id mode).
        id_prefix: Prefix of ``deterministic`` message ids; the builder appends
            ``-{row index}``.
    """

    def __init__(self, plan: ColumnPlan, options: SinkOptions, id_prefix: str) -> None:
        self._options = options
        self._id_prefix = id_prefix
        value = plan.get("value")
        assert value is not None, "plan_columns guarantees a value column"
        self._value = value.index
        self._value_is_text = value.kind is Kind.STRING
        self._exchange = _index(plan, "exchange") if options.exchange is None else None
        self._routing_key = _index(plan, "routing_key") if options.routing_key is None else None
        self._message_id = plan.get("message_id")
        self._properties: list[tuple[str, int, Callable[[Any], Any]]] = []
        for role in (*STRING_PROPERTIES, "priority", "expiration", "timestamp", "headers"):
            column = plan.get(role)
            if column is not None:
                self._properties.append((role, column.index, _converter(column)))
        delivery_mode = plan.get("delivery_mode")
        self._delivery_mode = None if delivery_mode is None else delivery_mode.index

    def build(self, row: Sequence[Any], index: int) -> OutgoingMessage:
        """Map ``row`` (the ``index``-th of its partition) to a message.

        Raises:
            RowError: A value cannot be sent (null routing key, priority out of range…).
        """
        raw = row[self._value]
        if raw is None:
            body = b""
        elif self._value_is_text:
            body = raw.encode()
        else:
            body = raw if type(raw) is bytes else bytes(raw)
        exchange = self._options.exchange
        if exchange is None:
            exchange = "" if self._exchange is None else (row[self._exchange] or "")
        routing_key = self._options.routing_key
        if routing_key is None:
            routing_key = row[self._routing_key] if self._routing_key is not None else None
            if routing_key is None:
                raise RowError(
                    f"row {index}: null routing_key; fill the column or set the routingKey option"
                )
        props: dict[str, Any] = {}
        try:
            for role, position, convert in self._properties:
                value = row[position]
                if value is not None:
                    props[role] = convert(value)
            props["delivery_mode"] = self._delivery(row)
        except RowError as exc:
            raise RowError(f"row {index}: {exc}") from None
        message_id = self._id(row, index)
        if message_id is None and self._options.message_id_mode == "hash":
            message_id = content_id(exchange, routing_key, body)
        if message_id is not None:
            props["message_id"] = message_id
        return OutgoingMessage(
            exchange, routing_key, body, pika.BasicProperties(**props), message_id
        )

    def _delivery(self, row: Sequence[Any]) -> int:
        if self._delivery_mode is not None:
            value = row[self._delivery_mode]
            if value is not None:
                if value not in (1, 2):
                    raise RowError(f"delivery_mode {value} is neither 1 nor 2")
                return int(value)
        return self._options.delivery_mode

    def _id(self, row: Sequence[Any], index: int) -> str | None:
        if self._message_id is not None:
            value = row[self._message_id.index]
            if value is not None or self._options.message_id_mode == "column":
                return None if value is None else str(value)
        if self._options.message_id_mode == "deterministic":
            return f"{self._id_prefix}-{index}"
        if self._options.message_id_mode == "uuid":
            return str(uuid.uuid4())
        return None


def content_id(exchange: str, routing_key: str, body: bytes) -> str:
    """The ``hash`` message id: derived from the message alone, so a re-run of the same job
    (or any other writer of the same data) produces the same id.

    SHA-256 over the length-prefixed exchange, routing key and body; 32 hex digits (128 bits)
    after ``sha256:``. Two rows with the same exchange, routing key and body get the same id,
    so a deduplicating queue keeps only the first of them.
    """
    digest = hashlib.sha256()
    for part in (exchange.encode(), routing_key.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return "sha256:" + digest.hexdigest()[:32]


def _index(plan: ColumnPlan, role: str) -> int | None:
    column = plan.get(role)
    return None if column is None else column.index


def _converter(column: Column) -> Callable[[Any], Any]:
    if column.role == "priority":
        return _priority
    if column.role == "expiration":
        return _expiration
    if column.role == "timestamp":
        return _epoch_ntz if column.kind is Kind.TIMESTAMP_NTZ else _epoch
    if column.role == "headers":
        assert column.header_values is not None
        value = _HEADER_VALUE[column.header_values]
        return _map_headers(value) if column.kind is Kind.HEADER_MAP else _list_headers(value)
    return str


def _priority(value: int) -> int:
    if not 0 <= value <= 255:
        raise RowError(f"priority {value} is outside 0..255")
    return value


def _expiration(value: str | int) -> str:
    if isinstance(value, int) and value < 0:
        raise RowError(f"expiration {value} is negative")
    return str(value)


def _epoch(value: datetime) -> int:
    """Seconds since the epoch of a ``timestamp`` (naive local time, or aware)."""
    return math.floor(value.timestamp())


def _epoch_ntz(value: datetime) -> int:
    """Seconds since the epoch of a ``timestamp_ntz``, read as UTC wall time."""
    return math.floor(value.replace(tzinfo=UTC).timestamp())


def _as_bytes(value: bytes | bytearray) -> bytes:
    return bytes(value)


def _aware(value: datetime) -> datetime:
    """pika encodes datetimes with ``utctimetuple()``, which reads naive values as UTC."""
    return value.astimezone(UTC)


def _aware_ntz(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def _decimal(value: Decimal) -> Decimal:
    try:
        pika.data.encode_value([], value)
    except (struct.error, OverflowError, ValueError) as exc:
        raise RowError(
            f"header decimal {value} does not fit an AMQP decimal (scale 0..255, "
            f"32-bit unscaled value): {exc}"
        ) from None
    return value


def _same(value: Any) -> Any:
    return value


_HEADER_VALUE: dict[Kind, Callable[[Any], Any]] = {
    Kind.STRING: _same,
    Kind.INTEGER: _same,
    Kind.BOOLEAN: _same,
    Kind.BINARY: _as_bytes,
    Kind.DECIMAL: _decimal,
    Kind.TIMESTAMP: _aware,
    Kind.TIMESTAMP_NTZ: _aware_ntz,
}


def _map_headers(convert: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    def headers(value: dict[str, Any]) -> dict[str, Any]:
        return {k: None if v is None else convert(v) for k, v in value.items()}

    return headers


def _list_headers(convert: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    """Kafka-shaped headers: a list of (key, value) structs; a repeated key keeps the last."""

    def headers(value: list[Any]) -> dict[str, Any]:
        table: dict[str, Any] = {}
        for entry in value:
            if entry is None:
                continue
            key, item = entry[0], entry[1]
            if key is None:
                raise RowError("a header has a null key")
            table[key] = None if item is None else convert(item)
        return table

    return headers
