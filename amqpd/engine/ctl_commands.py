"""The ``amqpd ctl …`` commands, carried out on a running broker (sans-IO).

A request arrives through the admin socket (amqpd/shell/admin_socket.py) as
``{"group": "ctl", "command": "list-queues", "columns": [...], "vhost": "/"}``. Listings
answer with a table - ``{"columns": [...], "rows": [[...], ...], "banner": "Listing …"}`` -
whose column names are ``rabbitmqctl``'s info keys (``list_queues name messages_ready``),
read from the inventory (amqpd/engine/inventory.py), so the values are those the
management API shows. The CLI (amqpd/cli/ctl.py) prints it tab-separated or as JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from amqpd.engine import client_inventory, inventory, node_inventory
from amqpd.model.admin_commands import AdminError
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from amqpd.wire.errors import CONNECTION_FORCED

Item = dict[str, Any]
Getter = Callable[[Item], Any]


def _field(name: str) -> Getter:
    return lambda item: item.get(name)


def _nested(outer: str, inner: str) -> Getter:
    return lambda item: (item.get(outer) or {}).get(inner)


_QUEUE_KEYS: Final = (
    "name",
    "durable",
    "auto_delete",
    "arguments",
    "policy",
    "pid",
    "owner_pid",
    "exclusive",
    "exclusive_consumer_pid",
    "exclusive_consumer_tag",
    "messages_ready",
    "messages_unacknowledged",
    "messages",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "messages_ram",
    "messages_persistent",
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "message_bytes_ram",
    "message_bytes_persistent",
    "head_message_timestamp",
    "consumers",
    "consumer_utilisation",
    "consumer_capacity",
    "memory",
    "state",
    "type",
    "vhost",
)
_QUEUE_GETTERS: Final[Mapping[str, Getter]] = {
    **{key: _field(key) for key in _QUEUE_KEYS},
    "pid": lambda item: f"<{item['node']}.{item['vhost']}.{item['name']}>",
    "owner_pid": _nested("owner_pid_details", "name"),
    "exclusive_consumer_pid": lambda item: None,
}

_EXCHANGE_KEYS: Final = ("name", "type", "durable", "auto_delete", "internal", "arguments")
_EXCHANGE_GETTERS: Final[Mapping[str, Getter]] = {
    **{key: _field(key) for key in _EXCHANGE_KEYS},
    "policy": _field("policy"),
    "vhost": _field("vhost"),
}

_BINDING_GETTERS: Final[Mapping[str, Getter]] = {
    "source_name": _field("source"),
    "source_kind": lambda item: "exchange",
    "destination_name": _field("destination"),
    "destination_kind": _field("destination_type"),
    "routing_key": _field("routing_key"),
    "arguments": _field("arguments"),
    "vhost": _field("vhost"),
}

_CONNECTION_KEYS: Final = (
    "name",
    "port",
    "host",
    "peer_port",
    "peer_host",
    "ssl",
    "ssl_protocol",
    "ssl_key_exchange",
    "ssl_cipher",
    "ssl_hash",
    "peer_cert_subject",
    "peer_cert_issuer",
    "peer_cert_validity",
    "state",
    "channels",
    "protocol",
    "auth_mechanism",
    "user",
    "vhost",
    "user_provided_name",
    "timeout",
    "frame_max",
    "channel_max",
    "client_properties",
    "connected_at",
    "recv_oct",
    "recv_cnt",
    "send_oct",
    "send_cnt",
    "send_pend",
    "node",
)
_CONNECTION_GETTERS: Final[Mapping[str, Getter]] = {
    **{key: _field(key) for key in _CONNECTION_KEYS},
    "pid": lambda item: f"<{item['node']}.{item['name']}>",
}

_CHANNEL_KEYS: Final = (
    "name",
    "number",
    "user",
    "vhost",
    "transactional",
    "confirm",
    "consumer_count",
    "messages_unacknowledged",
    "messages_uncommitted",
    "acks_uncommitted",
    "messages_unconfirmed",
    "prefetch_count",
    "global_prefetch_count",
    "state",
    "node",
)
_CHANNEL_GETTERS: Final[Mapping[str, Getter]] = {
    **{key: _field(key) for key in _CHANNEL_KEYS},
    "pid": lambda item: f"<{item['node']}.{item['name']}>",
    "connection": lambda item: f"<{item['node']}.{item['connection_details']['name']}>",
}

_CONSUMER_GETTERS: Final[Mapping[str, Getter]] = {
    "queue_name": _nested("queue", "name"),
    "channel_pid": lambda item: (
        f"<{item['channel_details']['node']}.{item['channel_details']['name']}>"
    ),
    "consumer_tag": _field("consumer_tag"),
    "ack_required": _field("ack_required"),
    "prefetch_count": _field("prefetch_count"),
    "active": _field("active"),
    "activity_status": _field("activity_status"),
    "arguments": _field("arguments"),
    "exclusive": _field("exclusive"),
}


class _Listing:
    """One ``list-*`` command: where its items come from and rabbitmqctl's columns."""

    def __init__(
        self,
        items: Callable[[Broker, str], list[Item]],
        getters: Mapping[str, Getter],
        default: tuple[str, ...],
        banner: str,
        per_vhost: bool = True,  # False: node-wide (connections, channels)
    ) -> None:
        self.per_vhost = per_vhost
        self.items = items
        self.getters = getters
        self.default = default
        self.banner = banner


LISTINGS: Final[Mapping[str, _Listing]] = {
    "list-queues": _Listing(
        inventory.queues, _QUEUE_GETTERS, ("name", "messages"), "Listing queues for vhost {} ..."
    ),
    "list-exchanges": _Listing(
        inventory.exchanges,
        _EXCHANGE_GETTERS,
        ("name", "type"),
        "Listing exchanges for vhost {} ...",
    ),
    "list-bindings": _Listing(
        inventory.bindings,
        _BINDING_GETTERS,
        (
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ),
        "Listing bindings for vhost {}...",
    ),
    "list-connections": _Listing(
        lambda broker, _vhost: client_inventory.connections(broker),
        _CONNECTION_GETTERS,
        ("user", "peer_host", "peer_port", "state"),
        "Listing connections ...",
        per_vhost=False,
    ),
    "list-channels": _Listing(
        lambda broker, _vhost: client_inventory.channels(broker),
        _CHANNEL_GETTERS,
        ("pid", "user", "consumer_count", "messages_unacknowledged"),
        "Listing channels ...",
        per_vhost=False,
    ),
    "list-consumers": _Listing(
        client_inventory.consumers,
        _CONSUMER_GETTERS,
        (
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
            "arguments",
        ),
        "Listing consumers in vhost {} ...",
    ),
}


def execute(broker: Broker, request: Mapping[str, Any], node: NodeSample) -> Any:
    """Carry out one ``ctl`` request; the JSON-able answer.

    Raises:
        AdminError: an unknown command or column, a vhost or connection that does not exist.
    """
    command = request.get("command")
    if command == "ping":
        return {"ok": True, "node": node.name}
    if command == "status":
        return status(broker, node)
    if command == "close-connection":
        return close_connection(broker, str(request.get("name", "")), request.get("reason"))
    if command == "count-connections":  # --workers N: worker 0 sums them for the limits
        user, vhost = str(request.get("user", "")), str(request.get("vhost", ""))
        users = [connection.user for connection in broker.connections]
        of_vhost = broker.vhost_connections.get(vhost, 0)
        return {"connections": len(users), "of_user": users.count(user), "of_vhost": of_vhost}
    listing = LISTINGS.get(str(command))
    if listing is None:
        raise AdminError(f"unknown command: ctl {command}")
    return list_table(broker, listing, request)


def list_table(broker: Broker, listing: _Listing, request: Mapping[str, Any]) -> Item:
    """A listing as ``{"banner", "columns", "rows"}``."""
    columns = tuple(request.get("columns") or listing.default)
    unknown = [column for column in columns if column not in listing.getters]
    if unknown:
        raise AdminError(
            f"Info key(s) {','.join(unknown)} are not supported. Supported keys: "
            f"{', '.join(listing.getters)}"
        )
    vhost = str(request.get("vhost") or "/")
    if vhost not in broker.access.state.vhosts:
        raise AdminError(f"Virtual host '{vhost}' does not exist")
    getters = [listing.getters[column] for column in columns]
    # a vhost another worker holds (--workers N) has nothing here
    held = vhost in broker.vhosts or not listing.per_vhost
    items = listing.items(broker, vhost) if held else []
    rows = [[getter(item) for getter in getters] for item in items]
    banner = listing.banner.format(vhost)
    if listing.items is inventory.queues:  # rabbitmqctl prints this for list_queues only
        banner = f"Timeout: 60.0 seconds ...\n{banner}"
    return {"banner": banner, "columns": list(columns), "rows": rows}


def close_connection(broker: Broker, name: str, reason: object) -> str:
    """Close a client connection as ``rabbitmqctl close_connection`` does: 320
    CONNECTION_FORCED with the given reason."""
    connection = client_inventory.find_connection(broker, name)
    if connection is None:
        raise AdminError(f"no connection named '{name}'")
    text = str(reason) if reason else "Closed via amqpd ctl"
    connection.close(CONNECTION_FORCED, f"CONNECTION_FORCED - {text}")
    return f'Closing connection "{name}", reason: {text}...'


def status(broker: Broker, node: NodeSample) -> Item:
    """The node, its alarms and object totals (``rabbitmqctl status``)."""
    [info] = node_inventory.nodes(broker, node)
    overview = node_inventory.overview(broker, node)
    return {
        "node": node.name,
        "role": node.role,
        "pid": node.os_pid,
        "product_name": overview["product_name"],
        "product_version": overview["product_version"],
        "uptime": node.uptime // 1000,
        "alarms": sorted(broker.alarms.active),
        "memory": {
            "used": node.mem_used,
            "limit": node.mem_limit,
            "alarm": info["mem_alarm"],
        },
        "disk": {
            "free": node.disk_free,
            "limit": node.disk_free_limit,
            "alarm": info["disk_free_alarm"],
        },
        "file_descriptors": {
            "used": node.fd_used,
            "total": node.fd_total,
            "sockets_used": node.sockets_used,
            "sockets_total": node.sockets_total,
        },
        "store_bytes": node.store_bytes,
        "listeners": node.listeners,
        "totals": overview["object_totals"],
        "queue_totals": {
            key: value
            for key, value in overview["queue_totals"].items()
            if not key.endswith("_details")
        },
    }
