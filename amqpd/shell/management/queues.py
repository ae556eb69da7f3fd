"""Queues: /api/queues[/{vhost}[/{name}]] (GET, PUT declare, DELETE), the
``/contents`` purge, ``/get`` and ``/bindings``."""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import inventory, operations
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import body as fields
from amqpd.shell.management import ranges
from amqpd.shell.management.bindings import BINDING_ORDER
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import bad_request, from_amqp
from amqpd.shell.management.messages import got_json
from amqpd.shell.management.render import Json
from amqpd.wire.errors import AMQPError


async def list_all(call: Call) -> Response:
    """GET /api/queues: the queues of every vhost the user sees."""
    items = inventory.queues(call.broker)
    if not call.principal.is_admin:
        items = [item for item in items if call.visible(item["vhost"])]
    return call.listing(ranges.queues(call, items))


async def list_vhost(call: Call) -> Response:
    """GET /api/queues/{vhost}."""
    vhost = call.vhost_param()
    return call.listing(ranges.queues(call, inventory.queues(call.broker, vhost.name)))


async def get_queue(call: Call) -> Response:
    """GET /api/queues/{vhost}/{name}."""
    vhost = call.vhost_param()
    item = inventory.queue(call.broker, vhost.name, call.param("name"))
    return call.item(ranges.queues(call, [item])[0] if item is not None else None)


async def put_queue(call: Call) -> Response:
    """PUT /api/queues/{vhost}/{name}: declare with ``durable`` (default true),
    ``auto_delete``, ``arguments``; 201 created, 204 when an equivalent queue existed,
    400 with RabbitMQ's precondition text when it is not equivalent."""
    vhost = call.target_vhost()
    body = await call.body()
    was_created = operations.declare_queue(
        vhost,
        call.authz(vhost),
        fields.shortstr(call.param("name"), "queue name"),
        fields.boolean(body, "durable", True),
        fields.boolean(body, "auto_delete", False),
        fields.arguments(body),
    )
    return created(was_created)


async def delete_queue(call: Call) -> Response:
    """DELETE /api/queues/{vhost}/{name}[?if-empty=true][&if-unused=true]."""
    vhost = call.vhost_param()
    name = call.param("name")
    if name not in vhost.queues:
        return call.item(None)
    operations.delete_queue(
        vhost, call.authz(vhost), name, call.flag("if-empty"), call.flag("if-unused")
    )
    return no_content()


async def purge(call: Call) -> Response:
    """DELETE /api/queues/{vhost}/{name}/contents."""
    vhost = call.vhost_param()
    name = call.param("name")
    if name not in vhost.queues:
        return call.item(None)
    operations.purge_queue(vhost, call.authz(vhost), name)
    return no_content()


async def get_messages(call: Call) -> Response:
    """POST /api/queues/{vhost}/{name}/get: ``count``, ``ackmode``, ``encoding`` (auto or
    base64), optional ``truncate``."""
    vhost = call.vhost_param()
    body = await call.body()
    fields.require(body, "count", "ackmode", "encoding")
    count = fields.integer(body, "count") or 0
    ackmode = fields.text(body, "ackmode")
    encoding = fields.text(body, "encoding")
    truncate = fields.integer(body, "truncate")
    if ackmode not in operations.ACK_MODES:
        raise bad_request(["invalid_ackmode", ackmode])
    if encoding not in ("auto", "base64"):
        raise bad_request(["unsupported_encoding", encoding])
    try:
        got = operations.get_messages(
            call.broker, vhost, call.authz(vhost), call.param("name"), max(count, 0), ackmode
        )
    except AMQPError as exc:
        raise from_amqp(exc, prefixed=True) from exc
    return Json([got_json(item, encoding, truncate) for item in got])


async def queue_bindings(call: Call) -> Response:
    """GET /api/queues/{vhost}/{name}/bindings."""
    vhost = call.vhost_param()
    name = call.param("name")
    if name not in vhost.queues:
        return call.item(None)
    items = [
        item
        for item in inventory.bindings(call.broker, vhost.name)
        if item["destination_type"] == "queue" and item["destination"] == name
    ]
    return call.listing(items, BINDING_ORDER)


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The queue routes."""
    return [
        route(host, "/api/queues", get=list_all),
        route(host, "/api/queues/{vhost}", get=list_vhost),
        route(
            host,
            "/api/queues/{vhost}/{name}",
            get=get_queue,
            put=put_queue,
            delete=delete_queue,
        ),
        route(host, "/api/queues/{vhost}/{name}/contents", delete=purge),
        route(host, "/api/queues/{vhost}/{name}/get", post=get_messages),
        route(host, "/api/queues/{vhost}/{name}/bindings", get=queue_bindings),
    ]
