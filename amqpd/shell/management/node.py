"""The node: /api/overview, /api/nodes[/{name}], /api/whoami, /api/extensions,
/api/cluster-name, the health checks (/api/health/checks/alarms, local-alarms,
virtual-hosts, port-listener/{port}, protocol-listener/{protocol}) and
/api/aliveness-test/{vhost}."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute

from amqpd import BUILD
from amqpd.engine import client_inventory, inventory, node_inventory, operations
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import ranges
from amqpd.shell.management.context import Call, no_content, route
from amqpd.shell.management.errors import bad_request
from amqpd.shell.management.messages import content_header
from amqpd.shell.management.render import Json

ALIVENESS_QUEUE = "aliveness-test"
ALIVENESS_BODY = b"test_message"
_PROTOCOL_ALIASES = {"amqp091": "amqp", "amqp0.9.1": "amqp", "amqp0-9-1": "amqp"}


async def overview(call: Call) -> Response:
    """GET /api/overview. Users without the monitoring tag get object and queue totals of
    their own vhosts, connections and channels (RabbitMQ narrows them the same way).

    With several workers the gateway sums the workers' object totals (amqpd/shell/workers/
    gateway.py); a spread vhost's exchanges are counted by worker 0 only
    (`node_inventory.counts_exchanges`)."""
    item = node_inventory.overview(call.broker, call.host.node_sample())
    item["amqpd_build"] = BUILD.kind  # "mypyc" or "pure" (amqpd/buildinfo.py)
    if not call.principal.is_monitor:
        _narrow(call, item)
    return Json(ranges.overview(call, item))


def _narrow(call: Call, item: dict[str, Any]) -> None:
    broker = call.broker
    vhosts = [host for name, host in broker.vhosts.items() if call.visible(name)]
    queues = [q for host in vhosts for q in inventory.queues(broker, host.name)]
    connections = [c for c in client_inventory.connections(broker) if call.sees_client(c["user"])]
    item["object_totals"] = {
        "connections": len(connections),
        "channels": sum(c["channels"] for c in connections),
        "exchanges": sum(
            len(host.exchanges) for host in vhosts if node_inventory.counts_exchanges(host)
        ),
        "queues": len(queues),
        "consumers": sum(q["consumers"] for q in queues),
    }
    totals = item["queue_totals"]
    for key in ("messages", "messages_ready", "messages_unacknowledged"):
        totals[key] = sum(q[key] for q in queues)


async def nodes(call: Call) -> Response:
    """GET /api/nodes (monitoring)."""
    call.principal.require_monitor()
    return call.listing(node_inventory.nodes(call.broker, call.host.node_sample()))


async def one_node(call: Call) -> Response:
    """GET /api/nodes/{name} (monitoring)."""
    call.principal.require_monitor()
    name = call.param("name")
    found = [
        n for n in node_inventory.nodes(call.broker, call.host.node_sample()) if n["name"] == name
    ]
    return call.item(found[0] if found else None)


async def whoami(call: Call) -> Response:
    """GET /api/whoami."""
    return Json({"name": call.principal.name, "tags": list(call.principal.tags)})


async def extensions(call: Call) -> Response:
    """GET /api/extensions: no UI plugins."""
    return Json([])


def _alarms(call: Call, where: str) -> Response:
    active = list(call.broker.alarms.active)
    if not active:
        return Json({"status": "ok"})
    node = call.broker.statistics.node
    return Json(
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


async def virtual_hosts(call: Call) -> Response:
    """GET /api/health/checks/virtual-hosts: every vhost is running (always, here)."""
    return Json({"status": "ok"})


def _listener_failed(missing: object, key: str, present: list[object]) -> Response:
    return Json(
        {"status": "failed", "reason": "No active listener", "missing": missing, key: present},
        status_code=503,
    )


async def port_listener(call: Call) -> Response:
    """GET /api/health/checks/port-listener/{port}: 200 if the node listens on it."""
    try:
        port = int(call.param("port"))
    except ValueError as exc:
        raise bad_request("Invalid port") from exc
    ports = [listener["port"] for listener in call.host.node_sample().listeners]
    if port not in ports:
        return _listener_failed(port, "ports", ports)
    return Json({"status": "ok", "port": port})


async def protocol_listener(call: Call) -> Response:
    """GET /api/health/checks/protocol-listener/{protocol} (amqp091 means amqp)."""
    protocol = call.param("protocol").lower()
    protocol = _PROTOCOL_ALIASES.get(protocol, protocol)
    listeners = call.host.node_sample().listeners
    protocols = list(dict.fromkeys(item["protocol"] for item in listeners))
    if protocol not in protocols:
        return _listener_failed(protocol, "protocols", protocols)
    return Json({"status": "ok", "protocol": protocol})


async def single_node(call: Call) -> Response:
    """GET /api/health/checks/node-is-quorum-critical and node-is-mirror-sync-critical:
    a single node is never critical for its peers."""
    return Json({"status": "ok", "reason": "single node cluster"})


async def ok(call: Call) -> Response:
    """GET /api/health/checks/certificate-expiration/{within}/{unit} (the certificates are
    checked when the listener starts) and the deprecated /api/healthchecks/node[/{node}]:
    the node answers, so it runs."""
    return Json({"status": "ok"})


async def cluster_name(call: Call) -> Response:
    """GET /api/cluster-name: the cluster name (the node's name unless one was set)."""
    return Json({"name": call.broker.cluster_name})


async def set_cluster_name(call: Call) -> Response:
    """PUT /api/cluster-name ``{"name": ...}``: RabbitMQ keeps it as the global parameter
    ``cluster_name`` (administrator only); federation links restart with it."""
    call.principal.require_admin()
    body = await call.body()
    if "name" not in body:
        raise bad_request("[{key_missing,name}]")
    name = body["name"]
    if not isinstance(name, str) or not name:
        raise bad_request("name must be a non-empty string")  # RabbitMQ: a 500
    request = {"group": "parameters", "command": "set-cluster-name", "name": name}
    reply = await call.host.admin_request(request)
    if not reply.ok:
        raise bad_request(reply.text)
    return no_content()


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
        return Json({"status": "failed", "reason": "failed_to_get_message"})
    return Json({"status": "ok"})


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
        route(host, "/api/health/checks/virtual-hosts", get=virtual_hosts),
        route(host, "/api/health/checks/port-listener/{port}", get=port_listener),
        route(host, "/api/health/checks/protocol-listener/{protocol}", get=protocol_listener),
        route(host, "/api/health/checks/node-is-quorum-critical", get=single_node),
        route(host, "/api/health/checks/node-is-mirror-sync-critical", get=single_node),
        route(host, "/api/health/checks/certificate-expiration/{within}/{unit}", get=ok),
        route(host, "/api/healthchecks/node", get=ok),
        route(host, "/api/healthchecks/node/{node}", get=ok),
        route(host, "/api/cluster-name", get=cluster_name, put=set_cluster_name),
        route(host, "/api/aliveness-test/{vhost}", get=aliveness),
    ]
