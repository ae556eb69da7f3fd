"""Which federated queues want messages from their upstreams (sans-IO).

Theory of operation
-------------------
A queue is *federated* when its policy names federation upstreams (RabbitMQ's queue
decorator `rabbit_federation_queue`). Each upstream gets a link in the shell
(amqpd/shell/links/): the link consumes from the upstream queue only while the local
queue *wants messages*, RabbitMQ's rule (`rabbit_federation_queue:notify`):

    wants = the queue has no ready messages
            and a consumer of priority >= 0 could take a message now (has credit)

Links consume upstream with ``x-priority: -1``, so a link never counts as a consumer that
wants messages on the broker it consumes from: two brokers federating one queue from each
other only move a message when a real consumer is waiting for it.

The queue reports itself cheaply: a federated queue's ``demand_set`` is this tracker's
``dirty`` set, and the queue adds itself there whenever something that decides its demand
may have changed: dispatch (which enqueues with consumers, credit changes, new consumers
and requeues go through), basic.get, expiry, a consumer leaving, purge, a policy change,
deletion. Every other queue has ``demand_set = None``: one ``is not None`` test per
dispatch call (and on the cold paths), nothing else.

After each step of the core (a chunk, a tick, an admin command) the shell calls `take`:
it re-evaluates the dirty queues once each and returns what changed since the last call —
a queue that became federated, stopped being federated (policy changed, deleted), or
whose demand flipped. Many flips within one step collapse into the last state.
"""

from __future__ import annotations

from dataclasses import dataclass

# A runtime import, not under TYPE_CHECKING: the compiled (mypyc) DemandChange dataclass needs
# the Queue class when the module loads (queue.py does not import this module: no cycle).
from amqpd.model.queue import Queue

__all__ = ["DemandChange", "FederatedQueues"]


@dataclass(slots=True)
class DemandChange:
    """A federated queue's state as the shell must now see it.

    ``federated`` False: the queue left federation (policy, deletion); stop its links.
    """

    queue: Queue
    federated: bool
    wants: bool


class FederatedQueues:
    """The broker's federated queues and their last reported demand."""

    __slots__ = ("dirty", "reported")

    def __init__(self) -> None:
        self.dirty: set[Queue] = set()  # queues whose demand may have changed
        self.reported: dict[Queue, bool] = {}  # federated queue -> demand last reported

    def policy_applied(self, queue: Queue, federated: bool) -> None:
        """A policy (re)applied to ``queue`` does or does not federate it."""
        if federated and not queue.deleted:
            if queue.demand_set is None:
                queue.demand_set = self.dirty
                self.dirty.add(queue)
        elif queue.demand_set is not None:
            queue.demand_set = None
            self.dirty.add(queue)

    @property
    def queues(self) -> list[Queue]:
        """The federated queues, as last reported."""
        return list(self.reported)

    def take(self) -> list[DemandChange]:
        """What changed since the last call (each queue once, in its latest state)."""
        if not self.dirty:
            return []
        changes: list[DemandChange] = []
        reported = self.reported
        for queue in self.dirty:
            federated = queue.demand_set is not None and not queue.deleted
            if not federated:
                if reported.pop(queue, None) is not None:
                    changes.append(DemandChange(queue, False, False))
                queue.demand_set = None
                continue
            wants = wants_messages(queue)
            if reported.get(queue) is not wants:
                reported[queue] = wants
                changes.append(DemandChange(queue, True, wants))
        self.dirty.clear()
        return changes


def wants_messages(queue: Queue) -> bool:
    """Whether a federated queue should fetch from its upstreams: nothing ready and a
    consumer of priority >= 0 that could take a message now (RabbitMQ's rule; links
    consume upstream at priority -1, so they never count)."""
    if queue.ready or queue.deleted:
        return False
    for level in queue._levels:  # by priority, highest first
        for consumer in level:
            if consumer.priority < 0:
                return False
            if consumer.channel.has_credit(consumer):
                return True
    return False
