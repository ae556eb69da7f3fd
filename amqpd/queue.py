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
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from amqpd.message import Message, QueueEntry

if TYPE_CHECKING:
    from amqpd.channel import Channel
    from amqpd.connection import Connection


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
        "_rr",
        "arguments",
        "auto_delete",
        "consumers",
        "deleted",
        "durable",
        "exclusive_owner",
        "had_consumer",
        "name",
        "next_seq",
        "ready",
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

    def enqueue(self, message: Message) -> QueueEntry:
        """Append a message and try to deliver it."""
        entry = QueueEntry(message, self.next_seq)
        self.next_seq += 1
        self.ready.append(entry)
        if self.consumers:
            self.dispatch()
        return entry

    def take(self) -> QueueEntry | None:
        """Pop the head entry (basic.get)."""
        return self.ready.popleft() if self.ready else None

    def requeue(self, entries: Iterable[QueueEntry]) -> None:
        """Put delivered entries back at their original positions, marked redelivered."""
        if self.deleted:
            return
        back = sorted(entries, key=_by_seq)
        if not back:
            return
        for entry in back:
            entry.redelivered = True
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
        self.ready.clear()
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
            self._rr = (index + 1) % count
            consumer.channel.deliver(consumer, self, ready.popleft())


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq
