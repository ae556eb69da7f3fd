"""Every link a running server runs: its shovels (supervisor.py), its federated exchanges'
links (federation.py) and its federated queues' links (queue_federation.py).

They start once the AMQP listener is up (they reach the local broker over AMQP, as the
internal user with a secret made for this run), are reconciled after every admin command
(parameters and policies may have changed), and are closed first at shutdown, so that what
they had not handed over goes back to its queue (upstream queues of federated exchanges are
kept). The server's ``after_core`` follows topology and demand changes through
`exchange_federation` and `queue_federation` directly.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Final

import anyio

from amqpd.model.auth import INTERNAL_USER
from amqpd.model.broker import Broker
from amqpd.shell.links.federation import ExchangeFederation
from amqpd.shell.links.federation_status import FederationLinkStatus, FederationStatusSource
from amqpd.shell.links.link_specs import LocalEndpoint
from amqpd.shell.links.queue_federation import QueueFederation
from amqpd.shell.links.supervisor import Finished, LinkSupervisor

log = logging.getLogger(__name__)
CLOSE_GRACE: Final = 10.0  # seconds the links have to stop at shutdown


class NodeLinks:
    """The shovels and federation links of one server (None until `start`)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.shovels: LinkSupervisor | None = None
        self.exchange_federation: ExchangeFederation | None = None  # federated exchanges
        self.queue_federation: QueueFederation | None = None  # federated queues
        # the federation link supervisors (exchange side, queue side)
        self.federation_sources: list[FederationStatusSource] = []

    def start(
        self, host: str, port: int, shovel_finished: Finished, secret: str | None = None
    ) -> None:
        """Run the stored shovels and federation links; they reach the local broker at
        ``host``:``port`` as the internal user (its secret made now, or ``secret``: worker
        0's, for all workers of a node, amqpd/shell/workers/front.py)."""
        broker = self.broker
        secret = secret or secrets.token_urlsafe(32)
        broker.access.internal_secret = secret
        local = LocalEndpoint(host, port, INTERNAL_USER, secret)
        self.shovels = LinkSupervisor(broker, local, broker.statistics.node, shovel_finished)
        self.shovels.reconcile()
        self.exchange_federation = ExchangeFederation(broker, local)
        self.federation_sources.append(self.exchange_federation)
        self.exchange_federation.reconcile()
        self.queue_federation = QueueFederation(broker, local)
        self.federation_sources.append(self.queue_federation)
        self.queue_federation.start()

    def reconcile(self) -> None:
        """Follow an admin command: shovel parameters, federation upstreams and policies may
        have changed."""
        if self.shovels is not None:
            self.shovels.reconcile()
        if self.exchange_federation is not None:
            self.exchange_federation.reconcile()
        if self.queue_federation is not None:
            self.queue_federation.reconcile()

    async def aclose(self) -> None:
        """Stop the shovels and federation links; what they had not handed over goes back
        to its queue (upstream queues of federated exchanges are kept). Bounded: links
        that have not stopped within CLOSE_GRACE (a peer that never answers) are left to
        the broker's own shutdown, which closes their connections too."""
        with anyio.move_on_after(CLOSE_GRACE) as bounded:
            if self.shovels is not None:
                await self.shovels.aclose()
            if self.exchange_federation is not None:
                await self.exchange_federation.aclose()
            if self.queue_federation is not None:
                await self.queue_federation.aclose()
        if bounded.cancelled_caught:
            log.warning("links still closing after %.0f s; shutting down anyway", CLOSE_GRACE)

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """The shovels' state, as RabbitMQ's /api/shovels lists it."""
        return [] if self.shovels is None else self.shovels.status(vhost)

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]:
        """Every federation link's status (exchange and queue links), of one vhost or all."""
        return [
            item
            for source in self.federation_sources
            for item in source.federation_status()
            if vhost is None or item.vhost == vhost
        ]
