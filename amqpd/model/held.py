"""Holding back messages whose publisher waits for the store (sans-IO).

Theory of operation
-------------------
A persistent message routed to a durable queue by a publisher in confirm or tx mode is
*promised*: the publisher hears basic.ack / tx.commit-ok once the storage batch holding it
has committed, or basic.nack / a failed tx.commit if that batch fails. Such a message is
not delivered (basic.deliver, basic.get) before its batch has committed: its `QueueEntry`
records the batch in ``hold`` and a queue's dispatch stops at a ready head whose batch has
not been reported yet (`StoreProgress.holds`). So when a batch fails, each of its promised
messages is still in its queue, and `drop_failed` takes it out before anyone could get it:
a nacked message is never delivered, and the queues hold what the store holds.

Batches are reported in order, each once, so one number says how far the store got:
`StoreProgress.reported`, the last batch committed or failed. A queue that stopped at a held
head registers itself in `StoreProgress.waiting`; the broker dispatches those queues again
after each report (`release`). Entries of plain publishers (``hold == 0``) are delivered at
once, as before, so a consumer can still ack them before their insert is written (the
journal then writes neither: concurrent store and dispatch); if their batch fails they stay
in memory (that publisher was promised nothing) and are gone after a restart.

The cost on the hot path is one integer comparison per delivery; a promised message reaches
its consumer one commit later and is always written (its ack is a delete), see
docs/architecture.md for the measurements.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from amqpd.model.dedup import Deduplicator
from amqpd.model.message import QueueEntry
from amqpd.model.priority import PriorityReady
from amqpd.model.residency import Residency


class HoldingQueue(Protocol):
    """What holding needs of a queue (`amqpd.model.queue.Queue`; a Protocol, so this
    module does not import the queue that imports it)."""

    ready: deque[QueueEntry] | PriorityReady
    ready_bytes: int
    residency: Residency  # stored / paged-out ready entries (the queue's own counts)
    _timed: int  # ready entries with a deadline (the queue's own count)
    dedup: Deduplicator | None

    @property
    def deleted(self) -> bool:
        """The queue was deleted."""
        ...

    def dispatch(self) -> None:
        """Deliver ready entries to consumers with credit."""
        ...


class StoreProgress:
    """How far the group committer got, and the queues waiting for it to get further."""

    __slots__ = ("reported", "waiting")

    def __init__(self) -> None:
        self.reported = 0  # the last batch committed or failed (ids start at 1)
        self.waiting: set[HoldingQueue] = set()

    def holds(self, queue: HoldingQueue, batch: int) -> bool:
        """Whether an entry held for ``batch`` must wait (then ``queue`` is dispatched
        again once the batch is reported)."""
        if batch <= self.reported:
            return False
        self.waiting.add(queue)
        return True

    def release(self, batch: int) -> list[HoldingQueue]:
        """``batch`` was reported: the queues that waited, to dispatch again."""
        self.reported = batch
        if not self.waiting:
            return []
        queues = list(self.waiting)
        self.waiting.clear()
        return queues


def drop_failed(queue: HoldingQueue, batch: int) -> int:
    """Take the entries held for the failed ``batch`` out of ``queue`` (they were never
    delivered, their publishers are nacked); return how many."""
    ready = queue.ready
    doomed: list[QueueEntry] = [entry for entry in ready if entry.hold == batch]
    if not doomed:
        return 0
    kept = [entry for entry in ready if entry.hold != batch]
    if isinstance(ready, PriorityReady):
        ready.clear()
        for entry in kept:  # highest priority first, FIFO within one: order is kept
            ready.append(entry)
    else:
        queue.ready = deque(kept)
    dedup = queue.dedup
    for entry in doomed:
        if dedup is not None:
            dedup.forget(entry.message)  # the publisher may send it again
        if entry.stored:
            queue.residency.remove(entry)
        entry.stored = False  # its insert never reached the store: nothing to delete
        entry.message.refs -= 1
        queue.ready_bytes -= entry.message.body_size
        if entry.expires_at is not None:
            queue._timed -= 1
    return len(doomed)
