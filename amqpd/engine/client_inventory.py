"""The broker's clients in the shapes of RabbitMQ's management API (sans-IO): the
``/api/connections``, ``/api/channels`` and ``/api/consumers`` items, and the names
RabbitMQ gives connections and channels (``"127.0.0.1:54321 -> 127.0.0.1:5672 (1)"``).
The queue, exchange and binding listings are amqpd/engine/inventory.py, the node's
amqpd/engine/node_inventory.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from amqpd.engine.api_format import (
    CHANNEL_STATS,
    json_value,
    message_stats,
    node_name,
    split_address,
)
from amqpd.engine.channel import Channel, ChannelState
from amqpd.engine.channel_modes import Mode
from amqpd.engine.connection import Connection
from amqpd.engine.connection_open import State
from amqpd.engine.stream_inventory import stream_consumer_fields
from amqpd.model.broker import Broker
from amqpd.model.queue import Consumer


def open_connections(broker: Broker) -> Iterator[Connection]:
    """The broker's open client connections (engine Connections)."""
    for connection in list(broker.connections):
        if isinstance(connection, Connection):
            yield connection


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
    peer_host, peer_port = split_address(connection.peer)
    properties = json_value(connection.client_properties)
    item: dict[str, Any] = {
        "name": connection_name(connection),
        "node": node_name(broker),
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
    peer_host, peer_port = split_address(connection.peer)
    return {
        "name": channel_name(channel, connection),
        "number": channel.number,
        "connection_name": connection_name(connection),
        "peer_host": peer_host,
        "peer_port": peer_port,
        "user": connection.user,
        "node": node_name(broker),
    }


def channels(broker: Broker) -> list[dict[str, Any]]:
    """``/api/channels`` items."""
    return [
        _channel(broker, channel, connection)
        for connection in open_connections(broker)
        for channel in list(connection.channels.values())
    ]


def _channel(broker: Broker, channel: Channel, connection: Connection) -> dict[str, Any]:
    peer_host, peer_port = split_address(connection.peer)
    unacked = channel.unacked
    confirm = channel.confirm
    tx = channel.tx  # the open transaction's buffered work, if any
    if channel.state is not ChannelState.OPEN:
        state = "closing"
    elif not channel.flow_active:
        state = "flow"
    else:
        state = "running"
    return {
        "name": channel_name(channel, connection),
        "number": channel.number,
        "node": node_name(broker),
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
        "message_stats": message_stats(channel.stats, CHANNEL_STATS),
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
        "arguments": json_value(consumer.arguments),
        "active": active,
        "activity_status": "up" if active else "waiting",
        **stream_consumer_fields(consumer),
    }
