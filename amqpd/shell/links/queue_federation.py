"""Starts, stops and steers the links of federated queues (the I/O shell's side).

The core knows which queues are federated and whether each wants messages
(amqpd/model/federated_queues.py); the upstreams a queue federates from follow from its
policy and the ``federation-upstream`` / ``federation-upstream-set`` parameters
(amqpd/model/federation.py `resolve`). `QueueFederation` turns both into running links
(amqpd/shell/links/federated_queue.py), one asyncio task per (queue, upstream):

* `follow` runs after every step of the core (`Server.after_core`, only when a federated
  queue is dirty): a queue that became federated gets its links, one that stopped being
  federated (its policy changed, it was deleted) loses them, and a demand flip is handed
  to the queue's links, which consume or cancel upstream;
* `reconcile` runs after every admin change (parameters, policies): each federated
  queue's links are made to match its resolved upstreams (a changed upstream restarts
  its link, as RabbitMQ restarts a link whose upstream changed).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import TYPE_CHECKING

from amqpd.model.broker import Broker
from amqpd.model.federated_queues import DemandChange
from amqpd.model.federation import Upstream, resolve
from amqpd.model.queue import Queue
from amqpd.shell.links.federation_status import FederationLinkStatus
from amqpd.shell.links.link_specs import Demand, LocalEndpoint, LocalQueue

if TYPE_CHECKING:  # imported by the first link (link_specs.py: aiormq only when used)
    from amqpd.shell.links.federated_queue import QueueLink

__all__ = ["QueueFederation"]

log = logging.getLogger(__name__)


class _Federated:
    """One federated queue: its demand and its links by upstream name."""

    __slots__ = ("demand", "links")

    def __init__(self, wants: bool) -> None:
        self.demand = Demand(wants)
        self.links: dict[str, tuple[Upstream, QueueLink, asyncio.Task[None]]] = {}


class QueueFederation:
    """The links of the broker's federated queues (a `FederationStatusSource`)."""

    def __init__(self, broker: Broker, local: LocalEndpoint) -> None:
        self._broker = broker
        self._local = local
        self._queues: dict[Queue, _Federated] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    # -- input --------------------------------------------------------------------------
    def follow(self, changes: list[DemandChange]) -> None:
        """Act on what the core reported (`FederatedQueues.take`). Runs inside the
        server's `after_core`: a failure here is logged, never raised into a reader."""
        try:
            self._follow(changes)
        except Exception:  # a bug in federation must not take connections down
            log.exception("federated queues: acting on %d changes failed", len(changes))

    def _follow(self, changes: list[DemandChange]) -> None:
        for change in changes:
            queue = change.queue
            federated = self._queues.get(queue)
            if not change.federated:
                if federated is not None:
                    self._drop(queue, federated)
                continue
            if federated is None:
                federated = self._queues[queue] = _Federated(change.wants)
                self._sync(queue, federated)
            else:
                federated.demand.set(change.wants)

    def reconcile(self) -> None:
        """Make every federated queue's links match its upstreams (after admin changes)."""
        self.follow(self._broker.federated_queues.take())
        for queue, federated in list(self._queues.items()):
            try:
                self._sync(queue, federated)
            except Exception:  # one queue's trouble must not stop the others' links
                log.exception("federated queue '%s' in vhost '%s'", queue.name, queue.vhost_name)

    def start(self) -> None:
        """Take over the queues the core federates now (the links start)."""
        tracker = self._broker.federated_queues
        tracker.take()
        for queue, wants in tracker.reported.items():
            if queue not in self._queues:
                self._queues[queue] = _Federated(wants)
        self.reconcile()

    # -- links --------------------------------------------------------------------------
    def _sync(self, queue: Queue, federated: _Federated) -> None:
        policy = queue.policy
        upstreams = resolve(
            self._broker.access.state.parameters,
            queue.vhost_name,
            None if policy is None else policy.definition,
        )
        wanted = {upstream.name: upstream for upstream in upstreams}
        for name, (upstream, _link, _task) in list(federated.links.items()):
            if wanted.get(name) != upstream:
                self._stop(federated, name)
        local = LocalQueue(
            queue.vhost_name,
            queue.name,
            queue.durable,
            queue.auto_delete,
            dict(queue.arguments),
            None if policy is None else policy.name,
        )
        for name, upstream in wanted.items():
            if name not in federated.links:
                from amqpd.shell.links.federated_queue import QueueLink

                link = QueueLink(local, upstream, federated.demand, self._local)
                task = asyncio.get_running_loop().create_task(self._run(link))
                federated.links[name] = (upstream, link, task)
                log.info(
                    "federation link for queue '%s' in vhost '%s' from upstream '%s' started",
                    queue.name,
                    queue.vhost_name,
                    name,
                )

    @staticmethod
    async def _run(link: QueueLink) -> None:
        try:
            await link.run()
        except Exception:  # a bug in a link must not take the broker down
            log.exception(
                "federation link for queue '%s' in vhost '%s' stopped by an error",
                link.queue.name,
                link.queue.vhost,
            )

    def _stop(self, federated: _Federated, name: str) -> None:
        _upstream, link, task = federated.links.pop(name)
        link.stop(task)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _drop(self, queue: Queue, federated: _Federated) -> None:
        for name in list(federated.links):
            self._stop(federated, name)
        del self._queues[queue]
        log.info("queue '%s' in vhost '%s' is no longer federated", queue.name, queue.vhost_name)

    # -- status -------------------------------------------------------------------------
    def federation_status(self) -> list[FederationLinkStatus]:
        """The status of every queue link."""
        return [
            link.status
            for federated in self._queues.values()
            for _upstream, link, _task in federated.links.values()
        ]

    async def aclose(self) -> None:
        """Stop every link and wait until their connections are closed."""
        for queue, federated in list(self._queues.items()):
            for name in list(federated.links):
                self._stop(federated, name)
            del self._queues[queue]
        for task in list(self._stopping):
            with suppress(asyncio.CancelledError, Exception):
                await task
