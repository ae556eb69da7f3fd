"""A channel's unacknowledged deliveries and the qos credit that depends on them.

Theory of operation
-------------------
Every hand-out (basic.deliver or basic.get-ok) takes the next channel-wide delivery tag from
`UnackedStore.issue`. One that needs an ack is kept as an `Unacked` record in tag order (a
dict keeps insertion order and tags only grow; a rollback re-sorts).

Credit is RabbitMQ's qos: a delivery to a consumer counts against that consumer's prefetch
(qos global=false, fixed when it subscribes) and against the channel's (qos global=true);
basic.get deliveries count against neither. A record leaves the tag order as soon as the
client settles it (`take`, `take_all`), but its credit stays in use until the settlement is
applied (`settle`): at once outside a transaction, at tx.commit inside one, where a rollback
puts the records back instead (`restore`). Only this class changes the counts, so tag order
and credit cannot disagree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from typing import Final

from amqpd.model.message import QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.wire.errors import precondition_failed

UNLIMITED: Final = 1 << 30  # credit without a qos limit


class Settlement(enum.Enum):
    """What the client decided for settled deliveries."""

    ACK = "ack"  # basic.ack: done with
    REQUEUE = "requeue"  # nack / reject with requeue, recover, close: back into the queue
    DISCARD = "discard"  # nack / reject without requeue: dead-lettered if the queue has a DLX
    UNSENT = "unsent"  # never reached the client (engine/served_consumers.py): back as it was


class Unacked:
    """A delivered message awaiting its ack."""

    __slots__ = ("consumer", "entry", "queue", "tag")

    def __init__(
        self, tag: int, queue: Queue, entry: QueueEntry, consumer: Consumer | None
    ) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer  # None for basic.get


class UnackedStore:
    """Delivery tags, unacked records in tag order, and per-consumer and per-channel credit."""

    __slots__ = (
        "_by_consumer",
        "_channel_used",
        "_next_tag",
        "_records",
        "channel_prefetch",
        "consumer_prefetch",
    )

    def __init__(self) -> None:
        self._records: dict[int, Unacked] = {}
        self._next_tag = 1
        self._by_consumer: dict[Consumer, int] = {}  # credit in use, only consumers using some
        self._channel_used = 0  # credit in use on the channel (consumer deliveries only)
        self.channel_prefetch = 0  # qos global=true; 0: unlimited
        self.consumer_prefetch = 0  # qos global=false: the prefetch of consumers from now on

    def __iter__(self) -> Iterator[int]:
        """Delivery tags still unacked, in tag order."""
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> Iterable[Unacked]:
        """The unacked deliveries, in tag order (for statistics)."""
        return self._records.values()

    def issue(
        self, queue: Queue, entry: QueueEntry, consumer: Consumer | None, ack_required: bool
    ) -> int:
        """Hand out the next delivery tag; keep the delivery until settled if it needs an ack.

        ``consumer`` is None for basic.get, which uses no credit.
        """
        tag = self._next_tag
        self._next_tag = tag + 1
        if ack_required:
            self._records[tag] = Unacked(tag, queue, entry, consumer)
            if consumer is not None:
                self._channel_used += 1
                by_consumer = self._by_consumer
                by_consumer[consumer] = by_consumer.get(consumer, 0) + 1
        return tag

    def issue_run(self, queue: Queue, entries: list[QueueEntry], consumer: Consumer) -> int:
        """`issue` for several consumer deliveries that need an ack (a stream's run): the
        first of their contiguous tags."""
        first = tag = self._next_tag
        records = self._records
        for entry in entries:
            records[tag] = Unacked(tag, queue, entry, consumer)
            tag += 1
        self._next_tag = tag
        count = tag - first
        self._channel_used += count
        by_consumer = self._by_consumer
        by_consumer[consumer] = by_consumer.get(consumer, 0) + count
        return first

    def credit(self, consumer: Consumer) -> int:
        """How many more deliveries the qos limits let ``consumer`` (acking) receive now
        (``UNLIMITED`` without any limit)."""
        prefetch = consumer.prefetch
        room = prefetch - self._by_consumer.get(consumer, 0) if prefetch else UNLIMITED
        limit = self.channel_prefetch
        if limit:
            room = min(room, limit - self._channel_used)
        return room

    def has_credit(self, consumer: Consumer) -> bool:
        """Whether the qos limits let ``consumer`` (acking) receive one more message."""
        prefetch = consumer.prefetch
        if prefetch and self._by_consumer.get(consumer, 0) >= prefetch:
            return False
        limit = self.channel_prefetch
        return not (limit and self._channel_used >= limit)

    def take(self, tag: int, multiple: bool) -> list[Unacked]:
        """Remove the deliveries a basic.ack / nack / reject names (``multiple``: every tag up
        to ``tag``, all of them for tag 0). Their credit stays in use until `settle`.

        Raises:
            AMQPError: 406 PRECONDITION_FAILED for a tag that is not unacked.
        """
        records = self._records
        if multiple and tag == 0:
            return self.take_all()
        if tag not in records:
            raise precondition_failed(f"unknown delivery tag {tag}")
        if not multiple:
            return [records.pop(tag)]
        tags = []
        for key in records:
            if key > tag:
                break
            tags.append(key)
        return [records.pop(key) for key in tags]

    def take_all(self) -> list[Unacked]:
        """Remove every unacked delivery (credit stays in use until `settle`)."""
        taken = list(self._records.values())
        self._records.clear()
        return taken

    def restore(self, records: Iterable[Unacked]) -> None:
        """Put taken but unsettled deliveries back, in tag order (tx.rollback)."""
        merged = [*self._records.values(), *records]
        if len(merged) != len(self._records):
            merged.sort(key=_tag)
            self._records = {record.tag: record for record in merged}

    def settle(self, records: list[Unacked], kind: Settlement, now: float) -> None:
        """Apply a settlement to taken deliveries: their credit is free again and their
        queues ack, requeue or discard them (``now``: when the consumers made progress)."""
        # One pass per kind of work, each in runs of records of the same consumer or
        # queue (a multiple ack settles hundreds of one consumer's deliveries at once).
        current: Consumer | None = None
        count = 0
        for record in records:
            consumer = record.consumer
            if consumer is not current:
                if current is not None:
                    self._free(current, count)
                current, count = consumer, 0
            count += 1
        if current is not None:
            self._free(current, count)
        queue: Queue | None = None
        for record in records:
            if record.queue is not queue:
                queue = record.queue
                queue.consumer_progress_at = now
        if kind is Settlement.REQUEUE or kind is Settlement.UNSENT:
            _requeue(records, kind is Settlement.UNSENT)
        elif kind is Settlement.DISCARD:
            for record in records:
                record.queue.discard(record.entry, "rejected")
        else:
            for record in records:
                queue = record.queue
                queue.stats.ack += 1
                queue.settled(record.entry)

    def _free(self, consumer: Consumer, count: int) -> None:
        """``count`` deliveries of ``consumer`` no longer use credit."""
        self._channel_used -= count
        by_consumer = self._by_consumer
        left = by_consumer[consumer] - count
        if left:
            by_consumer[consumer] = left
        else:
            del by_consumer[consumer]

    def requeue_all(self) -> None:
        """Channel close: every unacked delivery goes back to its queue, all credit is free
        (`restore` unsettled ones first)."""
        _requeue(self.take_all())
        self._by_consumer.clear()
        self._channel_used = 0


def _tag(record: Unacked) -> int:
    return record.tag


def _requeue(records: Iterable[Unacked], unsent: bool = False) -> None:
    by_queue: dict[Queue, list[QueueEntry]] = {}
    for record in records:
        by_queue.setdefault(record.queue, []).append(record.entry)
    for queue, entries in by_queue.items():
        queue.requeue(entries, unsent)
