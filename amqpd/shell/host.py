"""What the HTTP applications (management API, Prometheus metrics) need from the server.

A Protocol, so that the applications do not import `amqpd.shell.server` (which imports them):
the server passes itself in.
"""

from __future__ import annotations

from typing import Any, Protocol

from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from amqpd.shell.admin_socket import AdminReply
from amqpd.shell.links.federation_status import FederationLinkStatus


class BrokerHost(Protocol):
    """The running server as the HTTP side sees it."""

    broker: Broker

    def node_sample(self) -> NodeSample:
        """The process measured now (memory, file descriptors, disk, uptime, listeners)."""
        ...

    def after_core(self) -> None:
        """Act on what the core reported (wake writers, the committer): call it after every
        change made to the broker (declare, delete, purge, publish, close)."""
        ...

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """The shovels' state (RabbitMQ's /api/shovels items), of one vhost or all."""
        ...

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]:
        """The federation links' state (exchange and queue links), of one vhost or all."""
        ...

    async def admin_request(self, request: dict[str, Any]) -> AdminReply:
        """Carry out an admin-socket request (users, vhosts, definitions, ctl) and persist it."""
        ...
