"""What a running broker holds, in the shapes of RabbitMQ 3.x's management API (sans-IO).

The management HTTP API, the Prometheus exporter, the dashboard and ``amqpd ctl`` all read
the broker through these functions. Each returns plain JSON-able dicts (or lists of them)
whose field names and value shapes are those of RabbitMQ's ``/api/queues``,
``/api/exchanges``, ``/api/bindings``, ``/api/connections``, ``/api/channels``,
``/api/consumers``, ``/api/overview`` and ``/api/nodes`` items (rabbit_mgmt_format), so
tools written for RabbitMQ read them unchanged. Sorting, paging and column selection are
the caller's business.

Nothing here does I/O or reads a clock: counters are the model's and engine's
(model/statistics.py), rates come from the last `RateSampler.sample`, and what only the
shell can measure (memory, descriptors, disk, uptime, listeners) comes in a `NodeSample`.

Consumer utilisation is sampled, not timed per message: at each sample (every 5 s) a
queue with consumers counts as "utilised" when it could hand a message to one of them at
once (some consumer has credit: prefetch not exhausted, channel flowing, output not over
the write-ahead limit); ``consumer_utilisation`` is the fraction of the last 12 samples
(one minute) that were. RabbitMQ measures the same fraction with timestamps on every
state change; with the default sampling it shows the same steady-state figure.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final

from amqpd import RABBITMQ_VERSION, __version__
from amqpd.engine.channel import Channel, ChannelState, Mode
from amqpd.engine.churn import churn_rates
from amqpd.engine.connection import Connection, State
from amqpd.engine.stream_inventory import stream_consumer_fields, stream_fields
from amqpd.model.broker import Broker
from amqpd.model.exchange import Exchange
from amqpd.model.policies import merge
from amqpd.model.queue import Consumer, Queue
from amqpd.model.statistics import MessageStats, NodeSample
from amqpd.model.vhost import VirtualHost

MANAGEMENT_VERSION: Final = RABBITMQ_VERSION  # the one RabbitMQ version (amqpd/__init__.py)
PRODUCT_NAME: Final = "amqpd"
UTILISATION_WINDOW: Final = 12  # samples (one minute at the default 5 s interval)

_QUEUE_STATS: Final = (
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
_CHANNEL_STATS: Final = (
    *_QUEUE_STATS,
    "confirm",
    "return_unroutable",
    "drop_unroutable",
)
_EXCHANGE_STATS: Final = ("publish_in", "publish_out")


# -- helpers ---------------------------------------------------------------------------------
def _rate(stats: MessageStats, name: str) -> float:
    if name == "deliver_get":
        return round(
            sum(
                stats.rates.get(n, 0.0) for n in ("deliver", "deliver_no_ack", "get", "get_no_ack")
            ),
            1,
        )
    return stats.rate(name)


_DETAILS: Final = {name: f"{name}_details" for name in (*_CHANNEL_STATS, *_EXCHANGE_STATS)}


def _message_stats(stats: MessageStats, names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sampled = bool(stats.rates)  # an idle object (the usual case) has no rates to round
    for name in names:
        out[name] = getattr(stats, name)
        out[_DETAILS[name]] = {"rate": _rate(stats, name) if sampled else 0.0}
    return out


def _json_value(value: Any) -> Any:
    """A field table value as RabbitMQ's API renders it (bytes as text, timestamps as
    seconds, decimals as numbers)."""
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        return address, 0


def _timestamp(unix: float) -> str:
    """RabbitMQ's ``idle_since`` format: ``2024-01-31T12:00:00.000+00:00`` (3.12)."""
    moment = datetime.datetime.fromtimestamp(unix, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def _vhosts(broker: Broker, vhost: str | None) -> list[VirtualHost]:
    if vhost is None:
        return list(broker.vhosts.values())
    found = broker.vhosts.get(vhost)
    return [found] if found is not None else []


def _node(broker: Broker) -> str:
    return broker.statistics.node


def open_connections(broker: Broker) -> Iterator[Connection]:
    """The broker's open client connections (engine Connections)."""
    for connection in list(broker.connections):
        if isinstance(connection, Connection):
            yield connection


def _unacked_by_queue(broker: Broker) -> dict[Queue, tuple[int, int]]:
    """Per queue: deliveries awaiting an ack and their body bytes (they live in channels)."""
    totals: dict[Queue, tuple[int, int]] = {}
    for connection in open_connections(broker):
        for channel in connection.channels.values():
            for record in channel.unacked.records():
                count, size = totals.get(record.queue, (0, 0))
                totals[record.queue] = (count + 1, size + record.entry.message.body_size)
    return totals


def unacked_by_queue(broker: Broker) -> dict[Queue, tuple[int, int]]:
    """Per queue: deliveries awaiting an ack and their body bytes (for the exporter)."""
    return _unacked_by_queue(broker)


# -- names -----------------------------------------------------------------------------------
def connection_name(connection: Connection) -> str:
    """RabbitMQ's connection name: ``"127.0.0.1:54321 -> 127.0.0.1:5672"``."""
    stats = connection.stats
    return f"{connection.peer} -> {stats.host}:{stats.port}"


def channel_name(channel: Channel, connection: Connection) -> str:
    """RabbitMQ's channel name: ``"<connection name> (<number>)"``."""
    return f"{connection_name(connection)} ({channel.number})"


def find_connection(broker: Broker, name: str) -> Connection | None:
    """The open connection called ``name`` (for DELETE /api/connections/{name} and
    ``amqpd ctl close-connection``)."""
    for connection in open_connections(broker):
        if connection_name(connection) == name:
            return connection
    return None


# -- queues ----------------------------------------------------------------------------------
def queues(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/queues`` items (all vhosts, or one)."""
    unacked = _unacked_by_queue(broker)
    return [
        _queue(broker, queue, unacked.get(queue, (0, 0)))
        for host in _vhosts(broker, vhost)
        for queue in list(host.queues.values())
    ]


def queue(broker: Broker, vhost: str, name: str) -> dict[str, Any] | None:
    """One ``/api/queues/{vhost}/{name}`` item, or None."""
    host = broker.vhosts.get(vhost)
    found = host.queues.get(name) if host is not None else None
    if found is None:
        return None
    return _queue(broker, found, _unacked_by_queue(broker).get(found, (0, 0)))


def _queue(broker: Broker, queue: Queue, unacked: tuple[int, int]) -> dict[str, Any]:
    stats = queue.stats
    ready = queue.message_count  # a stream's: every message it keeps
    unacked_count, unacked_bytes = unacked
    node = _node(broker)
    exclusive_consumer = queue.exclusive_consumer
    rates = broker.statistics
    depth = stats.depth_rates
    held = queue.residency  # stored / paged-out ready messages (counters)
    item: dict[str, Any] = {
        "name": queue.name,
        "vhost": queue.vhost_name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive_owner is not None,
        "arguments": _json_value(queue.arguments),
        "type": queue.settings.queue_type,
        "state": "running",
        "node": node,
        "policy": queue.policy.name if queue.policy is not None else None,
        "operator_policy": (
            queue.operator_policy.name if queue.operator_policy is not None else None
        ),
        "effective_policy_definition": merge(queue.policy, queue.operator_policy),
        "messages": ready + unacked_count,
        "messages_ready": ready,
        "messages_unacknowledged": unacked_count,
        "messages_details": {"rate": round(depth.get("messages", 0.0), 1)},
        "messages_ready_details": {"rate": round(depth.get("messages_ready", 0.0), 1)},
        "messages_unacknowledged_details": {
            "rate": round(depth.get("messages_unacknowledged", 0.0), 1)
        },
        "consumers": len(queue.consumers),
        "consumer_capacity": stats.utilisation if stats.utilisation is not None else 0,
        "consumer_utilisation": stats.utilisation,
        "exclusive_consumer_tag": exclusive_consumer.tag if exclusive_consumer else None,
        "single_active_consumer_tag": (
            queue.consumers[0].tag
            if queue.settings.single_active_consumer and queue.consumers
            else None
        ),
        "message_bytes": queue.ready_bytes + unacked_bytes,
        "message_bytes_ready": queue.ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        "message_bytes_ram": queue.ready_bytes + unacked_bytes - held.paged_out_bytes,
        "message_bytes_persistent": held.persistent_bytes,
        "message_bytes_paged_out": held.paged_out_bytes,
        "messages_ram": ready + unacked_count - held.paged_out,
        "messages_persistent": held.persistent,
        "messages_paged_out": held.paged_out,
        "memory": 1024 + 96 * ready + queue.ready_bytes,
        "head_message_timestamp": None,
        "recoverable_slaves": None,
        "reductions": 0,
        "garbage_collection": {},
        "backing_queue_status": {
            "mode": "default",
            "len": ready,
            "version": 1,
            "avg_ingress_rate": _rate(stats, "publish"),
            "avg_egress_rate": _rate(stats, "deliver_get"),
            "avg_ack_ingress_rate": 0.0,
            "avg_ack_egress_rate": _rate(stats, "ack"),
        },
        "message_stats": _message_stats(stats, _QUEUE_STATS),
    }
    item.update(stream_fields(queue))  # segments, offsets (engine/stream_inventory.py)
    if rates.sampled_at is not None and stats.idle_since is not None:
        item["idle_since"] = _timestamp(stats.idle_since)
    owner = queue.exclusive_owner
    if isinstance(owner, Connection):
        host, port = _split_address(owner.peer)
        item["owner_pid_details"] = {
            "name": connection_name(owner),
            "peer_host": host,
            "peer_port": port,
        }
    return item


# -- vhosts ----------------------------------------------------------------------------------
def vhosts(broker: Broker) -> list[dict[str, Any]]:
    """``/api/vhosts`` items: each vhost's definition and its message counts."""
    unacked = _unacked_by_queue(broker)
    node = _node(broker)
    items = []
    for info in broker.access.state.vhosts.values():
        host = broker.vhosts.get(info.name)
        queues_here = list(host.queues.values()) if host is not None else []
        ready = sum(len(q.ready) for q in queues_here)
        unacked_count = sum(unacked.get(q, (0, 0))[0] for q in queues_here)
        stats = MessageStats()
        for q in queues_here:
            stats.add(q.stats)
        items.append(
            {
                "name": info.name,
                "description": info.description,
                "tags": list(info.tags),
                "default_queue_type": "undefined",
                "metadata": {"description": info.description, "tags": list(info.tags)},
                "tracing": False,
                "cluster_state": {node: "running"},
                "messages": ready + unacked_count,
                "messages_details": {"rate": 0.0},
                "messages_ready": ready,
                "messages_ready_details": {"rate": 0.0},
                "messages_unacknowledged": unacked_count,
                "messages_unacknowledged_details": {"rate": 0.0},
                "message_stats": _message_stats(stats, _QUEUE_STATS),
            }
        )
    return items


# -- exchanges and bindings ------------------------------------------------------------------
def exchanges(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/exchanges`` items (the default exchange is listed with name "")."""
    return [
        _exchange(host, exchange)
        for host in _vhosts(broker, vhost)
        for exchange in list(host.exchanges.values())
    ]


def exchange(broker: Broker, vhost: str, name: str) -> dict[str, Any] | None:
    """One ``/api/exchanges/{vhost}/{name}`` item, or None."""
    host = broker.vhosts.get(vhost)
    found = host.exchanges.get(name) if host is not None else None
    return _exchange(host, found) if host is not None and found is not None else None


def _exchange(host: VirtualHost, exchange: Exchange) -> dict[str, Any]:
    item = {
        "name": exchange.name,
        "vhost": host.name,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": _json_value(exchange.arguments),
        "user_who_performed_action": "",
        "policy": exchange.policy.name if exchange.policy is not None else None,
        "message_stats": _message_stats(exchange.stats, _EXCHANGE_STATS),
    }
    if exchange.delayed is not None:  # the delayed message plugin's exchange info item
        item["messages_delayed"] = exchange.delayed.count
    return item


def _quote_binding(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F").replace("~", "%7E")


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    """RabbitMQ's binding ``properties_key`` (rabbit_mgmt_format:pack_binding_props): the
    quoted routing key (``~`` for an empty one without arguments), plus ``~`` and a digest
    of the arguments when there are any (stable across restarts)."""
    if not arguments:
        return _quote_binding(routing_key) if routing_key else "~"
    canonical = json.dumps(_json_value(arguments), sort_keys=True, separators=(",", ":"))
    digest = base64.urlsafe_b64encode(hashlib.sha1(canonical.encode()).digest()[:12]).decode()
    return f"{_quote_binding(routing_key)}~{_quote_binding(digest)}"


def bindings(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/bindings`` items, including the default exchange's implicit binding of every
    queue to its own name, as RabbitMQ lists them."""
    items: list[dict[str, Any]] = []
    for host in _vhosts(broker, vhost):
        for name in list(host.queues):
            items.append(_binding(host.name, "", name, "queue", name, {}))
        for source in list(host.exchanges.values()):
            for destination, key, arguments in source.router.bindings():
                if isinstance(destination, Queue):
                    kind, target = "queue", destination.name
                elif isinstance(destination, Exchange):
                    kind, target = "exchange", destination.name
                else:
                    continue
                items.append(_binding(host.name, source.name, target, kind, key, arguments))
    return items


def find_binding(
    broker: Broker, vhost: str, source: str, kind: str, destination: str, key: str
) -> tuple[str, Mapping[str, Any]] | None:
    """The routing key and (raw) arguments of the binding from exchange ``source`` to the
    ``kind`` ("queue" / "exchange") ``destination`` whose ``properties_key`` is ``key``."""
    host = broker.vhosts.get(vhost)
    exchange = host.exchanges.get(source) if host is not None else None
    if exchange is None:
        return None
    if exchange.is_default:
        queue = host.queues.get(destination) if host is not None else None
        if kind == "queue" and queue is not None and key == properties_key(destination, {}):
            return destination, {}
        return None
    wanted = Queue if kind == "queue" else Exchange
    for target, routing_key, arguments in exchange.router.bindings():
        if (
            isinstance(target, wanted)
            and target.name == destination
            and properties_key(routing_key, arguments) == key
        ):
            return routing_key, arguments
    return None


def _binding(
    vhost: str, source: str, destination: str, kind: str, key: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": kind,
        "routing_key": key,
        "arguments": _json_value(arguments),
        "properties_key": properties_key(key, arguments),
    }


# -- connections, channels, consumers --------------------------------------------------------
def _connection_state(connection: Connection) -> str:
    if connection.state is State.CLOSING or connection.should_close:
        return "closing"
    if connection.paused:
        return "blocked"
    return "running"


def connections(broker: Broker) -> list[dict[str, Any]]:
    """``/api/connections`` items."""
    return [_connection(broker, connection) for connection in open_connections(broker)]


def connection(broker: Broker, name: str) -> dict[str, Any] | None:
    """One ``/api/connections/{name}`` item, or None."""
    found = find_connection(broker, name)
    return _connection(broker, found) if found is not None else None


def _connection(broker: Broker, connection: Connection) -> dict[str, Any]:
    stats = connection.stats
    peer_host, peer_port = _split_address(connection.peer)
    properties = _json_value(connection.client_properties)
    item: dict[str, Any] = {
        "name": connection_name(connection),
        "node": _node(broker),
        "type": "network",
        "state": _connection_state(connection),
        "protocol": "AMQP 0-9-1",
        "auth_mechanism": connection.auth_mechanism,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "vhost": connection.vhost.name,
        "host": stats.host,
        "port": stats.port,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "ssl": stats.ssl,
        "peer_cert_subject": None,
        "peer_cert_issuer": None,
        "peer_cert_validity": None,
        "ssl_protocol": None,
        "ssl_key_exchange": None,
        "ssl_cipher": None,
        "ssl_hash": None,
        "client_properties": properties,
        "connected_at": int(connection.created * 1000),
        "channels": len(connection.channels),
        "channel_max": connection.channel_max,
        "frame_max": connection.frame_max,
        "timeout": connection.heartbeat,
        "recv_oct": stats.recv_oct,
        "recv_oct_details": {"rate": stats.rate("recv_oct")},
        "recv_cnt": stats.recv_cnt,
        "send_oct": stats.send_oct,
        "send_oct_details": {"rate": stats.rate("send_oct")},
        "send_cnt": stats.send_cnt,
        "send_pend": 0,
        "reductions": 0,
        "garbage_collection": {},
    }
    name = properties.get("connection_name")
    if name is not None:  # RabbitMQ has the key only when the client named the connection
        item["user_provided_name"] = name
    return item


def _channel_details(broker: Broker, channel: Channel, connection: Connection) -> dict[str, Any]:
    peer_host, peer_port = _split_address(connection.peer)
    return {
        "name": channel_name(channel, connection),
        "number": channel.number,
        "connection_name": connection_name(connection),
        "peer_host": peer_host,
        "peer_port": peer_port,
        "user": connection.user,
        "node": _node(broker),
    }


def channels(broker: Broker) -> list[dict[str, Any]]:
    """``/api/channels`` items."""
    return [
        _channel(broker, channel, connection)
        for connection in open_connections(broker)
        for channel in list(connection.channels.values())
    ]


def _channel(broker: Broker, channel: Channel, connection: Connection) -> dict[str, Any]:
    peer_host, peer_port = _split_address(connection.peer)
    unacked = channel.unacked
    confirm = channel.confirm
    tx = channel._tx  # the open transaction's buffered work, if any
    if channel.state is not ChannelState.OPEN:
        state = "closing"
    elif not channel.flow_active:
        state = "flow"
    else:
        state = "running"
    return {
        "name": channel_name(channel, connection),
        "number": channel.number,
        "node": _node(broker),
        "connection_details": {
            "name": connection_name(connection),
            "peer_host": peer_host,
            "peer_port": peer_port,
        },
        "vhost": connection.vhost.name,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "state": state,
        "confirm": channel.mode is Mode.CONFIRM,
        "transactional": channel.mode is Mode.TX,
        "prefetch_count": unacked.consumer_prefetch,
        "global_prefetch_count": unacked.channel_prefetch,
        "messages_unacknowledged": len(unacked),
        "messages_unconfirmed": confirm.unconfirmed() if confirm is not None else 0,
        "messages_uncommitted": len(tx.publishes) if tx is not None else 0,
        "acks_uncommitted": sum(len(r) for r, _ in tx.settlements) if tx is not None else 0,
        "pending_raft_commands": 0,
        "consumer_count": len(channel.consumers),
        "idle_since": None,
        "reductions": 0,
        "garbage_collection": {},
        "message_stats": _message_stats(channel.stats, _CHANNEL_STATS),
    }


def consumers(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/consumers`` items (all vhosts, or one)."""
    items = []
    for connection in open_connections(broker):
        if vhost is not None and connection.vhost.name != vhost:
            continue
        for channel in list(connection.channels.values()):
            details = _channel_details(broker, channel, connection)
            for consumer in list(channel.consumers.values()):
                items.append(_consumer(consumer, details))
    return items


def _consumer(consumer: Consumer, channel_details: dict[str, Any]) -> dict[str, Any]:
    queue = consumer.queue
    active = not queue.settings.single_active_consumer or (
        bool(queue.consumers) and queue.consumers[0] is consumer
    )
    return {
        "consumer_tag": consumer.tag,
        "queue": {"name": queue.name, "vhost": queue.vhost_name},
        "channel_details": channel_details,
        "ack_required": not consumer.no_ack,
        "prefetch_count": consumer.prefetch,
        "exclusive": consumer.exclusive,
        "arguments": _json_value(consumer.arguments),
        "active": active,
        "activity_status": "up" if active else "waiting",
        **stream_consumer_fields(consumer),
    }


# -- node ------------------------------------------------------------------------------------
def node_totals(broker: Broker) -> MessageStats:
    """The node's message counters now (closed channels' and open ones'), with the rates
    of the last sample."""
    totals = MessageStats()
    totals.add(broker.statistics.closed)
    for connection in open_connections(broker):
        for channel in connection.channels.values():
            totals.add(channel.stats)
    totals.rates = broker.statistics.totals.rates
    return totals


def _queue_totals(broker: Broker) -> dict[str, Any]:
    ready = sum(len(q.ready) for host in broker.vhosts.values() for q in host.queues.values())
    unacked = sum(
        len(channel.unacked)
        for connection in open_connections(broker)
        for channel in connection.channels.values()
    )
    rates = broker.statistics.depth_rates
    return {
        "messages": ready + unacked,
        "messages_details": {"rate": round(rates.get("messages", 0.0), 1)},
        "messages_ready": ready,
        "messages_ready_details": {"rate": round(rates.get("messages_ready", 0.0), 1)},
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": {
            "rate": round(rates.get("messages_unacknowledged", 0.0), 1)
        },
    }


def _exchange_types() -> list[dict[str, Any]]:
    """RabbitMQ's exchange type list: the built-in ones, and the federation helper (its
    ``internal_purpose`` keeps it out of the management UI's type choice)."""
    types: list[dict[str, Any]] = [
        {"name": name, "description": "", "enabled": True}
        for name in ("direct", "fanout", "headers", "topic")
    ]
    for name, description in (
        ("x-consistent-hash", "Consistent Hashing Exchange"),
        ("x-modulus-hash", "Modulus Hashing Exchange"),
    ):
        types.append({"name": name, "description": description, "enabled": True})
    types.append(
        {"name": "x-delayed-message", "description": "Delayed Message Exchange.", "enabled": True}
    )
    types.append(
        {
            "name": "x-federation-upstream",
            "description": "Federation upstream helper exchange",
            "internal_purpose": "federation",
            "enabled": True,
        }
    )
    return types


def overview(broker: Broker, node: NodeSample) -> dict[str, Any]:
    """``/api/overview``."""
    conns = list(open_connections(broker))
    channel_count = sum(len(c.channels) for c in conns)
    consumer_count = sum(len(ch.consumers) for c in conns for ch in c.channels.values())
    totals = node_totals(broker)
    return {
        "management_version": MANAGEMENT_VERSION,
        "rates_mode": "basic",
        "sample_retention_policies": {
            "global": [600, 3600, 28800, 86400],
            "basic": [600, 3600],
            "detailed": [600],
        },
        "exchange_types": _exchange_types(),
        "product_version": __version__,
        "product_name": PRODUCT_NAME,
        "rabbitmq_version": MANAGEMENT_VERSION,
        "cluster_name": broker.cluster_name,
        "erlang_version": "",
        "erlang_full_version": "",
        "release_series_support_status": "supported",
        "disable_stats": False,
        "enable_queue_totals": True,
        "message_stats": _message_stats(totals, _CHANNEL_STATS),
        "churn_rates": churn_rates(broker.statistics),
        "queue_totals": _queue_totals(broker),
        "object_totals": {
            "connections": len(conns),
            "channels": channel_count,
            "exchanges": sum(len(host.exchanges) for host in broker.vhosts.values()),
            "queues": sum(len(host.queues) for host in broker.vhosts.values()),
            "consumers": consumer_count,
        },
        "statistics_db_event_queue": 0,
        "node": node.name,
        "listeners": list(node.listeners),
        "contexts": [],
    }


def nodes(broker: Broker, node: NodeSample) -> list[dict[str, Any]]:
    """``/api/nodes``: this one node."""
    alarms = broker.alarms.active
    return [
        {
            "name": node.name,
            "role": node.role,
            "type": "disc",
            "running": True,
            "being_drained": False,
            "partitions": [],
            "os_pid": node.os_pid,
            "uptime": node.uptime,
            "run_queue": node.run_queue,
            "processors": node.processors,
            "rates_mode": "basic",
            "mem_used": node.mem_used,
            "mem_used_details": {"rate": 0.0},
            "mem_limit": node.mem_limit,
            "mem_alarm": "memory" in alarms,
            "mem_calculation_strategy": "rss",
            "disk_free": node.disk_free,
            "disk_free_details": {"rate": 0.0},
            "disk_free_limit": node.disk_free_limit,
            "disk_free_alarm": "disk" in alarms,
            "fd_used": node.fd_used,
            "fd_total": node.fd_total,
            "sockets_used": node.sockets_used,
            "sockets_total": node.sockets_total,
            "proc_used": node.proc_used,
            "proc_total": node.proc_total,
            "store_bytes": node.store_bytes,
            "net_ticktime": 60,
            "enabled_plugins": [],
            "exchange_types": _exchange_types(),
            "auth_mechanisms": [  # enabled: offered (the auth_mechanisms setting)
                {"name": name, "description": "", "enabled": name in broker.config.auth_mechanisms}
                for name in ("PLAIN", "AMQPLAIN", "EXTERNAL")
            ],
            "applications": [{"name": PRODUCT_NAME, "description": "", "version": __version__}],
            "contexts": [],
            "listeners": list(node.listeners),
            "cluster_links": [],
            "metrics_gc_queue_length": {},
        }
    ]
