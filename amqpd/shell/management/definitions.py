"""Definitions: /api/definitions (GET export, POST import) and /api/definitions/{vhost}
(one vhost's queues, exchanges and bindings, without the vhost field), administrators
only. Both go through the admin commands (``host.admin_request``), like ``amqpd
definitions export|import``: an import declares through the vhosts' normal paths and the
access part is persisted."""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.shell.host import BrokerHost
from amqpd.shell.management.context import Call, no_content, route
from amqpd.shell.management.errors import bad_request, not_found
from amqpd.shell.management.render import Json

# what a per-vhost export / import holds (RabbitMQ: the vhost's parameters, among them its
# limits and operator policies, its policies and its topology, without the vhost field)
_TOPOLOGY: Final = ("parameters", "policies", "queues", "exchanges", "bindings")


async def _export(call: Call) -> dict[str, Any]:
    call.principal.require_admin()
    reply = await call.host.admin_request({"group": "definitions", "command": "export"})
    if not reply.ok:
        raise bad_request(reply.text)
    document: dict[str, Any] = json.loads(reply.text)
    return document


async def _import(call: Call, document: dict[str, Any]) -> None:
    reply = await call.host.admin_request(
        {"group": "definitions", "command": "import", "definitions": document}
    )
    if not reply.ok:
        raise bad_request(reply.text)


def _vhost_name(call: Call) -> str:
    name = call.param("vhost")
    if name not in call.broker.vhosts:
        raise not_found()
    return name


async def export_all(call: Call) -> Response:
    """GET /api/definitions."""
    return Json(await _export(call))


async def export_vhost(call: Call) -> Response:
    """GET /api/definitions/{vhost}: RabbitMQ's per-vhost layout."""
    call.principal.require_admin()
    name = _vhost_name(call)
    document = await _export(call)
    out: dict[str, Any] = {
        "rabbit_version": document.get("rabbit_version"),
        "rabbitmq_version": document.get("rabbitmq_version"),
    }
    for section in _TOPOLOGY:
        out[section] = [
            {key: value for key, value in item.items() if key != "vhost"}
            for item in document.get(section, [])
            if item.get("vhost") == name
        ]
    return Json(out)


async def import_all(call: Call) -> Response:
    """POST /api/definitions."""
    call.principal.require_admin()
    await _import(call, await call.body("failed_to_parse_json"))
    return no_content()


async def import_vhost(call: Call) -> Response:
    """POST /api/definitions/{vhost}: the document's parameters, policies, queues,
    exchanges and bindings go into this vhost (users, vhosts and permissions are not taken
    from it)."""
    call.principal.require_admin()
    name = _vhost_name(call)
    document = await call.body("failed_to_parse_json")
    scoped: dict[str, Any] = {}
    for section in _TOPOLOGY:
        items = document.get(section) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise bad_request(f"'{section}' must be a list of objects")
        scoped[section] = [{**item, "vhost": name} for item in items]
    await _import(call, scoped)
    return no_content()


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The definitions routes."""
    return [
        route(host, "/api/definitions", get=export_all, post=import_all),
        route(host, "/api/definitions/{vhost}", get=export_vhost, post=import_vhost),
    ]
