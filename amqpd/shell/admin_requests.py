"""What the admin socket's requests do (``amqpd ctl``, ``amqpd users|vhosts|definitions``).

A ``ctl`` request reads the live broker (listings, status), closes a connection or changes
an alarm's limit (amqpd/shell/alarm_limits.py); any
other request changes the access state (`amqpd.model.admin_commands`), which is then saved
after everything it journaled has been committed. A standby node (PostgreSQL) answers
``status`` and ``ping`` only. Worker 0 of several answers for the whole node
(amqpd/shell/workers/node.py): a vhost's listing from its worker, node-wide listings
merged, definitions split and gathered by vhost.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from amqpd.engine import ctl_commands
from amqpd.model.admin_commands import AdminError, execute, problems_text
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from amqpd.shell import alarm_limits
from amqpd.shell.admin_socket import AdminReply
from amqpd.shell.links.federation_status import FederationLinkStatus, federation_table
from amqpd.shell.links.node_links import NodeLinks
from amqpd.shell.links.supervisor import shovel_table
from amqpd.shell.workers.node import WorkerNode
from persistence.errors import StoreError

log = logging.getLogger("amqpd.shell.server")


class AdminHost(Protocol):
    """What the requests need of the server (amqpd/shell/server.py)."""

    broker: Broker
    links: NodeLinks
    node: WorkerNode | None

    @property
    def role(self) -> str: ...

    @property
    def shared_store(self) -> bool: ...

    def node_sample(self) -> NodeSample: ...

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]: ...

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]: ...

    def after_core(self) -> None: ...

    async def save_access(self) -> None: ...


async def answer(host: AdminHost, request: dict[str, Any]) -> AdminReply:
    """Carry out one admin request on the live broker; changes are saved before the reply."""
    if host.role != "active" and host.shared_store:
        if request.get("group") == "ctl" and request.get("command") in ("status", "ping"):
            return AdminReply(True, json.dumps(_ctl(host, request)))
        return AdminReply(False, f"this node is {host.role}: ask the active node")
    workers = host.node if host.node is not None and host.node.front is not None else None

    async def here(request: dict[str, Any]) -> AdminReply:
        return await _read(host, request)

    async def change(request: dict[str, Any]) -> AdminReply:
        return await _change(host, request)

    if request.get("group") == "ctl":  # amqpd ctl: listings, status, close-connection
        return await (here(request) if workers is None else workers.ctl(request, here))
    if request.get("group") == "definitions" and workers is not None:
        return await workers.definitions(request, change)
    return await change(request)


def _ctl(host: AdminHost, request: dict[str, Any]) -> Any:
    return ctl_commands.execute(host.broker, request, host.node_sample())


async def _read(host: AdminHost, request: dict[str, Any]) -> AdminReply:
    """An ``amqpd ctl`` request answered from this process's broker and links."""
    node = host.broker.statistics.node
    if request.get("command") == "list-shovels":
        return AdminReply(True, json.dumps(shovel_table(host.shovel_status(), node)))
    if request.get("command") == "list-federation-links":
        return AdminReply(True, json.dumps(federation_table(host.federation_status(), node)))
    if request.get("command") in alarm_limits.COMMANDS:  # checked at the next measurement
        try:
            other_worker = host.node is not None and host.node.front is None  # 0 logs it
            limit = alarm_limits.apply(host.broker.alarms, request, quiet=other_worker)
        except AdminError as exc:
            return AdminReply(False, str(exc))
        return AdminReply(True, json.dumps({"node": node, "limit": limit}))
    try:
        answered = _ctl(host, request)
    except AdminError as exc:
        return AdminReply(False, str(exc))
    finally:
        host.after_core()  # a closed connection's Connection.Close
    return AdminReply(True, json.dumps(answered))


async def _change(host: AdminHost, request: dict[str, Any]) -> AdminReply:
    """An ``amqpd users|vhosts|definitions`` (or ctl policy) change, then saved."""
    try:
        outcome = execute(host.broker, request)
    except AdminError as exc:
        return AdminReply(False, str(exc))
    finally:
        host.after_core()  # closed connections, journaled deletions
        host.links.reconcile()  # shovel and federation parameters, policies
    log.info("admin: %s %s", request.get("group"), request.get("command"))
    if outcome.changed:
        try:
            await host.save_access()
        except StoreError as exc:
            log.error("admin: could not save access control: %s", exc)
            return AdminReply(
                False,
                f"the change is in effect but could not be saved ({exc}); it will be "
                "lost when the broker restarts unless it is made again",
            )
    if outcome.problems:  # partly applied (and saved): the command still fails
        return AdminReply(False, problems_text(outcome))
    return AdminReply(True, outcome.output)
