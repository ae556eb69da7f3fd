"""Policies and operator policies: /api/policies[/{vhost}[/{name}]] and
/api/operator-policies[/{vhost}[/{name}]] (rabbit_mgmt_wm_policies / _policy /
_operator_policies / _operator_policy of RabbitMQ 3.10, compared side by side).

* Listings: any management user, the policies of the vhosts it sees, sorted by priority
  (then vhost and name); ``sort`` and ``columns`` apply, ``page`` is ignored (RabbitMQ
  answers a plain list here too).
* One policy (GET / PUT / DELETE): policymaker or administrator, in a vhost it sees,
  else 401 "User not authorised to access object"; one operator policy: administrator
  ("Not administrator user").
* PUT ``{"pattern", "definition", "priority", "apply-to"}``: 201 created, 204 replaced,
  404 ``vhost_not_found``, 400 ``[{key_missing,K}]`` or RabbitMQ's validation text (for
  policies with ``<``, ``>``, ``&`` HTML-escaped, as RabbitMQ does there and not for
  operator policies). A JSON number that is not an integer is refused as a priority.
* Changes go through the admin commands (``host.admin_request``, the path ``amqpd ctl
  set-policy`` takes), so they are applied live and persisted before the answer.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd.model.policies import PolicyError, PolicyRecord, policy_json, validate
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import auth, body, listing
from amqpd.shell.management.context import Call, created, no_content, route
from amqpd.shell.management.errors import (
    bad_request,
    not_authorised,
    not_found,
    vhost_not_found,
)
from amqpd.shell.management.render import Json

NOT_AUTHORISED_OBJECT = "User not authorised to access object"


def _table(call: Call, operator: bool) -> dict[tuple[str, str], PolicyRecord]:
    state = call.broker.access.state
    return state.operator_policies if operator else state.policies


def _escape_html(text: str) -> str:
    """rabbit_mgmt_format:escape_html_tags."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- listings --------------------------------------------------------------------------
def _listing(call: Call, operator: bool, vhost: str | None) -> Response:
    if vhost is not None:
        call.access_vhost()  # 404 for a missing vhost, 401 for one the user does not see
    items = [
        policy_json(policy)
        for (owner, _name), policy in sorted(_table(call, operator).items())
        if (vhost is None or owner == vhost) and call.visible(owner)
    ]
    query = {key: value for key, value in call.request.query_params.items() if key != "page"}
    return Json(listing.present(items, query, ("priority",)))


async def list_policies(call: Call) -> Response:
    """GET /api/policies."""
    return _listing(call, False, None)


async def list_vhost_policies(call: Call) -> Response:
    """GET /api/policies/{vhost}."""
    return _listing(call, False, call.param("vhost"))


async def list_operator_policies(call: Call) -> Response:
    """GET /api/operator-policies."""
    return _listing(call, True, None)


async def list_vhost_operator_policies(call: Call) -> Response:
    """GET /api/operator-policies/{vhost}."""
    return _listing(call, True, call.param("vhost"))


# -- one policy ------------------------------------------------------------------------
def _authorise(call: Call, operator: bool) -> tuple[str, str]:
    """(vhost, name) of the path, if this user may act on that (operator) policy."""
    vhost, name = call.param("vhost"), call.param("name")
    if operator:
        call.principal.require_admin()
        return vhost, name
    exists = vhost in call.broker.access.state.vhosts
    if not call.principal.is_policymaker or (
        exists and not auth.can_see_vhost(call.broker.access, call.principal, vhost)
    ):
        raise not_authorised(NOT_AUTHORISED_OBJECT)
    return vhost, name


async def _get(call: Call, operator: bool) -> Response:
    vhost, name = _authorise(call, operator)
    policy = _table(call, operator).get((vhost, name))
    return call.item(policy_json(policy) if policy is not None else None)


async def _put(call: Call, operator: bool) -> Response:
    vhost, name = _authorise(call, operator)
    if vhost not in call.broker.access.state.vhosts:
        raise vhost_not_found()
    document = await call.body()
    body.require(document, "pattern", "definition")
    try:
        policy = validate(
            vhost,
            name,
            document["pattern"],
            document["definition"],
            document.get("priority", 0),
            document.get("apply-to", "all"),
            operator,
            priority_text=False,
            warn=False,  # the admin command that applies it warns
        )
    except PolicyError as exc:
        raise bad_request(str(exc) if operator else _escape_html(str(exc))) from exc
    existed = (vhost, name) in _table(call, operator)
    command = "set-operator-policy" if operator else "set-policy"
    await _admin(
        call,
        {
            "group": "policies",
            "command": command,
            "vhost": vhost,
            "name": name,
            "pattern": policy.pattern,
            "definition": json.dumps(policy.definition),
            "priority": policy.priority,
            "apply_to": policy.apply_to,
        },
    )
    return created(not existed)


async def _delete(call: Call, operator: bool) -> Response:
    vhost, name = _authorise(call, operator)
    if (vhost, name) not in _table(call, operator):
        raise not_found()
    command = "clear-operator-policy" if operator else "clear-policy"
    await _admin(call, {"group": "policies", "command": command, "vhost": vhost, "name": name})
    return no_content()


async def _admin(call: Call, request: dict[str, Any]) -> None:
    reply = await call.host.admin_request(request)
    if not reply.ok:
        raise bad_request(reply.text)


async def get_policy(call: Call) -> Response:
    """GET /api/policies/{vhost}/{name}."""
    return await _get(call, False)


async def put_policy(call: Call) -> Response:
    """PUT /api/policies/{vhost}/{name}."""
    return await _put(call, False)


async def delete_policy(call: Call) -> Response:
    """DELETE /api/policies/{vhost}/{name}."""
    return await _delete(call, False)


async def get_operator_policy(call: Call) -> Response:
    """GET /api/operator-policies/{vhost}/{name}."""
    return await _get(call, True)


async def put_operator_policy(call: Call) -> Response:
    """PUT /api/operator-policies/{vhost}/{name}."""
    return await _put(call, True)


async def delete_operator_policy(call: Call) -> Response:
    """DELETE /api/operator-policies/{vhost}/{name}."""
    return await _delete(call, True)


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The policy and operator-policy routes."""
    return [
        route(host, "/api/policies", get=list_policies),
        route(host, "/api/policies/{vhost}", get=list_vhost_policies),
        route(
            host,
            "/api/policies/{vhost}/{name}",
            get=get_policy,
            put=put_policy,
            delete=delete_policy,
        ),
        route(host, "/api/operator-policies", get=list_operator_policies),
        route(host, "/api/operator-policies/{vhost}", get=list_vhost_operator_policies),
        route(
            host,
            "/api/operator-policies/{vhost}/{name}",
            get=get_operator_policy,
            put=put_operator_policy,
            delete=delete_operator_policy,
        ),
    ]
