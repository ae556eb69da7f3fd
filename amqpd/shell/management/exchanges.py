"""Exchanges: /api/exchanges[/{vhost}[/{name}]] (GET, PUT declare, DELETE), ``/publish``
and ``/bindings/source`` / ``/bindings/destination``. The default exchange is listed with
the name "" and addressed as ``amq.default``.

A publish answers once the message is as safe as a publisher confirm would say: a
persistent message routed to a durable queue is answered after the storage batch holding
it has committed (RabbitMQ's management publishes in confirm mode and waits too).
"""

from __future__ import annotations

import anyio
from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import inventory, operations
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import body as fields
from amqpd.shell.management import ranges
from amqpd.shell.management.bindings import BINDING_ORDER
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import ApiError, bad_request
from amqpd.shell.management.messages import content_header, payload_bytes
from amqpd.shell.management.render import Json
from amqpd.wire.errors import NOT_FOUND, AMQPError
from exchanges.registry import EXCHANGE_TYPES

COMMIT_TIMEOUT = 30.0  # seconds a publish waits for its storage batch


def _name(call: Call) -> str:
    name = call.param("name")
    return "" if name == "amq.default" else name


async def list_all(call: Call) -> Response:
    """GET /api/exchanges."""
    items = inventory.exchanges(call.broker)
    if not call.principal.is_admin:
        items = [item for item in items if call.visible(item["vhost"])]
    return call.listing(ranges.exchanges(call, items))


async def list_vhost(call: Call) -> Response:
    """GET /api/exchanges/{vhost}."""
    vhost = call.vhost_param()
    return call.listing(ranges.exchanges(call, inventory.exchanges(call.broker, vhost.name)))


async def get_exchange(call: Call) -> Response:
    """GET /api/exchanges/{vhost}/{name}."""
    vhost = call.vhost_param()
    item = inventory.exchange(call.broker, vhost.name, _name(call))
    return call.item(ranges.exchanges(call, [item])[0] if item is not None else None)


async def put_exchange(call: Call) -> Response:
    """PUT /api/exchanges/{vhost}/{name}: ``type`` (default direct), ``durable`` (default
    true), ``auto_delete``, ``internal``, ``arguments``."""
    vhost = call.target_vhost()
    body = await call.body()
    type_name = fields.text(body, "type", "direct") or "direct"
    if type_name not in EXCHANGE_TYPES:
        raise bad_request(f"invalid exchange type '{type_name}'")
    was_created = operations.declare_exchange(
        vhost,
        call.authz(vhost),
        fields.shortstr(_name(call), "exchange name"),
        type_name,
        fields.boolean(body, "durable", True),
        fields.boolean(body, "auto_delete", False),
        fields.boolean(body, "internal", False),
        fields.arguments(body),
    )
    return created(was_created)


async def delete_exchange(call: Call) -> Response:
    """DELETE /api/exchanges/{vhost}/{name}[?if-unused=true]."""
    vhost = call.vhost_param()
    if _name(call) not in vhost.exchanges:
        return call.item(None)
    operations.delete_exchange(vhost, call.authz(vhost), _name(call), call.flag("if-unused"))
    return no_content()


class _BatchWait:
    """Waits for one storage batch (the model's BatchWaiter, as a channel is)."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: Exception | None = None

    def batch_committed(self, batch: int, confirms: list[int], commit_oks: int) -> None:
        self.done.set()

    def batch_failed(
        self, batch: int, confirms: list[int], commit_oks: int, error: Exception
    ) -> None:
        self.error = error
        self.done.set()


async def publish(call: Call) -> Response:
    """POST /api/exchanges/{vhost}/{name}/publish: ``routing_key``, ``payload``,
    ``payload_encoding`` (string or base64), ``properties``; answers ``{"routed": bool}``."""
    vhost = call.vhost_param()
    body = await call.body()
    fields.require(body, "routing_key", "payload", "payload_encoding", "properties")
    payload = payload_bytes(body["payload"], body["payload_encoding"])
    header = content_header(body["properties"], len(payload))
    try:
        routed, batch = operations.publish(
            call.broker,
            vhost,
            call.authz(vhost),
            call.param("name"),
            fields.shortstr(fields.text(body, "routing_key"), "routing_key"),
            header,
            payload,
        )
    except AMQPError as exc:
        if exc.reply_code == NOT_FOUND:
            raise bad_request(f"{exc.reply_code} {exc}") from exc
        raise
    if batch is not None:
        wait = _BatchWait()
        call.broker.batch_waits.confirm(batch, wait, 0)
        call.host.after_core()  # wakes the group committer
        with anyio.move_on_after(COMMIT_TIMEOUT):
            await wait.done.wait()
        if wait.error is not None or not wait.done.is_set():
            raise ApiError(500, "internal_server_error", "the message could not be stored (nacked)")
    return Json({"routed": routed})


def _bindings(call: Call, key: str) -> Response:
    vhost = call.vhost_param()
    name = _name(call)
    if name not in vhost.exchanges:
        return call.item(None)
    items = [
        item
        for item in inventory.bindings(call.broker, vhost.name)
        if item[key] == name and (key == "source" or item["destination_type"] == "exchange")
    ]
    return call.listing(items, BINDING_ORDER)


async def source_bindings(call: Call) -> Response:
    """GET /api/exchanges/{vhost}/{name}/bindings/source."""
    return _bindings(call, "source")


async def destination_bindings(call: Call) -> Response:
    """GET /api/exchanges/{vhost}/{name}/bindings/destination."""
    return _bindings(call, "destination")


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The exchange routes."""
    return [
        route(host, "/api/exchanges", get=list_all),
        route(host, "/api/exchanges/{vhost}", get=list_vhost),
        route(
            host,
            "/api/exchanges/{vhost}/{name}",
            get=get_exchange,
            put=put_exchange,
            delete=delete_exchange,
        ),
        route(host, "/api/exchanges/{vhost}/{name}/publish", post=publish),
        route(host, "/api/exchanges/{vhost}/{name}/bindings/source", get=source_bindings),
        route(host, "/api/exchanges/{vhost}/{name}/bindings/destination", get=destination_bindings),
    ]
