"""The numbers a Prometheus scrape reports, read from the core (sans-IO).

RabbitMQ's rabbitmq_prometheus reads its metrics from tables named after what they hold
(``queue_coarse_metrics``, ``channel_metrics``, ``connection_churn_metrics`` ...): one row
per object, each row a set of values. `table` returns the same rows for this broker, one
`Row` (labels, values) per queue, channel or connection, or a single unlabelled row for the
node-wide tables. The shell's exporter (amqpd/shell/metrics.py) names the values, sums the
rows for the aggregated ``/metrics`` and keeps them apart for ``/metrics/per-object``.

Everything here is one pass over the objects at scrape time: the hot path only keeps the
integer counters of model/statistics.py.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from amqpd.engine.channel import Channel
from amqpd.engine.channel_modes import Mode
from amqpd.engine.client_inventory import channel_name, connection_name, open_connections
from amqpd.engine.connection import Connection
from amqpd.engine.inventory import unacked_by_queue
from amqpd.engine.node_inventory import node_totals
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample


@dataclass(slots=True)
class Row:
    """One object's values in a table (labels empty for node-wide tables)."""

    labels: dict[str, str]
    values: dict[str, float]


_Reader = Callable[[Broker, NodeSample, Collection[str] | None], Iterator[Row]]


def _churn(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    churn = broker.statistics.churn
    yield Row(
        {},
        {
            "connections_opened": churn.connections_opened,
            "connections_closed": churn.connections_closed,
            "channels_opened": churn.channels_opened,
            "channels_closed": churn.channels_closed,
            "queues_declared": churn.queues_declared,
            "queues_created": churn.queues_created,
            "queues_deleted": churn.queues_deleted,
        },
    )


def _auth(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    churn = broker.statistics.churn
    yield Row(
        {"protocol": "amqp091"},
        {
            "attempts": churn.auth_succeeded + churn.auth_failed,
            "succeeded": churn.auth_succeeded,
            "failed": churn.auth_failed,
        },
    )


def _node_coarse(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    yield Row(
        {},
        {
            "fd_used": node.fd_used,
            "sockets_used": node.sockets_used,
            "mem_used": node.mem_used,
            "disk_free": node.disk_free,
        },
    )


def _node(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    yield Row(
        {},
        {
            "fd_total": node.fd_total,
            "sockets_total": node.sockets_total,
            "mem_limit": node.mem_limit,
            "disk_free_limit": node.disk_free_limit,
            "uptime": node.uptime / 1000,
        },
    )


def _queues(
    broker: Broker, vhosts: Collection[str] | None
) -> Iterator[tuple[dict[str, str], dict[str, float]]]:
    unacked = unacked_by_queue(broker)
    for host in list(broker.vhosts.values()):
        if vhosts is not None and host.name not in vhosts:
            continue
        for queue in list(host.queues.values()):
            held, held_bytes = unacked.get(queue, (0, 0))
            ready, ready_bytes = queue.message_count, queue.ready_bytes  # streams too
            utilisation = queue.stats.utilisation
            held_where = queue.residency  # counters kept by the queue
            yield (
                {"vhost": host.name, "queue": queue.name},
                {
                    "messages_ready": ready,
                    "messages_unacknowledged": held,
                    "messages": ready + held,
                    "consumers": len(queue.consumers),
                    "consumer_utilisation": utilisation if utilisation is not None else 0.0,
                    "message_bytes": ready_bytes + held_bytes,
                    "message_bytes_ready": ready_bytes,
                    "message_bytes_unacknowledged": held_bytes,
                    # paged out: ready messages whose body is in the store only
                    "messages_ram": ready + held - held_where.paged_out,
                    "message_bytes_ram": ready_bytes + held_bytes - held_where.paged_out_bytes,
                    "messages_ready_ram": ready - held_where.paged_out,
                    "messages_unacknowledged_ram": held,
                    "messages_persistent": held_where.persistent,
                    "message_bytes_persistent": held_where.persistent_bytes,
                    "messages_paged_out": held_where.paged_out,
                    "message_bytes_paged_out": held_where.paged_out_bytes,
                },
            )


def _queue_rows(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    for labels, values in _queues(broker, vhosts):
        yield Row(labels, values)


def _connections(broker: Broker, vhosts: Collection[str] | None) -> Iterator[Connection]:
    """The open connections, of ``vhosts`` only when given."""
    for connection in open_connections(broker):
        if vhosts is None or connection.vhost.name in vhosts:
            yield connection


def _channels(
    broker: Broker, vhosts: Collection[str] | None
) -> Iterator[tuple[Connection, Channel]]:
    """Every channel of those connections, with its connection."""
    for connection in _connections(broker, vhosts):
        for channel in list(connection.channels.values()):
            yield connection, channel


def _channel(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    for connection, channel in _channels(broker, vhosts):
        unacked, confirm, tx = channel.unacked, channel.confirm, channel.tx
        yield Row(
            {"channel": channel_name(channel, connection)},
            {
                "consumer_count": len(channel.consumers),
                "messages_unacknowledged": len(unacked),
                "messages_unconfirmed": confirm.unconfirmed() if confirm is not None else 0,
                "messages_uncommitted": len(tx.publishes) if tx is not None else 0,
                "acks_uncommitted": (
                    sum(len(r) for r, _ in tx.settlements) if tx is not None else 0
                ),
                "prefetch_count": unacked.consumer_prefetch,
                "global_prefetch_count": unacked.channel_prefetch,
            },
        )


def _channel_exchange(
    broker: Broker, node: NodeSample, vhosts: Collection[str] | None
) -> Iterator[Row]:
    for connection, channel in _channels(broker, vhosts):
        stats = channel.stats
        yield Row(
            {"channel": channel_name(channel, connection)},
            {
                "publish": stats.publish,
                "confirm": stats.confirm,
                "return_unroutable": stats.return_unroutable,
                "drop_unroutable": stats.drop_unroutable,
            },
        )


def _channel_queue(
    broker: Broker, node: NodeSample, vhosts: Collection[str] | None
) -> Iterator[Row]:
    for connection, channel in _channels(broker, vhosts):
        stats = channel.stats
        yield Row(
            {"channel": channel_name(channel, connection)},
            {
                "get": stats.get,
                "get_no_ack": stats.get_no_ack,
                "deliver": stats.deliver,
                "deliver_no_ack": stats.deliver_no_ack,
                "redeliver": stats.redeliver,
                "ack": stats.ack,
                "get_empty": stats.get_empty,
            },
        )


def _connection(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    for connection in _connections(broker, vhosts):
        stats = connection.stats
        yield Row(
            {"channel": connection_name(connection)},  # RabbitMQ labels it with its pid
            {
                "recv_oct": stats.recv_oct,
                "send_oct": stats.send_oct,
                "recv_cnt": stats.recv_cnt,
                "send_cnt": stats.send_cnt,
                "channels": len(connection.channels),
            },
        )


def _queue_exchange(
    broker: Broker, node: NodeSample, vhosts: Collection[str] | None
) -> Iterator[Row]:
    """Messages routed into queues, per exchange (RabbitMQ keeps them per channel, queue
    and exchange; amqpd counts an exchange's routed copies, ``publish_out``)."""
    for host in list(broker.vhosts.values()):
        if vhosts is not None and host.name not in vhosts:
            continue
        for exchange in list(host.exchanges.values()):
            yield Row(
                {"exchange_vhost": host.name, "exchange": exchange.name},
                {"publish_out": exchange.stats.publish_out},
            )


def _delayed(broker: Broker, node: NodeSample, vhosts: Collection[str] | None) -> Iterator[Row]:
    """Messages each x-delayed-message exchange holds (amqpd's own table)."""
    del node
    for host in list(broker.vhosts.values()):
        if vhosts is not None and host.name not in vhosts:
            continue
        for exchange in list(host.exchanges.values()):
            if exchange.delayed is not None:
                yield Row(
                    {"vhost": host.name, "exchange": exchange.name},
                    {"messages_delayed": exchange.delayed.count},
                )


TABLES: Final[dict[str, _Reader]] = {
    "connection_churn_metrics": _churn,
    "auth_attempt_metrics": _auth,
    "node_coarse_metrics": _node_coarse,
    "node_metrics": _node,
    "queue_coarse_metrics": _queue_rows,
    "queue_metrics": _queue_rows,
    "channel_metrics": _channel,
    "channel_exchange_metrics": _channel_exchange,
    "channel_queue_metrics": _channel_queue,
    "connection_coarse_metrics": _connection,
    "connection_metrics": _connection,
    "channel_queue_exchange_metrics": _queue_exchange,
    "exchange_delayed_metrics": _delayed,
}


def _vhost_status(broker: Broker) -> Iterator[Row]:
    for name in list(broker.vhosts):
        yield Row({"vhost": name}, {"status": 1})  # a vhost here is always running


def _exchanges(broker: Broker) -> Iterator[Row]:
    """Every exchange but the default one and internal ones, as RabbitMQ lists them."""
    for host in list(broker.vhosts.values()):
        for exchange in list(host.exchanges.values()):
            if exchange.name == "" or exchange.internal:
                continue
            yield Row(
                {"vhost": host.name, "exchange": exchange.name, "type": exchange.type_name},
                {"bindings": len(exchange.router), "name": 1},
            )


CLUSTER_TABLES: Final[dict[str, Callable[[Broker], Iterator[Row]]]] = {
    "vhost_status": _vhost_status,
    "exchange_bindings": _exchanges,
    "exchange_names": _exchanges,
}


def cluster_table(broker: Broker, name: str) -> list[Row]:
    """The rows of RabbitMQ's cluster-wide table ``name`` (see `CLUSTER_TABLES`)."""
    return list(CLUSTER_TABLES[name](broker))


def tables(
    broker: Broker, node: NodeSample, names: Iterable[str], vhosts: Collection[str] | None = None
) -> dict[str, list[Row]]:
    """The rows of RabbitMQ's tables ``names`` (see `TABLES`), each distinct reader run
    once (the queue tables share one pass, so do the connection tables); ``vhosts``: only
    objects of these virtual hosts, None: all."""
    read: dict[_Reader, list[Row]] = {}
    out: dict[str, list[Row]] = {}
    for name in names:
        reader = TABLES[name]
        if reader not in read:
            read[reader] = list(reader(broker, node, vhosts))
        out[name] = read[reader]
    return out


@dataclass(slots=True)
class Totals:
    """Node-wide figures: object counts and the global message counters (RabbitMQ's
    ``rabbit_global_counters``, which survive channels and queues)."""

    connections: int
    channels: int
    consumers: int
    queues: int
    publishers: int  # open channels that have published (RabbitMQ counts them so)
    counters: dict[str, int]
    dead_lettered: dict[str, dict[str, int]]  # strategy -> reason -> messages


def totals(broker: Broker) -> Totals:
    """Object counts and message totals now."""
    connections = channels = consumers = publishers = 0
    unconfirmed = 0
    for connection in open_connections(broker):
        connections += 1
        for channel in connection.channels.values():
            channels += 1
            consumers += len(channel.consumers)
            if channel.stats.publish or channel.publish_seq:
                publishers += 1
            if channel.mode is Mode.CONFIRM and channel.confirm is not None:
                unconfirmed += channel.confirm.unconfirmed()
    stats = node_totals(broker)
    unroutable = stats.drop_unroutable + stats.return_unroutable
    counters = {
        "messages_received": stats.publish,
        # every publish on a confirm channel counts one confirm-mode publish
        "messages_received_confirm": stats.confirm,
        "messages_routed": max(0, stats.publish - unroutable),
        "messages_unroutable_dropped": stats.drop_unroutable,
        "messages_unroutable_returned": stats.return_unroutable,
        # confirm-mode publishes no longer waiting (a channel closing with some waiting
        # settles them: they leave the count of those waiting, never re-enter it)
        "messages_confirmed": max(0, stats.confirm - unconfirmed),
        "messages_delivered": stats.deliver_get,
        "messages_delivered_consume_manual_ack": stats.deliver,
        "messages_delivered_consume_auto_ack": stats.deliver_no_ack,
        "messages_delivered_get_manual_ack": stats.get,
        "messages_delivered_get_auto_ack": stats.get_no_ack,
        "messages_get_empty": stats.get_empty,
        "messages_redelivered": stats.redeliver,
        "messages_acknowledged": stats.ack,
    }
    queues = sum(len(host.queues) for host in broker.vhosts.values())
    dead = broker.statistics.dead_letters
    dead_lettered = {"disabled": dict(dead.disabled), "at_most_once": dict(dead.at_most_once)}
    return Totals(connections, channels, consumers, queues, publishers, counters, dead_lettered)
