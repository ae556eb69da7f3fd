"""How RabbitMQ's management API renders the core's values (sans-IO): the message counters
of queues, exchanges and channels with their ``*_details`` rates, field-table values as JSON,
peer addresses split into host and port, and the node's name. Shared by the listings
(amqpd/engine/inventory.py, client_inventory.py, node_inventory.py)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from amqpd.model.broker import Broker
from amqpd.model.statistics import MessageStats

QUEUE_STATS: Final = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
    "deliver_get",
)
CHANNEL_STATS: Final = (
    *QUEUE_STATS,
    "confirm",
    "return_unroutable",
    "drop_unroutable",
)
EXCHANGE_STATS: Final = ("publish_in", "publish_out")


def rate(stats: MessageStats, name: str) -> float:
    if name == "deliver_get":
        return round(
            sum(
                stats.rates.get(n, 0.0) for n in ("deliver", "deliver_no_ack", "get", "get_no_ack")
            ),
            1,
        )
    return stats.rate(name)


_DETAILS: Final = {name: f"{name}_details" for name in (*CHANNEL_STATS, *EXCHANGE_STATS)}


def message_stats(stats: MessageStats, names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sampled = bool(stats.rates)  # an idle object (the usual case) has no rates to round
    for name in names:
        out[name] = getattr(stats, name)
        out[_DETAILS[name]] = {"rate": rate(stats, name) if sampled else 0.0}
    return out


def json_value(value: Any) -> Any:
    """A field table value as RabbitMQ's API renders it (bytes as text, timestamps as
    seconds, decimals as numbers)."""
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        return address, 0


def node_name(broker: Broker) -> str:
    """The node's name, as every item's ``node`` field has it."""
    return broker.statistics.node
