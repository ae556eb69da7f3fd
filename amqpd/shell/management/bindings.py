"""Bindings: /api/bindings[/{vhost}], /api/bindings/{vhost}/e/{source}/q/{queue} and
/e/{source}/e/{exchange} (GET, POST -> 201 with ``Location: {destination}/{props}``), and
one binding at /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props} (GET, DELETE);
``props`` is the binding's ``properties_key``."""

from __future__ import annotations

from urllib.parse import quote

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import inventory, operations
from amqpd.model.vhost import VirtualHost
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import body as fields
from amqpd.shell.management.context import Call, no_content, route
from amqpd.shell.management.errors import not_found

_KINDS = {"q": "queue", "e": "exchange"}
BINDING_ORDER = ("vhost", "source", "destination", "routing_key", "properties_key")


async def list_all(call: Call) -> Response:
    """GET /api/bindings."""
    items = inventory.bindings(call.broker)
    if not call.principal.is_admin:
        items = [item for item in items if call.visible(item["vhost"])]
    return call.listing(items, BINDING_ORDER)


async def list_vhost(call: Call) -> Response:
    """GET /api/bindings/{vhost}."""
    vhost = call.vhost_param()
    return call.listing(inventory.bindings(call.broker, vhost.name), BINDING_ORDER)


def _ends(call: Call) -> tuple[VirtualHost, str, str, str]:
    """The vhost, source, destination kind ("queue"/"exchange") and destination named by
    the path; 404 if either end does not exist."""
    vhost = call.vhost_param()
    kind = _KINDS.get(call.param("kind"))
    if kind is None:
        raise not_found()
    source = call.param("source")
    source = "" if source == "amq.default" else source
    destination = call.param("destination")
    found = vhost.queues if kind == "queue" else vhost.exchanges
    # a spread vhost's queue on another worker is a stub here, with its bindings
    elsewhere = kind == "queue" and destination in vhost.remote
    if source not in vhost.exchanges or (destination not in found and not elsewhere):
        raise not_found()
    return vhost, source, kind, destination


async def between(call: Call) -> Response:
    """GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}."""
    vhost, source, kind, destination = _ends(call)
    items = [
        item
        for item in inventory.bindings(call.broker, vhost.name)
        if item["source"] == source
        and item["destination_type"] == kind
        and item["destination"] == destination
    ]
    return call.listing(items, BINDING_ORDER)


async def create(call: Call) -> Response:
    """POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}: ``routing_key``,
    ``arguments``; 201 with the new binding's relative Location."""
    vhost = call.vhost_param()
    if call.param("kind") not in _KINDS:
        raise not_found()
    body = await call.body()
    routing_key = fields.shortstr(fields.text(body, "routing_key"), "routing_key")
    arguments = fields.arguments(body)
    destination = call.param("destination")
    operations.bind(
        vhost,
        call.authz(vhost),
        call.param("source"),
        call.param("kind"),
        destination,
        routing_key,
        arguments,
    )
    key = inventory.properties_key(routing_key, arguments)
    location = f"{quote(destination, safe='')}/{quote(key, safe='')}"
    return Response(status_code=201, headers={"Location": location})


def _one(call: Call) -> tuple[VirtualHost, str, str, str, tuple[str, dict[str, object]]]:
    vhost, source, kind, destination = _ends(call)
    found = inventory.find_binding(
        call.broker, vhost.name, source, kind, destination, call.param("props")
    )
    if found is None:
        raise not_found()
    routing_key, arguments = found
    return vhost, source, kind, destination, (routing_key, dict(arguments))


async def get_one(call: Call) -> Response:
    """GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}."""
    vhost, source, kind, destination, _binding = _one(call)
    props = call.param("props")
    items = [
        item
        for item in inventory.bindings(call.broker, vhost.name)
        if item["source"] == source
        and item["destination_type"] == kind
        and item["destination"] == destination
        and item["properties_key"] == props
    ]
    return call.item(items[0] if items else None)


async def delete_one(call: Call) -> Response:
    """DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}."""
    vhost, source, _kind, destination, (routing_key, arguments) = _one(call)
    operations.unbind(
        vhost,
        call.authz(vhost),
        source,
        call.param("kind"),
        destination,
        routing_key,
        arguments,
    )
    return no_content()


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The binding routes."""
    base = "/api/bindings/{vhost}/e/{source}/{kind}/{destination}"
    return [
        route(host, "/api/bindings", get=list_all),
        route(host, "/api/bindings/{vhost}", get=list_vhost),
        route(host, base, get=between, post=create),
        route(host, base + "/{props}", get=get_one, delete=delete_one),
    ]
