"""Vhost limits: /api/vhost-limits[/{vhost}] and /api/vhost-limits/{vhost}/{name} (PUT
``{"value": N}``, DELETE). amqpd enforces RabbitMQ's two, ``max-connections`` and
``max-queues`` (the admin commands ``vhosts set-max-connections`` / ``set-max-queues``);
any other name is refused with RabbitMQ's validation wording."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.model.definitions_rabbit import vhost_limits
from amqpd.shell.host import BrokerHost
from amqpd.shell.management.context import Call, no_content, route
from amqpd.shell.management.errors import bad_request, not_found
from amqpd.shell.management.render import Json

MAX_CONNECTIONS = "max-connections"
MAX_QUEUES = "max-queues"


def _items(call: Call, vhost: str | None = None) -> list[dict[str, Any]]:
    items = []
    for info in call.broker.access.state.vhosts.values():
        if vhost is not None and info.name != vhost:
            continue
        limits = vhost_limits(info)
        if limits and call.visible(info.name):
            items.append({"vhost": info.name, "value": limits})
    return items


async def list_all(call: Call) -> Response:
    """GET /api/vhost-limits (the vhosts the user sees)."""
    return call.listing(_items(call), ("vhost",))


async def list_vhost(call: Call) -> Response:
    """GET /api/vhost-limits/{vhost}."""
    return Json(_items(call, call.access_vhost()))


async def _set(call: Call, name: str, value: int) -> None:
    reply = await call.host.admin_request(
        {
            "group": "vhosts",
            "command": f"set-{name}",
            "name": call.param("vhost"),
            name.replace("-", "_"): value,
        }
    )
    if not reply.ok:
        raise bad_request(reply.text)


def _limit_name(call: Call) -> str:
    call.principal.require_admin()
    if call.param("vhost") not in call.broker.access.state.vhosts:
        raise not_found()
    name = call.param("name")
    if name not in (MAX_CONNECTIONS, MAX_QUEUES):
        raise bad_request(f'Validation failed\n\nUnrecognised terms [{{<<"{name}">>}}] in limits\n')
    return name


async def put_limit(call: Call) -> Response:
    """PUT /api/vhost-limits/{vhost}/{max-connections|max-queues} ``{"value": N}``
    (negative: none)."""
    name = _limit_name(call)
    body = await call.body()
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(
            f"Validation failed\n\n{name} should be a number, actually was {value!r}\n"
        )
    await _set(call, name, value)
    return no_content()


async def delete_limit(call: Call) -> Response:
    """DELETE /api/vhost-limits/{vhost}/{name}: no limit."""
    await _set(call, _limit_name(call), -1)
    return no_content()


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The vhost-limit routes."""
    return [
        route(host, "/api/vhost-limits", get=list_all),
        route(host, "/api/vhost-limits/{vhost}", get=list_vhost),
        route(host, "/api/vhost-limits/{vhost}/{name}", put=put_limit, delete=delete_limit),
    ]
