"""RabbitMQ's history query parameters (rabbit_mgmt_util:range): ``lengths_age`` /
``lengths_incr`` (queue lengths), ``msg_rates_age`` / ``msg_rates_incr`` (message
counters) and ``data_rates_age`` / ``data_rates_incr`` (connection octets), in seconds.

With both of a pair, the items of that endpoint get ``samples`` (and ``avg_rate``, ``avg``)
in the matching ``*_details`` (amqpd/engine/history.py), e.g.
``messages_details.samples`` and ``message_stats.publish_details.samples``. A missing or
non-integer value means no range (as RabbitMQ); age or incr not positive, or more than 500
points (age / incr), is 400 "Invalid range parameters: age A, incr I". The last point is
now rounded down to a multiple of incr; the history kept is bounded (ten minutes), so an
older part of a longer range is left out rather than invented.
"""

from __future__ import annotations

import time
from typing import Any, Final

from amqpd.engine import client_inventory, history
from amqpd.engine.history import Range, Wanted
from amqpd.model.history import Series
from amqpd.shell.management.context import Call
from amqpd.shell.management.errors import bad_request

MAX_POINTS: Final = 500  # RabbitMQ's ?MAX_RANGE

Item = dict[str, Any]


def _int(call: Call, name: str) -> int | None:
    raw = call.query(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def parse(call: Call, prefix: str) -> Range | None:
    """The ``{prefix}_age`` / ``{prefix}_incr`` range of the request, if any."""
    age, incr = _int(call, f"{prefix}_age"), _int(call, f"{prefix}_incr")
    if age is None or incr is None:
        return None
    if age <= 0 or incr <= 0 or age // incr > MAX_POINTS:
        raise bad_request(f"Invalid range parameters: age {age}, incr {incr}")
    incr_ms = incr * 1000
    last = int(time.time() * 1000) // incr_ms * incr_ms
    return Range(first=last - age * 1000, last=last, incr=incr_ms)


def _merge(target: Item, found: dict[str, Item]) -> None:
    for name, details in found.items():
        target.setdefault(f"{name}_details", {}).update(details)


def _add(
    call: Call,
    item: Item,
    series: Series | None,
    width: int,
    lengths: tuple[Range, Wanted] | None,
    rates: tuple[Range, Wanted] | None,
    *,
    data: bool = False,
) -> None:
    broker = call.broker
    if lengths is not None:
        _merge(item, history.details(broker, series, lengths[0], width, lengths[1]))
    if rates is not None:
        found = history.details(broker, series, rates[0], width, rates[1])
        _merge(item if data else item.setdefault("message_stats", {}), found)


def _pair(span: Range | None, wanted: Wanted) -> tuple[Range, Wanted] | None:
    return (span, wanted) if span is not None else None


def queues(call: Call, items: list[Item]) -> list[Item]:
    """Queue items with the lengths and message-rate samples asked for."""
    lengths = _pair(parse(call, "lengths"), history.LENGTHS)
    rates = _pair(parse(call, "msg_rates"), history.QUEUE_RATES)
    if lengths is None and rates is None:
        return items
    recorded = call.broker.statistics.history
    width = len(history.QUEUE_FIELDS)
    for item in items:
        host = call.broker.vhosts.get(item["vhost"])
        queue = host.queues.get(item["name"]) if host is not None else None
        series = recorded.series(queue) if queue is not None else None
        _add(call, item, series, width, lengths, rates)
    return items


def exchanges(call: Call, items: list[Item]) -> list[Item]:
    """Exchange items with the message-rate samples asked for."""
    rates = _pair(parse(call, "msg_rates"), history.EXCHANGE_RATES)
    if rates is None:
        return items
    recorded = call.broker.statistics.history
    width = len(history.EXCHANGE_FIELDS)
    for item in items:
        host = call.broker.vhosts.get(item["vhost"])
        exchange = host.exchanges.get(item["name"]) if host is not None else None
        series = recorded.series(exchange) if exchange is not None else None
        _add(call, item, series, width, None, rates)
    return items


def connections(call: Call, items: list[Item]) -> list[Item]:
    """Connection items with the data-rate samples asked for."""
    rates = _pair(parse(call, "data_rates"), history.CONNECTION_RATES)
    if rates is None:
        return items
    recorded = call.broker.statistics.history
    width = len(history.CONNECTION_FIELDS)
    by_name = {
        client_inventory.connection_name(connection): connection
        for connection in client_inventory.open_connections(call.broker)
    }
    for item in items:
        connection = by_name.get(item["name"])
        series = recorded.series(connection) if connection is not None else None
        _add(call, item, series, width, None, rates, data=True)
    return items


def overview(call: Call, item: Item) -> Item:
    """The overview with the node's queue-total and message-rate samples asked for (for
    monitoring users and administrators: the node's totals are theirs to see)."""
    lengths = _pair(parse(call, "lengths"), history.LENGTHS)
    rates = _pair(parse(call, "msg_rates"), history.NODE_RATES)
    if not call.principal.is_monitor:
        return item
    series = call.broker.statistics.history.node
    width = len(history.NODE_FIELDS)
    _add(call, item.setdefault("queue_totals", {}), series, width, lengths, None)
    _add(call, item, series, width, None, rates)
    return item
