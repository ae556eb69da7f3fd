"""RabbitMQ 3.10.8's operator endpoints that tools read: ``/api/user-limits[/{user}]``
(PUT / DELETE ``/api/user-limits/{user}/{name}``, ``{"value": N}``),
``/api/global-parameters[/{name}]`` (RabbitMQ lists ``internal_cluster_id``; PUT
``{"value": ...}``, DELETE), ``/api/topic-permissions`` and ``/api/nodes/{node}/memory``.

Changes go through the admin commands (validated with RabbitMQ's texts, applied at once,
persisted). Topic permissions: amqpd has none (its permissions are per vhost), so the
listings are empty and a PUT is refused with a 400 that says so, never accepted and
ignored.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import memory
from amqpd.model.global_parameters import global_json
from amqpd.model.user_limits import limits_json
from amqpd.shell.host import BrokerHost
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import bad_request, not_found
from amqpd.shell.management.render import Json

STORE_CACHE_MAX: Final = 16 * 1024 * 1024  # SQLite's writer cache (persistence/store.py)


async def _admin(call: Call, request: dict[str, Any]) -> None:
    reply = await call.host.admin_request(request)
    if not reply.ok:
        raise bad_request(reply.text)


# -- user limits ---------------------------------------------------------------------------
async def list_user_limits(call: Call) -> Response:
    """GET /api/user-limits: every user with limits (``[]`` when none)."""
    call.principal.require_monitor()
    return Json(limits_json(call.broker.access.state.user_limits))


async def user_limits_of(call: Call) -> Response:
    """GET /api/user-limits/{user}: 404 for an unknown user, ``[]`` without limits."""
    call.principal.require_monitor()
    user = call.param("user")
    state = call.broker.access.state
    if user not in state.users:
        raise not_found()
    return Json(limits_json(state.user_limits, user))


async def _limit_request(call: Call, command: str) -> dict[str, Any]:
    call.principal.require_admin()
    user = call.param("user")
    if user not in call.broker.access.state.users:
        raise bad_request(["no_such_user", user])
    return {"group": "users", "command": command, "user": user, "name": call.param("name")}


async def put_user_limit(call: Call) -> Response:
    """PUT /api/user-limits/{user}/{name} ``{"value": N}``."""
    request = await _limit_request(call, "set-limit")
    body = await call.body()
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    await _admin(call, {**request, "value": body["value"]})
    return no_content()


async def delete_user_limit(call: Call) -> Response:
    """DELETE /api/user-limits/{user}/{name}."""
    await _admin(call, await _limit_request(call, "clear-limit"))
    return no_content()


# -- global parameters ---------------------------------------------------------------------
async def list_globals(call: Call) -> Response:
    """GET /api/global-parameters (policymakers)."""
    call.principal.require_policymaker()
    return call.listing(global_json(call.broker.access.state), ("name",))


async def get_global(call: Call) -> Response:
    """GET /api/global-parameters/{name}."""
    call.principal.require_policymaker()
    name = call.param("name")
    found = [item for item in global_json(call.broker.access.state) if item["name"] == name]
    return call.item(found[0] if found else None)


async def put_global(call: Call) -> Response:
    """PUT /api/global-parameters/{name} ``{"value": ...}``: 201 new, 204 replaced."""
    call.principal.require_admin()
    body = await call.body()
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    name = call.param("name")
    new = name not in call.broker.access.state.global_parameters
    await _admin(call, {"group": "parameters", "command": "set-global", "name": name, **body})
    return created(new)


async def delete_global(call: Call) -> Response:
    """DELETE /api/global-parameters/{name}: 404 if there is none."""
    call.principal.require_admin()
    name = call.param("name")
    if name not in call.broker.access.state.global_parameters:
        raise not_found()
    await _admin(call, {"group": "parameters", "command": "clear-global", "name": name})
    return no_content()


# -- topic permissions ---------------------------------------------------------------------
async def list_topic_permissions(call: Call) -> Response:
    """GET /api/topic-permissions (and per vhost / user): none in amqpd."""
    call.principal.require_admin()
    if "vhost" in call.request.path_params and call.param("vhost") not in call.broker.vhosts:
        raise not_found()
    params = call.request.path_params
    if "user" in params and call.param("user") not in call.broker.access.state.users:
        raise not_found()
    return Json([])


async def put_topic_permission(call: Call) -> Response:
    """PUT /api/topic-permissions/{vhost}/{user}: refused (not accepted and ignored)."""
    call.principal.require_admin()
    raise bad_request(
        "topic permissions are not supported by amqpd: its permissions are per vhost "
        "(configure, write, read)"
    )


# -- node memory ---------------------------------------------------------------------------
async def node_memory(call: Call) -> Response:
    """GET /api/nodes/{node}/memory: RabbitMQ 3.10.8's shape with amqpd's estimate
    (amqpd/engine/memory.py); 404 for another node."""
    call.principal.require_monitor()
    sample = call.host.node_sample()
    if call.param("node") != sample.name:
        raise not_found()
    cache = min(sample.store_bytes, STORE_CACHE_MAX)
    return Json({"memory": memory.breakdown(call.broker, sample.mem_used, cache)})


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The routes of this module."""
    topic = {"get": list_topic_permissions}
    return [
        route(host, "/api/user-limits", get=list_user_limits),
        route(host, "/api/user-limits/{user}", get=user_limits_of),
        route(host, "/api/user-limits/{user}/{name}", put=put_user_limit, delete=delete_user_limit),
        route(host, "/api/global-parameters", get=list_globals),
        route(
            host,
            "/api/global-parameters/{name}",
            get=get_global,
            put=put_global,
            delete=delete_global,
        ),
        route(host, "/api/topic-permissions", **topic),
        route(host, "/api/topic-permissions/{vhost}", **topic),
        route(host, "/api/topic-permissions/{vhost}/{user}", **topic, put=put_topic_permission),
        route(host, "/api/users/{user}/topic-permissions", **topic),
        route(host, "/api/vhosts/{vhost}/topic-permissions", **topic),
        route(host, "/api/nodes/{node}/memory", get=node_memory),
    ]
