"""Paging a long durable queue's bodies out to the store and back (like RabbitMQ's lazy
queues).

Theory of operation
-------------------
A persistent message enqueued behind the first ``HOT_WINDOW`` entries of a durable queue
becomes a page-out candidate (`Queue.enqueue`, model/queue.py), tagged with the storage
batch of its insert. Once that batch has committed (`page_out`), its body is dropped from
memory (only if no other queue shares the message). Whenever dispatch or basic.get reaches
an entry without a body, `page_in` reads the next page of bodies back in seq order.
``residency`` counts the stored and the paged-out ready entries (model/residency.py).

The store is reached only through ports (amqpd/model/ports.py: `JournalPort`,
`BodyLoader`). A body read that fails (disk error, any backend's exception) must not take
the broker down: it is logged once per outage, the entries stay where they are (delivery
and expiry stop at the first body that cannot be read, basic.get answers get-empty), and
the queue asks for ticks, which retry until the store can be read again.
"""

from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Final, Protocol

from amqpd.model.message import QueueEntry
from amqpd.model.priority import PriorityReady
from amqpd.model.residency import Residency

if TYPE_CHECKING:
    from amqpd.model.ports import BodyLoader

log = logging.getLogger(__name__)

PAGE_SIZE: Final = 1024  # bodies read back per page-in


class PagedQueue(Protocol):
    """What paging needs of a queue (model/queue.py's `Queue`; a Protocol, as in
    selective.py, so that this module does not import the queue's)."""

    read_failing: bool  # the last body read from the store failed (logged once)

    @property
    def page_candidates(self) -> deque[tuple[int, QueueEntry]]:
        """(storage batch of its insert, entry) of the entries whose body may be dropped."""
        ...

    @property
    def ready(self) -> deque[QueueEntry] | PriorityReady:
        """Ready entries in queue order."""
        ...

    @property
    def residency(self) -> Residency:
        """Counters of stored and paged-out ready entries."""
        ...

    @property
    def pager(self) -> BodyLoader | None:
        """Where bodies are read back from (None: the queue is not paged)."""
        ...

    @property
    def store_key(self) -> tuple[str, str]:
        """(vhost, queue name) in the store."""
        ...

    @property
    def deleted(self) -> bool:
        """Whether the queue was deleted."""
        ...

    def watch(self) -> None:
        """Ask the broker for ticks."""
        ...

    def settled(self, entry: QueueEntry) -> None:
        """An entry leaves the queue for good."""
        ...

    def _pop_ready(self) -> QueueEntry:
        """Remove the head entry, keeping the counters."""
        ...


def page_out(queue: PagedQueue, committed_batch: int) -> bool:
    """Drop bodies of candidates whose insert is in a committed batch (they can be read
    back). Returns True while candidates remain."""
    candidates = queue.page_candidates
    while candidates and candidates[0][0] <= committed_batch:
        _batch, entry = candidates.popleft()
        message = entry.message
        if (
            entry.stored
            and not entry.delivery_count  # never delivered: still ready (residency.py)
            and message.refs == 1
            and message.body is not None
            and not queue.deleted
        ):
            message.body = None
            queue.residency.dropped(message)
    return bool(candidates)


def page_in(queue: PagedQueue) -> bool:
    """Read the next page of bodies for the entries at the head that lack one. An entry
    whose body cannot be found (cannot happen through the store) is dropped, logged.
    Returns False if the store cannot be read now (the entries stay; logged once)."""
    ready = queue.ready
    if queue.pager is None:
        return True
    while ready and ready[0].message.body is None:
        head = ready[0]
        page = read_bodies(queue, head.seq - 1, PAGE_SIZE)
        if page is None:
            return False
        bodies = dict(page)
        for entry in islice(ready, 0, 2 * PAGE_SIZE):
            if entry.message.body is None:
                body = bodies.get(entry.seq)
                if body is not None:
                    entry.message.body = body
                    queue.residency.loaded(entry.message)
        if head.message.body is None:
            log.error("lost body of message %d in %r; dropping it", head.seq, queue)
            queue._pop_ready()
            queue.settled(head)
    return True


def load_body(queue: PagedQueue, entry: QueueEntry) -> bool:
    """Make sure a paged-out entry's body is in memory (for dead-lettering). False if
    the store cannot be read."""
    message = entry.message
    if message.body is not None or queue.pager is None:
        return True
    bodies = read_bodies(queue, entry.seq - 1, 1)
    if bodies is None:
        return False
    message.body = bodies[0][1] if bodies and bodies[0][0] == entry.seq else b""
    queue.residency.loaded(message)  # (only ready entries lack a body: page_out)
    return True


def read_bodies(queue: PagedQueue, after_seq: int, limit: int) -> list[tuple[int, bytes]] | None:
    """Bodies from the store, or None if it failed: a storage error must not take the
    broker down, so it is logged (once per outage), and the queue's timers retry."""
    assert queue.pager is not None
    try:
        bodies = queue.pager.read_bodies(queue.store_key, after_seq, limit)
    except Exception as exc:  # any backend's failure, contained at the port
        if not queue.read_failing:
            queue.read_failing = True
            log.error(
                "cannot read message bodies of %r from the store: %s; its deliveries "
                "wait until the store can be read again",
                queue,
                exc,
            )
            queue.watch()
        return None
    if queue.read_failing:
        queue.read_failing = False
        log.info("message bodies of %r can be read from the store again", queue)
    return bodies
