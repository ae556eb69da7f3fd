"""A queue: the ready messages in order, and the ring of consumers they are dispatched to.

Theory of operation
-------------------
``ready`` is a deque of `QueueEntry` in queue order (each entry numbered by ``seq`` when it
was first enqueued). ``dispatch()`` hands ready entries to consumers round-robin, skipping
consumers without credit (their channel decides: prefetch per consumer, per channel, flow).
A delivered-but-unacked entry lives in its channel's unacked map, not here; when it is
requeued it goes back to its original position (by ``seq``) with redelivered set, as in
RabbitMQ's classic queues. The queue never does I/O: delivering appends frames to the
consumer's connection output.

Length limits (``x-max-length``, ``x-max-length-bytes``) count ready messages only, as in
RabbitMQ. ``x-overflow=drop-head`` drops the oldest ready messages after an enqueue;
``reject-publish`` / ``reject-publish-dlx`` refuse a publish that would overflow
(`would_overflow`), which the channel turns into a basic.nack in confirm mode.

Paging (long durable queues, like RabbitMQ's lazy queues): a persistent message enqueued
behind the first ``HOT_WINDOW`` entries becomes a page-out candidate, tagged with the storage
batch of its insert. Once that batch has committed (`page_out`), its body is dropped from
memory (only if no other queue shares the message). Whenever dispatch or basic.get reaches
an entry without a body, `page_in` reads the next page of bodies back in seq order.
"""

from __future__ import annotations

import logging
from bisect import insort
from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, Protocol

from amqpd.message import Message, QueueEntry
from persistence.journal import Journal
from persistence.records import MessageRecord

if TYPE_CHECKING:
    from amqpd.channel import Channel
    from amqpd.connection import Connection

log = logging.getLogger(__name__)

HOT_WINDOW: Final = 1024  # entries at the head of a durable queue that keep their bodies
PAGE_SIZE: Final = 1024  # bodies read back per page-in


class BodyLoader(Protocol):
    """Reads committed bodies back from the store (persistence.store.BodyReader)."""

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """``(seq, body)`` of up to ``limit`` messages with ``seq > after_seq``."""
        ...


OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")


class InvalidQueueArgument(ValueError):
    """A queue argument RabbitMQ would refuse (reported as 406 PRECONDITION_FAILED)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(problem)
        self.name = name
        self.problem = problem


def _non_negative_int(arguments: dict[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQueueArgument(name, f"{{unacceptable_type,{type(value).__name__}}}")
    if value < 0:
        raise InvalidQueueArgument(name, f"{{value_negative,{value}}}")
    return value


def parse_length_limits(arguments: dict[str, Any]) -> tuple[int | None, int | None, str]:
    """(max_length, max_length_bytes, overflow) from queue arguments, validated."""
    max_length = _non_negative_int(arguments, "x-max-length")
    max_bytes = _non_negative_int(arguments, "x-max-length-bytes")
    overflow = arguments.get("x-overflow", "drop-head")
    if isinstance(overflow, bytes):
        overflow = overflow.decode(errors="replace")
    if overflow not in OVERFLOW_MODES:
        raise InvalidQueueArgument(
            "x-overflow",
            f"{{invalid_value,{overflow!s}}} (expected one of {', '.join(OVERFLOW_MODES)})",
        )
    return max_length, max_bytes, str(overflow)


class Consumer:
    """A basic.consume subscription."""

    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "queue",
        "tag",
        "tag_raw",
        "unacked",
    )

    def __init__(
        self,
        channel: Channel,
        tag: str,
        tag_raw: bytes,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.tag_raw = tag_raw
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.arguments = arguments
        self.unacked = 0


class Queue:
    """A message queue in one virtual host."""

    __slots__ = (
        "_page_candidates",
        "_rr",
        "arguments",
        "auto_delete",
        "consumers",
        "deleted",
        "durable",
        "exclusive_owner",
        "had_consumer",
        "journal",
        "max_length",
        "max_length_bytes",
        "name",
        "next_seq",
        "overflow",
        "pager",
        "paging_set",
        "ready",
        "ready_bytes",
        "rejects_overflow",
        "store_key",
        "vhost_name",
    )

    def __init__(
        self,
        name: str,
        vhost_name: str,
        durable: bool,
        exclusive_owner: Connection | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.name = name
        self.vhost_name = vhost_name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.ready: deque[QueueEntry] = deque()
        self.consumers: list[Consumer] = []
        self._rr = 0
        self.next_seq = 0
        self.had_consumer = False
        self.deleted = False
        self.ready_bytes = 0
        self.max_length, self.max_length_bytes, self.overflow = parse_length_limits(arguments)
        self.rejects_overflow = self.overflow != "drop-head" and (
            self.max_length is not None or self.max_length_bytes is not None
        )
        # Set by the vhost for durable, non-exclusive queues when the broker has a store.
        self.journal: Journal | None = None
        self.store_key = (vhost_name, name)
        self.pager: BodyLoader | None = None  # set with journal when the store can page
        self.paging_set: set[Queue] | None = None  # the broker's queues with page candidates
        self._page_candidates: deque[tuple[int, QueueEntry]] = deque()

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} in vhost {self.vhost_name!r}>"

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (not counting unacked ones), as in Declare-Ok."""
        return len(self.ready)

    @property
    def exclusive_consumer(self) -> Consumer | None:
        """The consumer holding exclusive access, if any."""
        for consumer in self.consumers:
            if consumer.exclusive:
                return consumer
        return None

    def would_overflow(self, message: Message) -> bool:
        """True if this queue refuses the message (reject-publish and the limit reached)."""
        if not self.rejects_overflow:
            return False
        if self.max_length is not None and len(self.ready) + 1 > self.max_length:
            return True
        return (
            self.max_length_bytes is not None
            and self.ready_bytes + message.body_size > self.max_length_bytes
        )

    def enqueue(self, message: Message) -> QueueEntry:
        """Append a message and try to deliver it; drop-head enforces the length limits."""
        entry = QueueEntry(message, self.next_seq)
        self.next_seq += 1
        message.refs += 1
        if message.persistent and self.journal is not None and message.body is not None:
            entry.stored = True
            batch = self.journal.insert_message(
                self.store_key,
                entry.seq,
                MessageRecord(message.exchange, message.routing_key, message.header, message.body),
            )
            if self.pager is not None and len(self.ready) >= HOT_WINDOW:
                self._page_candidates.append((batch, entry))
                if self.paging_set is not None:
                    self.paging_set.add(self)
        self.ready.append(entry)
        self.ready_bytes += message.body_size
        if self.consumers:
            self.dispatch()
        if self.max_length is not None or self.max_length_bytes is not None:
            self._drop_head_over_limit()
        return entry

    def _drop_head_over_limit(self) -> None:
        ready = self.ready
        max_length = self.max_length
        max_bytes = self.max_length_bytes
        while ready and (
            (max_length is not None and len(ready) > max_length)
            or (max_bytes is not None and self.ready_bytes > max_bytes)
        ):
            dropped = ready.popleft()
            self.ready_bytes -= dropped.message.body_size
            self.settled(dropped)  # dead-lettering with reason maxlen hooks in here

    def _pop_ready(self) -> QueueEntry:
        entry = self.ready.popleft()
        self.ready_bytes -= entry.message.body_size
        return entry

    def delivered(self, entry: QueueEntry) -> None:
        """An entry is handed to a client (journaled so a crash brings it back redelivered)."""
        entry.delivery_count += 1
        if entry.stored and self.journal is not None and not self.deleted:
            self.journal.mark_delivered(self.store_key, entry.seq, entry.delivery_count)

    def settled(self, entry: QueueEntry) -> None:
        """An entry leaves the queue for good (acked, dropped, auto-acked)."""
        if entry.stored and self.journal is not None and not self.deleted:
            entry.stored = False
            self.journal.delete_message(self.store_key, entry.seq)

    def take(self) -> QueueEntry | None:
        """Pop the head entry (basic.get)."""
        if not self.ready:
            return None
        if self.ready[0].message.body is None:
            self.page_in()
        return self._pop_ready() if self.ready else None

    def page_out(self, committed_batch: int) -> bool:
        """Drop bodies of candidates whose insert is in a committed batch (they can be read
        back). Returns True while candidates remain."""
        candidates = self._page_candidates
        while candidates and candidates[0][0] <= committed_batch:
            _batch, entry = candidates.popleft()
            message = entry.message
            if entry.stored and message.refs == 1 and not self.deleted:
                message.body = None
        return bool(candidates)

    def page_in(self) -> None:
        """Read the next page of bodies for the entries at the head that lack one. An entry
        whose body cannot be found (cannot happen through the store) is dropped, logged."""
        pager = self.pager
        ready = self.ready
        if pager is None:
            return
        while ready and ready[0].message.body is None:
            head = ready[0]
            bodies = dict(pager.read_bodies(self.store_key, head.seq - 1, PAGE_SIZE))
            for entry in islice(ready, 0, 2 * PAGE_SIZE):
                if entry.message.body is None:
                    body = bodies.get(entry.seq)
                    if body is not None:
                        entry.message.body = body
            if head.message.body is None:
                log.error("lost body of message %d in %r; dropping it", head.seq, self)
                self._pop_ready()
                self.settled(head)

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """Put delivered entries back at their original positions, marked redelivered."""
        if self.deleted:
            return
        back = sorted(entries, key=_by_seq)
        if not back:
            return
        for entry in back:
            entry.redelivered = True
            self.ready_bytes += entry.message.body_size
        ready = self.ready
        if not ready or back[-1].seq < ready[0].seq:
            ready.extendleft(reversed(back))
        else:
            merged = list(ready)
            for entry in back:
                insort(merged, entry, key=_by_seq)
            self.ready = deque(merged)
        self.dispatch()

    def purge(self) -> int:
        """Drop every ready message; return how many."""
        count = len(self.ready)
        if self.journal is not None:
            for entry in self.ready:
                self.settled(entry)
        self.ready.clear()
        self.ready_bytes = 0
        return count

    def add_consumer(self, consumer: Consumer) -> None:
        """Register a consumer and deliver what is ready."""
        self.consumers.append(consumer)
        self.had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Unregister a consumer (its unacked messages stay with its channel)."""
        try:
            index = self.consumers.index(consumer)
        except ValueError:
            return
        del self.consumers[index]
        if index < self._rr:
            self._rr -= 1
        if self._rr >= len(self.consumers):
            self._rr = 0

    def dispatch(self) -> None:
        """Deliver ready messages round-robin to consumers that have credit."""
        ready = self.ready
        consumers = self.consumers
        while ready and consumers:
            count = len(consumers)
            start = self._rr
            for step in range(count):
                index = (start + step) % count
                consumer = consumers[index]
                if consumer.channel.has_credit(consumer):
                    break
            else:
                return
            if ready[0].message.body is None:
                self.page_in()
                if not ready:
                    return
            self._rr = (index + 1) % count
            consumer.channel.deliver(consumer, self, self._pop_ready())


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq
