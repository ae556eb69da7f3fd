"""A queue's limits and timers: message TTL, x-expires, length limits, x-delivery-limit.

Theory of operation
-------------------
These are the steps of `Queue` (model/queue.py) that take ready entries out because a limit
says so, and that say when the queue must next be looked at. They are functions over
`LimitedQueue`, a Protocol of what they need of the queue (as in groups.py, paging.py and
selective.py), so that this module does not import the queue's module, which imports it.
`Queue` keeps a thin method for each name other modules call or override (``reconfigure``,
``would_overflow``, ``expire``, ``tick``, ``next_deadline``, ``_expire_head``): subclasses
(model/stream.py overrides ``reconfigure``, ``tick``, ``next_deadline``, ``discard``) and
callers see no change, and calls back into the queue (``discard``, ``dispatch``,
``needs_ticks``, ``next_deadline``) stay virtual.

Message TTL. An entry's deadline (``expires_at``) is set when it is enqueued: the lower of
the queue's x-message-ttl and the message's own ``expiration``. As RabbitMQ does, messages
expire when they reach the head (`expire`), so a queue needs one timer, at its head's
deadline (`next_deadline`). Dispatch checks the head inline, and `expire_head` is that check
for selective and group dispatch: an entry arriving with a TTL of 0 still goes to a
consumer that can take it at once.

x-expires. A queue without consumers that nobody used (basic.get, consume, a declare) for
x-expires milliseconds is deleted: `tick` says so and the broker deletes it.

Length limits (``x-max-length``, ``x-max-length-bytes``) count ready messages only, as in
RabbitMQ. ``x-overflow=drop-head`` drops the oldest ready messages after an enqueue and
when a policy lowers a limit (`drop_head_over_limit`, `reconfigure`); ``reject-publish`` /
``reject-publish-dlx`` refuse a publish that would overflow (`would_overflow`), which the
channel turns into a basic.nack in confirm mode. ``x-delivery-limit``: a requeued entry
delivered more often than that is discarded instead (`within_delivery_limit`).

Every entry leaves through `discard_head` and the queue's ``discard`` (dropped, or
dead-lettered with x-dead-letter-exchange). A dead-lettered entry needs its body: one paged
out that cannot be read now stays at the head and stops the loop; the queue's ticks retry
while its reads fail (model/paging.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.priority import PriorityReady
from amqpd.model.queue_args import QueueSettings

__all__ = [
    "LimitedQueue",
    "coming_back",
    "discard_head",
    "drop_head_over_limit",
    "expire",
    "expire_head",
    "next_deadline",
    "reconfigure",
    "tick",
    "within_delivery_limit",
    "would_overflow",
]


class LimitedQueue(Protocol):
    """What the limits need of a queue (`amqpd.model.queue.Queue`; a Protocol, so that
    this module does not import the queue's module, which imports it)."""

    settings: QueueSettings  # its effective settings (arguments and policies)
    max_length: int | None  # x-max-length
    max_length_bytes: int | None  # x-max-length-bytes
    rejects_overflow: bool  # a length limit with x-overflow reject-publish(-dlx)
    message_ttl: float | None  # x-message-ttl in seconds
    last_used: float  # x-expires counts from then

    @property
    def clock(self) -> Clock:
        """The broker's clock."""
        ...

    @property
    def ready(self) -> deque[QueueEntry] | PriorityReady:
        """Ready entries in queue order."""
        ...

    @property
    def ready_bytes(self) -> int:
        """The body bytes of the ready entries."""
        ...

    @property
    def consumers(self) -> Sequence[object]:
        """Its consumers."""
        ...

    @property
    def read_failing(self) -> bool:
        """The last body read from the store failed."""
        ...

    @property
    def dead_letter(self) -> Callable[..., None] | None:
        """Dead-lettering (x-dead-letter-exchange), or None: discarded entries are dropped."""
        ...

    @property
    def demand_set(self) -> set[Any] | None:
        """Federated queues: the set to join when their demand may have changed."""
        ...

    @property
    def needs_ticks(self) -> bool:
        """Whether the queue still has timers to run."""
        ...

    def watch(self) -> None:
        """Ask the broker for ticks."""
        ...

    def next_deadline(self) -> float | None:
        """When its timers next have something to do."""
        ...

    def dispatch(self, arriving: QueueEntry | None = None) -> None:
        """Deliver ready entries to consumers with credit."""
        ...

    def discard(self, entry: QueueEntry, reason: str) -> None:
        """An entry leaves without being acked (dead-lettered or dropped)."""
        ...

    def _pop_ready(self) -> QueueEntry:
        """Remove the head entry, keeping the counters."""
        ...

    def _load_body(self, entry: QueueEntry) -> bool:
        """Read a paged-out body back; False if the store cannot be read now."""
        ...


def would_overflow(queue: LimitedQueue, message: Message) -> bool:
    """True if ``queue`` refuses the message (reject-publish and the limit reached)."""
    if not queue.rejects_overflow:
        return False
    if queue.max_length is not None and len(queue.ready) + 1 > queue.max_length:
        return True
    return (
        queue.max_length_bytes is not None
        and queue.ready_bytes + message.body_size > queue.max_length_bytes
    )


def drop_head_over_limit(queue: LimitedQueue) -> None:
    """Discard the oldest ready entries while a length limit is exceeded (drop-head)."""
    ready = queue.ready
    max_length = queue.max_length
    max_bytes = queue.max_length_bytes
    while ready and (
        (max_length is not None and len(ready) > max_length)
        or (max_bytes is not None and queue.ready_bytes > max_bytes)
    ):
        if not discard_head(queue, "maxlen"):
            return  # its body cannot be read for dead-lettering now: retried later


def reconfigure(queue: LimitedQueue, settings: QueueSettings) -> None:
    """Adopt new effective settings (``Queue.reconfigure``: a policy changed,
    model/policies.py): a lower length limit drops (or dead-letters) the excess at once, as
    RabbitMQ does; a TTL applies to messages enqueued from now on; a new expires counts from
    now (RabbitMQ restarts the expiry timer)."""
    if settings.expires != queue.settings.expires:
        queue.last_used = queue.clock.now
    if queue.demand_set is not None:
        queue.demand_set.add(queue)
    queue.settings = settings
    queue.max_length = settings.max_length
    queue.max_length_bytes = settings.max_length_bytes
    queue.rejects_overflow = settings.overflow != "drop-head" and (
        queue.max_length is not None or queue.max_length_bytes is not None
    )
    queue.message_ttl = settings.message_ttl / 1000 if settings.message_ttl is not None else None
    if not queue.rejects_overflow and (
        queue.max_length is not None or queue.max_length_bytes is not None
    ):
        drop_head_over_limit(queue)
    if queue.needs_ticks:
        queue.watch()
        deadline = queue.next_deadline()  # a policy's x-expires: announce its lease end
        if deadline is not None:
            queue.clock.wake(deadline)


def coming_back(queue: LimitedQueue, back: list[QueueEntry], unsent: bool) -> list[QueueEntry]:
    """The entries ``back`` that go back into the queue: those `within_delivery_limit`, or,
    ``unsent`` (never handed to a client: Queue.requeue), all, as they were before."""
    if not unsent:
        return within_delivery_limit(queue, back)
    for entry in back:
        entry.delivery_count -= 1
    return back


def within_delivery_limit(queue: LimitedQueue, back: list[QueueEntry]) -> list[QueueEntry]:
    """The requeued entries ``back`` that may go back: one delivered more than
    x-delivery-limit times is discarded instead (dead-lettered, reason delivery_limit)."""
    limit = queue.settings.delivery_limit
    if limit is not None:
        over = [entry for entry in back if entry.delivery_count > limit]
        if over:
            back = [entry for entry in back if entry.delivery_count <= limit]
            for entry in over:
                queue.discard(entry, "delivery_limit")
    return back


def discard_head(queue: LimitedQueue, reason: str) -> bool:
    """Discard the head entry. False (the entry stays) if it is to be dead-lettered but
    its paged-out body cannot be read now."""
    if queue.dead_letter is not None and not queue._load_body(queue.ready[0]):
        return False
    queue.discard(queue._pop_ready(), reason)
    return True


def expire(queue: LimitedQueue) -> None:
    """Drop (or dead-letter) expired messages at the head (RabbitMQ expires messages
    when they reach the head; with x-message-ttl that is all of them, in order)."""
    ready = queue.ready
    now = queue.clock.now
    while ready:
        expires_at = ready[0].expires_at
        if expires_at is None or expires_at > now or not discard_head(queue, "expired"):
            return


def expire_head(queue: LimitedQueue, arriving: QueueEntry | None) -> bool:
    """Discard expired entries at the head (as ``Queue.dispatch`` does); False when one
    cannot be dead-lettered now."""
    ready = queue.ready
    now = queue.clock.now
    while ready:
        head = ready[0]
        expires_at = head.expires_at
        if expires_at is None or expires_at > now or (head is arriving and expires_at == now):
            return True
        if not discard_head(queue, "expired"):
            return False
    return True


def tick(queue: LimitedQueue) -> bool:
    """Timers: expire messages; return True when x-expires says the queue is unused for
    long enough and must be deleted. While body reads fail, retry delivering."""
    if queue.demand_set is not None:
        queue.demand_set.add(queue)
    expire(queue)
    if queue.read_failing and queue.consumers:
        queue.dispatch()
    expires = queue.settings.expires
    return (
        expires is not None
        and not queue.consumers
        and queue.clock.now >= queue.last_used + expires / 1000  # as in next_deadline
    )


def next_deadline(queue: LimitedQueue) -> float | None:
    """When the queue's timers next have something to do: the head message's expiry
    (RabbitMQ expires messages at the head, one timer per queue) and x-expires."""
    deadline = None
    ready = queue.ready
    if ready and ready[0].expires_at is not None:
        deadline = ready[0].expires_at
    expires = queue.settings.expires
    if expires is not None and not queue.consumers:
        unused_until = queue.last_used + expires / 1000
        if deadline is None or unused_until < deadline:
            deadline = unused_until
    return deadline
