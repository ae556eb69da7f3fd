"""What the sample history records and how a range renders it (sans-IO, times passed in).

`record` runs after each rate sample (amqpd/engine/rates.py): per queue its lengths and
message counters, per exchange its publish counters, per connection its octet counters,
and the node's totals, into ``broker.statistics.history`` (amqpd/model/history.py).

`details` renders one range of one object as RabbitMQ's management API does
(rabbit_mgmt_stats:format_range): for each field a ``{"samples": [{"sample", "timestamp"},
...], "avg_rate", "avg"}`` mapping, samples newest first, ``sample`` the queue length or
the cumulative counter at that time, ``avg_rate`` the change per second across the samples
and ``avg`` their mean (both only with two samples or more, as RabbitMQ). The caller merges
it into the item's existing ``*_details`` (which keep their instant ``rate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from amqpd.engine.client_inventory import open_connections
from amqpd.model.broker import Broker
from amqpd.model.history import Series

# the values recorded per kind of object, in order
QUEUE_FIELDS: Final = (
    "messages_ready",
    "messages_unacknowledged",
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
)
EXCHANGE_FIELDS: Final = ("publish_in", "publish_out")
CONNECTION_FIELDS: Final = ("recv_oct", "send_oct")
NODE_FIELDS: Final = (
    "messages_ready",
    "messages_unacknowledged",
    "publish",
    "confirm",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
    "return_unroutable",
    "drop_unroutable",
)
_NODE_COUNTERS: Final = NODE_FIELDS[2:]
_DELIVER_GET: Final = ("deliver", "deliver_no_ack", "get", "get_no_ack")

Wanted = dict[str, tuple[int, ...]]  # output name -> the indexes summed into it


def _wanted(fields: tuple[str, ...], names: tuple[str, ...]) -> Wanted:
    wanted: Wanted = {name: (fields.index(name),) for name in names}
    if "deliver" in names:
        wanted["deliver_get"] = tuple(fields.index(name) for name in _DELIVER_GET)
    return wanted


LENGTHS: Final[Wanted] = {
    "messages_ready": (0,),
    "messages_unacknowledged": (1,),
    "messages": (0, 1),
}
QUEUE_RATES: Final = _wanted(QUEUE_FIELDS, QUEUE_FIELDS[2:])
NODE_RATES: Final = _wanted(NODE_FIELDS, _NODE_COUNTERS)
EXCHANGE_RATES: Final = _wanted(EXCHANGE_FIELDS, EXCHANGE_FIELDS)
CONNECTION_RATES: Final = _wanted(CONNECTION_FIELDS, CONNECTION_FIELDS)


def record(broker: Broker, now: float) -> None:
    """Record every object's values at ``now`` (unix seconds)."""
    history = broker.statistics.history
    history.begin(int(now * 1000))
    for connection in open_connections(broker):
        io = connection.stats
        history.record(connection, (io.recv_oct, io.send_oct))
    for host in broker.vhosts.values():
        for exchange in host.exchanges.values():
            ex = exchange.stats
            history.record(exchange, (ex.publish_in, ex.publish_out))
        for queue in host.queues.values():
            s = queue.stats  # in QUEUE_FIELDS order, spelt out: this runs for every queue
            ready, unacked = s.last_depth or (0, 0)
            values = (ready, unacked, s.publish, s.deliver, s.deliver_no_ack, s.get)
            history.record(queue, (*values, s.get_no_ack, s.get_empty, s.redeliver, s.ack))
    statistics = broker.statistics
    ready, unacked = statistics.last_depth or (0, 0)
    totals = statistics.totals
    history.record_node((ready, unacked, *(getattr(totals, name) for name in _NODE_COUNTERS)))
    history.end()


@dataclass(frozen=True, slots=True)
class Range:
    """A request's range: points every ``incr`` ms from ``last`` back to ``first``."""

    first: int
    last: int
    incr: int


def details(
    broker: Broker, series: Series | None, span: Range, width: int, wanted: Wanted
) -> dict[str, dict[str, Any]]:
    """``{name: {"samples", "avg_rate", "avg"}}`` for each wanted name (see the module)."""
    points = broker.statistics.history.points(series, span.first, span.last, span.incr, width)
    out: dict[str, dict[str, Any]] = {}
    for name, indexes in wanted.items():
        samples = [
            {"sample": sum(values[i] for i in indexes), "timestamp": timestamp}
            for timestamp, values in points
        ]
        item: dict[str, Any] = {"samples": samples}
        if len(samples) > 1:
            newest, oldest = samples[0], samples[-1]
            elapsed = newest["timestamp"] - oldest["timestamp"]
            item["avg_rate"] = (newest["sample"] - oldest["sample"]) * 1000 / elapsed
            item["avg"] = sum(sample["sample"] for sample in samples) / len(samples)
        out[name] = item
    return out
