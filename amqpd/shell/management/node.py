"""The node: /api/overview, /api/nodes[/{name}], /api/whoami, /api/extensions, the health
checks (/api/health/checks/alarms, /api/health/checks/local-alarms) and
/api/aliveness-test/{vhost}."""

from __future__ import annotations

from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from amqpd.engine import inventory, operations
from amqpd.shell.host import BrokerHost
from amqpd.shell.management.context import Call, route
from amqpd.shell.management.messages import content_header

ALIVENESS_QUEUE = "aliveness-test"
ALIVENESS_BODY = b"test_message"


async def overview(call: Call) -> Response:
    """GET /api/overview."""
    return JSONResponse(inventory.overview(call.broker, call.host.node_sample()))


async def nodes(call: Call) -> Response:
    """GET /api/nodes (monitoring)."""
    call.principal.require_monitor()
    return call.listing(inventory.nodes(call.broker, call.host.node_sample()))


async def one_node(call: Call) -> Response:
    """GET /api/nodes/{name} (monitoring)."""
    call.principal.require_monitor()
    name = call.param("name")
    found = [n for n in inventory.nodes(call.broker, call.host.node_sample()) if n["name"] == name]
    return call.item(found[0] if found else None)


async def whoami(call: Call) -> Response:
    """GET /api/whoami."""
    return JSONResponse({"name": call.principal.name, "tags": list(call.principal.tags)})


async def extensions(call: Call) -> Response:
    """GET /api/extensions: no UI plugins."""
    return JSONResponse([])


def _alarms(call: Call, where: str) -> Response:
    active = list(call.broker.alarms.active)
    if not active:
        return JSONResponse({"status": "ok"})
    node = call.broker.statistics.node
    return JSONResponse(
        {
            "status": "failed",
            "reason": f"resource alarm(s) in effect {where}",
            "alarms": [{"node": node, "resource": resource} for resource in active],
        },
        status_code=503,
    )


async def alarms(call: Call) -> Response:
    """GET /api/health/checks/alarms: 200 ok, or 503 with the alarms in effect."""
    return _alarms(call, "in the cluster")


async def local_alarms(call: Call) -> Response:
    """GET /api/health/checks/local-alarms (one node: the same as alarms)."""
    return _alarms(call, "on the node")


async def aliveness(call: Call) -> Response:
    """GET /api/aliveness-test/{vhost}: declare ``aliveness-test``, publish to it and get
    the message back, through the normal paths, as RabbitMQ does."""
    vhost = call.vhost_param()
    authz = call.authz(vhost)
    operations.declare_queue(vhost, authz, ALIVENESS_QUEUE, False, False, {})
    header = content_header({}, len(ALIVENESS_BODY))
    operations.publish(call.broker, vhost, authz, "", ALIVENESS_QUEUE, header, ALIVENESS_BODY)
    got = operations.get_messages(
        call.broker, vhost, authz, ALIVENESS_QUEUE, 1, "ack_requeue_false"
    )
    if not got or got[0].message.body != ALIVENESS_BODY:
        return JSONResponse({"status": "failed", "reason": "failed_to_get_message"})
    return JSONResponse({"status": "ok"})


def routes(host: BrokerHost) -> list[BaseRoute]:
    """The node routes."""
    return [
        route(host, "/api/overview", get=overview),
        route(host, "/api/nodes", get=nodes),
        route(host, "/api/nodes/{name}", get=one_node),
        route(host, "/api/whoami", get=whoami),
        route(host, "/api/extensions", get=extensions),
        route(host, "/api/health/checks/alarms", get=alarms),
        route(host, "/api/health/checks/local-alarms", get=local_alarms),
        route(host, "/api/aliveness-test/{vhost}", get=aliveness),
    ]
