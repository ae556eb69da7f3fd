"""Runtime parameters and link status: ``/api/parameters[/{component}[/{vhost}[/{name}]]]``
(GET; PUT ``{"value": {...}}`` and DELETE on one parameter), ``/api/shovels[/{vhost}]`` and
``/api/federation-links[/{vhost}]``.

Changes go through ``host.admin_request`` (model/parameters.py via model/admin_commands.py),
so they are validated with RabbitMQ's texts, applied, persisted, and the shovels react
(amqpd/shell/links/). As in RabbitMQ, parameters need the policymaker (or administrator)
tag; the link status is listed for the vhosts the user sees.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.model.parameters import ParameterNotFound, get_parameter, list_parameters
from amqpd.shell.host import BrokerHost
from amqpd.shell.links.federation_status import status_json
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import bad_request, not_found
from amqpd.shell.management.render import Json


def _escape_html(text: str) -> str:
    """rabbit_mgmt_format:escape_html_tags, as RabbitMQ's 400 reasons have it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _visible(call: Call, items: list[dict[str, object]]) -> list[dict[str, object]]:
    return [item for item in items if call.visible(str(item["vhost"]))]


async def list_all(call: Call) -> Response:
    """GET /api/parameters."""
    call.principal.require_policymaker()
    return call.listing(_visible(call, list_parameters(call.broker)))


async def list_component(call: Call) -> Response:
    """GET /api/parameters/{component}."""
    call.principal.require_policymaker()
    items = list_parameters(call.broker, call.param("component"))
    return call.listing(_visible(call, items))


async def list_vhost(call: Call) -> Response:
    """GET /api/parameters/{component}/{vhost}."""
    call.principal.require_policymaker()
    vhost = call.access_vhost()
    return call.listing(list_parameters(call.broker, call.param("component"), vhost))


async def get_one(call: Call) -> Response:
    """GET /api/parameters/{component}/{vhost}/{name}."""
    call.principal.require_policymaker()
    vhost = call.access_vhost()
    try:
        item = get_parameter(call.broker, call.param("component"), vhost, call.param("name"))
    except ParameterNotFound as exc:
        raise not_found() from exc
    return call.item(item)


async def put_one(call: Call) -> Response:
    """PUT /api/parameters/{component}/{vhost}/{name} ``{"value": ...}``: 201 / 204."""
    call.principal.require_policymaker()
    vhost = call.access_vhost(creating=True)
    component, name = call.param("component"), call.param("name")
    body = await call.body()
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    exists = (component, vhost, name) in call.broker.access.state.parameters
    reply = await call.host.admin_request(
        {
            "group": "parameters",
            "command": "set-parameter",
            "component": component,
            "vhost": vhost,
            "name": name,
            "document": body["value"],
        }
    )
    if not reply.ok:
        text = reply.text + "\n" if reply.text.startswith("Validation") else reply.text
        raise bad_request(_escape_html(text))
    return created(not exists)


async def delete_one(call: Call) -> Response:
    """DELETE /api/parameters/{component}/{vhost}/{name}: 204, or 404."""
    call.principal.require_policymaker()
    vhost = call.access_vhost()
    component, name = call.param("component"), call.param("name")
    if (component, vhost, name) not in call.broker.access.state.parameters:
        raise not_found()
    reply = await call.host.admin_request(
        {
            "group": "parameters",
            "command": "clear-parameter",
            "component": component,
            "vhost": vhost,
            "name": name,
        }
    )
    if not reply.ok:
        raise bad_request(reply.text)
    return no_content()


async def shovels(call: Call) -> Response:
    """GET /api/shovels: every shovel's state (RabbitMQ's shovel management plugin)."""
    items = [item for item in call.host.shovel_status() if call.visible(item["vhost"])]
    return call.listing(items)


async def federation_links(call: Call) -> Response:
    """GET /api/federation-links: every federation link's state (RabbitMQ's federation
    management plugin), exchange and queue links."""
    node = call.broker.statistics.node
    items = [status_json(item, node) for item in call.host.federation_status()]
    return call.listing([item for item in items if call.visible(item["vhost"])])


async def federation_links_vhost(call: Call) -> Response:
    """GET /api/federation-links/{vhost}."""
    vhost = call.vhost_param()
    node = call.broker.statistics.node
    return Json([status_json(i, node) for i in call.host.federation_status(vhost.name)])


async def shovels_vhost(call: Call) -> Response:
    """GET /api/shovels/{vhost}."""
    vhost = call.vhost_param()
    return Json(call.host.shovel_status(vhost.name))


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The parameter and shovel routes."""
    return [
        route(host, "/api/parameters", get=list_all),
        route(host, "/api/parameters/{component}", get=list_component),
        route(host, "/api/parameters/{component}/{vhost}", get=list_vhost),
        route(
            host,
            "/api/parameters/{component}/{vhost}/{name}",
            get=get_one,
            put=put_one,
            delete=delete_one,
        ),
        route(host, "/api/shovels", get=shovels),
        route(host, "/api/federation-links", get=federation_links),
        route(host, "/api/federation-links/{vhost}", get=federation_links_vhost),
        route(host, "/api/shovels/{vhost}", get=shovels_vhost),
    ]
