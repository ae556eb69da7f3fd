"""Vhosts, users and permissions: /api/vhosts[/{vhost}], /api/users[/{name}],
/api/permissions[/{vhost}/{user}] and the per-user / per-vhost permission lists.

Changes go through the admin commands (amqpd/model/admin_commands.py) with
``host.admin_request``, the path ``amqpd users|vhosts`` takes: the broker applies them
(a deleted user's or vhost's connections are closed, permissions change on open channels)
and the shell persists the access state before answering.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.engine import inventory
from amqpd.model.auth import DEFAULT_HASHING, HASHING_ALGORITHMS, User, hash_password
from amqpd.shell.host import BrokerHost
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import ApiError, bad_request, not_found
from persistence.access import Permission


async def _admin(call: Call, request: dict[str, Any]) -> None:
    """Carry out an admin command; its refusal is a 400 with the command's text."""
    reply = await call.host.admin_request(request)
    if not reply.ok:
        raise bad_request(reply.text)


def _tags(value: Any) -> list[str]:
    """RabbitMQ's tags: a comma-separated string or a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [tag.strip() for tag in value.split(",") if tag.strip()]
    if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
        return [tag for tag in value if tag]
    raise bad_request(["invalid_tags", value])


# -- vhosts ----------------------------------------------------------------------------------
async def list_vhosts(call: Call) -> Response:
    """GET /api/vhosts: every vhost for monitoring users and administrators, the user's
    own otherwise."""
    items = inventory.vhosts(call.broker)
    if not call.principal.is_monitor:
        items = [item for item in items if call.visible(item["name"])]
    return call.listing(items)


async def get_vhost(call: Call) -> Response:
    """GET /api/vhosts/{vhost}."""
    name = call.param("vhost")
    if name not in call.broker.access.state.vhosts:
        raise not_found()
    if not (call.principal.is_monitor or call.visible(name)):
        raise ApiError(401, "not_authorised", "User not authorised to access virtual host")
    [item] = [item for item in inventory.vhosts(call.broker) if item["name"] == name]
    return call.item(item)


async def put_vhost(call: Call) -> Response:
    """PUT /api/vhosts/{vhost} (administrator): create it (the creating user gets full
    permissions there, as in RabbitMQ) or update its description and tags."""
    call.principal.require_admin()
    name = call.param("vhost")
    body = await call.body()
    request: dict[str, Any] = {"group": "vhosts", "command": "put", "name": name}
    if "description" in body:
        request["description"] = str(body["description"] or "")
    if "tags" in body:
        request["tags"] = _tags(body["tags"])
    existed = name in call.broker.access.state.vhosts
    await _admin(call, request)
    if not existed:
        await _admin(
            call,
            {
                "group": "users",
                "command": "set-permissions",
                "name": call.principal.name,
                "vhost": name,
                "configure": ".*",
                "write": ".*",
                "read": ".*",
            },
        )
    return created(not existed)


async def delete_vhost(call: Call) -> Response:
    """DELETE /api/vhosts/{vhost} (administrator)."""
    call.principal.require_admin()
    name = call.param("vhost")
    if name not in call.broker.access.state.vhosts:
        raise not_found()
    await _admin(call, {"group": "vhosts", "command": "delete", "name": name})
    return no_content()


# -- users -----------------------------------------------------------------------------------
def _limits(call: Call, user: User) -> dict[str, int] | None:
    return call.broker.access.state.user_limits.get(user.name)


def _user_item(user: User, limits: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": list(user.tags),
        "limits": dict(sorted((limits or {}).items())),
    }


async def list_users(call: Call) -> Response:
    """GET /api/users (administrator)."""
    call.principal.require_admin()
    return call.listing(
        [_user_item(u, _limits(call, u)) for u in call.broker.access.state.users.values()]
    )


async def users_without_permissions(call: Call) -> Response:
    """GET /api/users/without-permissions (administrator)."""
    call.principal.require_admin()
    state = call.broker.access.state
    with_permissions = {user for user, _vhost in state.permissions}
    users = [u for u in state.users.values() if u.name not in with_permissions]
    return call.listing([_user_item(u, _limits(call, u)) for u in users], ("name",))


async def get_user(call: Call) -> Response:
    """GET /api/users/{name} (administrator)."""
    call.principal.require_admin()
    user = call.broker.access.state.users.get(call.param("name"))
    return call.item(_user_item(user, _limits(call, user)) if user is not None else None)


async def put_user(call: Call) -> Response:
    """PUT /api/users/{name} (administrator): ``password`` or ``password_hash`` (+
    ``hashing_algorithm``) and ``tags`` (required, as in RabbitMQ)."""
    call.principal.require_admin()
    name = call.param("name")
    body = await call.body()
    if "tags" not in body:
        raise bad_request("tags_not_present")
    request: dict[str, Any] = {
        "group": "users",
        "command": "put",
        "name": name,
        "tags": _tags(body["tags"]),
    }
    algorithm = body.get("hashing_algorithm") or DEFAULT_HASHING
    if algorithm not in HASHING_ALGORITHMS:
        raise bad_request(["unknown_hashing_algorithm", algorithm])
    if body.get("password") is not None:
        if not isinstance(body["password"], str):
            raise bad_request(["not_string", body["password"]])
        request["password_hash"] = hash_password(body["password"], algorithm)
        request["hashing_algorithm"] = algorithm
    elif body.get("password_hash") is not None:
        request["password_hash"] = str(body["password_hash"])
        request["hashing_algorithm"] = algorithm
    existed = name in call.broker.access.state.users
    await _admin(call, request)
    return created(not existed)


async def delete_user(call: Call) -> Response:
    """DELETE /api/users/{name} (administrator)."""
    call.principal.require_admin()
    name = call.param("name")
    if name not in call.broker.access.state.users:
        raise not_found()
    await _admin(call, {"group": "users", "command": "delete", "name": name})
    return no_content()


# -- permissions -----------------------------------------------------------------------------
def _permission_item(user: str, vhost: str, permission: Permission) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }


def _permissions(call: Call, user: str | None = None, vhost: str | None = None) -> Response:
    call.principal.require_admin()
    items = [
        _permission_item(u, v, p)
        for (u, v), p in call.broker.access.state.permissions.items()
        if (user is None or u == user) and (vhost is None or v == vhost)
    ]
    return call.listing(items)


async def list_permissions(call: Call) -> Response:
    """GET /api/permissions (administrator)."""
    return _permissions(call)


async def user_permissions(call: Call) -> Response:
    """GET /api/users/{name}/permissions (administrator)."""
    call.principal.require_admin()
    name = call.param("name")
    if name not in call.broker.access.state.users:
        raise not_found()
    return _permissions(call, user=name)


async def vhost_permissions(call: Call) -> Response:
    """GET /api/vhosts/{vhost}/permissions (administrator)."""
    call.principal.require_admin()
    name = call.param("vhost")
    if name not in call.broker.access.state.vhosts:
        raise not_found()
    return _permissions(call, vhost=name)


async def get_permission(call: Call) -> Response:
    """GET /api/permissions/{vhost}/{user} (administrator)."""
    call.principal.require_admin()
    user, vhost = call.param("user"), call.param("vhost")
    permission = call.broker.access.state.permissions.get((user, vhost))
    return call.item(_permission_item(user, vhost, permission) if permission else None)


async def put_permission(call: Call) -> Response:
    """PUT /api/permissions/{vhost}/{user} (administrator): configure, write, read."""
    call.principal.require_admin()
    user, vhost = call.param("user"), call.param("vhost")
    body = await call.body()
    missing = [key for key in ("configure", "write", "read") if key not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")
    state = call.broker.access.state
    if user not in state.users or vhost not in state.vhosts:
        raise bad_request("vhost_or_user_not_found")
    existed = (user, vhost) in state.permissions
    await _admin(
        call,
        {
            "group": "users",
            "command": "set-permissions",
            "name": user,
            "vhost": vhost,
            "configure": str(body["configure"]),
            "write": str(body["write"]),
            "read": str(body["read"]),
        },
    )
    return created(not existed)


async def delete_permission(call: Call) -> Response:
    """DELETE /api/permissions/{vhost}/{user} (administrator)."""
    call.principal.require_admin()
    user, vhost = call.param("user"), call.param("vhost")
    if (user, vhost) not in call.broker.access.state.permissions:
        raise not_found()
    await _admin(
        call, {"group": "users", "command": "clear-permissions", "name": user, "vhost": vhost}
    )
    return no_content()


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The vhost, user and permission routes."""
    return [
        route(host, "/api/vhosts", get=list_vhosts),
        route(host, "/api/vhosts/{vhost}", get=get_vhost, put=put_vhost, delete=delete_vhost),
        route(host, "/api/vhosts/{vhost}/permissions", get=vhost_permissions),
        route(host, "/api/users", get=list_users),
        route(host, "/api/users/without-permissions", get=users_without_permissions),
        route(host, "/api/users/{name}", get=get_user, put=put_user, delete=delete_user),
        route(host, "/api/users/{name}/permissions", get=user_permissions),
        route(host, "/api/permissions", get=list_permissions),
        route(
            host,
            "/api/permissions/{vhost}/{user}",
            get=get_permission,
            put=put_permission,
            delete=delete_permission,
        ),
    ]
