"""Clients: /api/connections[/{name}] (GET; DELETE closes it with 320 CONNECTION_FORCED and
the ``X-Reason`` header as the reason), /api/connections/{name}/channels,
/api/channels[/{name}], /api/consumers[/{vhost}].

Monitoring users and administrators see every connection and channel, other management
users their own; closing someone else's connection takes an administrator."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import client_inventory
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import ranges
from amqpd.shell.management.context import Call, no_content, route
from amqpd.shell.management.errors import not_authorised, not_found
from amqpd.wire.errors import CONNECTION_FORCED

DEFAULT_REASON = "Closed via management plugin"


def _visible(call: Call, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if call.principal.is_monitor:
        return items
    return [item for item in items if call.sees_client(item["user"])]


async def list_connections(call: Call) -> Response:
    """GET /api/connections."""
    return call.listing(
        ranges.connections(call, _visible(call, client_inventory.connections(call.broker)))
    )


def _connection(call: Call) -> dict[str, Any]:
    item = client_inventory.connection(call.broker, call.param("name"))
    if item is None or not call.sees_client(item["user"]):
        raise not_found()
    return item


async def get_connection(call: Call) -> Response:
    """GET /api/connections/{name}."""
    return call.item(ranges.connections(call, [_connection(call)])[0])


async def close_connection(call: Call) -> Response:
    """DELETE /api/connections/{name}: Connection.Close 320 "CONNECTION_FORCED - reason"."""
    item = _connection(call)
    if item["user"] != call.principal.name and not call.principal.is_admin:
        raise not_authorised("Not administrator user")
    connection = client_inventory.find_connection(call.broker, item["name"])
    if connection is None:
        raise not_found()
    raw = call.request.headers.get("x-reason")  # latin-1 as received: the bytes are UTF-8
    reason = raw.encode("latin-1").decode("utf-8", "replace") if raw else DEFAULT_REASON
    connection.close(CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}")
    return no_content()


async def connection_channels(call: Call) -> Response:
    """GET /api/connections/{name}/channels."""
    name = _connection(call)["name"]
    items = [
        item
        for item in client_inventory.channels(call.broker)
        if item["connection_details"]["name"] == name
    ]
    return call.listing(items)


async def list_channels(call: Call) -> Response:
    """GET /api/channels."""
    return call.listing(_visible(call, client_inventory.channels(call.broker)))


async def get_channel(call: Call) -> Response:
    """GET /api/channels/{name}."""
    name = call.param("name")
    found = [
        item
        for item in _visible(call, client_inventory.channels(call.broker))
        if item["name"] == name
    ]
    return call.item(found[0] if found else None)


async def vhost_connections(call: Call) -> Response:
    """GET /api/vhosts/{vhost}/connections."""
    vhost = call.vhost_param()
    items = _visible(call, client_inventory.connections(call.broker))
    return call.listing([item for item in items if item["vhost"] == vhost.name])


async def vhost_channels(call: Call) -> Response:
    """GET /api/vhosts/{vhost}/channels."""
    vhost = call.vhost_param()
    items = _visible(call, client_inventory.channels(call.broker))
    return call.listing([item for item in items if item["vhost"] == vhost.name])


async def list_consumers(call: Call) -> Response:
    """GET /api/consumers."""
    items = client_inventory.consumers(call.broker)
    if not call.principal.is_admin:
        items = [item for item in items if call.visible(item["queue"]["vhost"])]
    return call.listing(items)


async def vhost_consumers(call: Call) -> Response:
    """GET /api/consumers/{vhost}."""
    vhost = call.vhost_param()
    return call.listing(client_inventory.consumers(call.broker, vhost.name))


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The connection, channel and consumer routes."""
    return [
        route(host, "/api/connections", get=list_connections),
        route(host, "/api/connections/{name}", get=get_connection, delete=close_connection),
        route(host, "/api/connections/{name}/channels", get=connection_channels),
        route(host, "/api/channels", get=list_channels),
        route(host, "/api/channels/{name}", get=get_channel),
        route(host, "/api/vhosts/{vhost}/connections", get=vhost_connections),
        route(host, "/api/vhosts/{vhost}/channels", get=vhost_channels),
        route(host, "/api/consumers", get=list_consumers),
        route(host, "/api/consumers/{vhost}", get=vhost_consumers),
    ]
