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

Message TTL, x-expires, the length limits (``x-max-length``, ``x-max-length-bytes``,
``x-overflow``) and x-delivery-limit are the queue's limits and timers: model/queue_limits.py.

Paging (long durable queues, like RabbitMQ's lazy queues): a persistent message enqueued
behind the first ``HOT_WINDOW`` entries becomes a page-out candidate; its body is dropped once
its insert has committed and read back when dispatch or basic.get reaches it, and a failed
body read never takes the broker down (model/paging.py).
"""

from __future__ import annotations

import logging
from bisect import insort
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol

from amqpd.model import queue_limits, selective
from amqpd.model.dedup import Deduplicator, parse_dedup_arguments
from amqpd.model.groups import MessageGroups, parse_groups_argument
from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.paging import load_body, page_in
from amqpd.model.priority import PriorityReady
from amqpd.model.queue_args import QueueSettings, parse_queue_arguments
from amqpd.model.residency import Residency
from amqpd.model.selector import Predicate
from amqpd.model.statistics import DeadLetterCounts, QueueStats
from persistence.records import MessageRecord

if TYPE_CHECKING:
    from amqpd.model.held import StoreProgress
    from amqpd.model.ports import BodyLoader, JournalPort
    from persistence.access import PolicyRecord

log = logging.getLogger(__name__)

FLOW_ACTIVE: Final = 0.25  # seconds since a consumer's last settle that count as "active"
HOT_WINDOW: Final = 1024  # entries at the head of a durable queue that keep their bodies


class ConsumerSink(Protocol):
    """The owner of consumers (a channel): decides credit and takes deliveries."""

    def has_credit(self, consumer: Consumer) -> bool:
        """Whether ``consumer`` may be handed one more message now."""
        ...

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        """Hand ``entry`` (already popped from ``queue``) to ``consumer``."""
        ...

    def cancel_by_broker(self, consumer: Consumer) -> None:
        """The queue went away under ``consumer`` (basic.cancel from the broker)."""
        ...


class ExclusiveOwner(Protocol):
    """The owner of exclusive queues (a connection). Queues only compare it by identity;
    the vhost records each exclusive queue it declares in ``exclusive_queues``."""

    exclusive_queues: list[Queue]


class Consumer:
    """A basic.consume subscription. ``channel`` decides its credit and takes its
    deliveries (the engine's unacked store counts them against ``prefetch``)."""

    __slots__ = (
        "arguments",
        "channel",
        "cursor",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "selector",
        "tag",
        "tag_raw",
    )

    def __init__(
        self,
        channel: ConsumerSink,
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
        priority = arguments.get("x-priority", 0)
        self.priority = priority if isinstance(priority, int) else 0  # x-priority argument
        self.selector: Predicate | None = None  # x-selector (amqpd/model/selective.py)
        self.cursor = -1  # seq of the last ready entry its selector examined


DeadLetter = Callable[["Queue", Message, str], None]


class Queue:
    """A message queue in one virtual host."""

    __slots__ = (
        "_levels",
        "_rr",
        "_selective",
        "_sole",
        "_timed",
        "arguments",
        "auto_delete",
        "clock",
        "consumer_progress_at",
        "consumers",
        "dead_letter",
        "dead_letter_counts",
        "dedup",
        "deleted",
        "demand_set",
        "durable",
        "exclusive_owner",
        "groups",
        "had_consumer",
        "journal",
        "last_used",
        "max_length",
        "max_length_bytes",
        "message_ttl",
        "name",
        "next_seq",
        "operator_policy",
        "page_candidates",
        "pager",
        "paging_set",
        "policy",
        "read_failing",
        "ready",
        "ready_bytes",
        "rejects_overflow",
        "residency",
        "settings",
        "stats",
        "store_key",
        "store_progress",
        "vhost_name",
        "watch_set",
    )

    def __init__(
        self,
        name: str,
        vhost_name: str,
        durable: bool,
        exclusive_owner: ExclusiveOwner | None,
        auto_delete: bool,
        arguments: dict[str, Any],
        clock: Clock | None = None,
    ) -> None:
        settings = parse_queue_arguments(arguments)
        self.settings: QueueSettings = settings
        self.name = name
        self.vhost_name = vhost_name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.clock = clock or Clock()
        self.ready: deque[QueueEntry] | PriorityReady = (
            PriorityReady(settings.max_priority) if settings.max_priority is not None else deque()
        )
        self.consumers: list[Consumer] = []
        self._levels: list[list[Consumer]] = [self.consumers]  # consumers by x-priority, desc
        self._rr = 0
        self._sole: Consumer | None = None  # the only consumer, when there is one level of one
        self._selective = False  # a consumer has an x-selector: selective.dispatch
        self.next_seq = 0
        self.had_consumer = False
        self.deleted = False
        self.ready_bytes = 0
        self.residency = Residency()  # stored / paged-out ready entries (model/residency.py)
        self.max_length = settings.max_length
        self.max_length_bytes = settings.max_length_bytes
        self.rejects_overflow = settings.overflow != "drop-head" and (
            self.max_length is not None or self.max_length_bytes is not None
        )
        self.message_ttl = settings.message_ttl / 1000 if settings.message_ttl is not None else None
        self.last_used = self.clock.now
        self.consumer_progress_at = 0.0  # when a consumer last settled a message
        # Set by the vhost: dead-lettering (x-dead-letter-exchange), the broker's set of
        # queues that need ticks (TTL, x-expires), and for stored queues the journal/pager.
        self.dead_letter: DeadLetter | None = None
        self.dead_letter_counts = DeadLetterCounts()  # the vhost shares the broker's
        self.watch_set: set[Queue] | None = None
        self.journal: JournalPort | None = None
        self.store_key = (vhost_name, name)
        self.pager: BodyLoader | None = None
        self.paging_set: set[Queue] | None = None
        self.store_progress: StoreProgress | None = None  # promised entries wait (held.py)
        self.page_candidates: deque[tuple[int, QueueEntry]] = deque()
        self.read_failing = False  # the last body read from the store failed (logged once)
        self._timed = 0  # ready entries with a deadline (expires_at)
        self.stats = QueueStats()  # counters for the management API (model/statistics.py)
        self.policy: PolicyRecord | None = None  # set by the vhost (model/policies.py)
        self.operator_policy: PolicyRecord | None = None
        dedup = parse_dedup_arguments(arguments)  # x-message-deduplication (model/dedup.py)
        self.dedup = None if dedup is None else Deduplicator(dedup, self.store_key)
        grouped = parse_groups_argument(arguments, settings)  # x-message-groups (model/groups.py)
        self.groups = MessageGroups() if grouped else None
        # Federated queues only (amqpd/model/federated_queues.py): the set to join when
        # something that decides whether the queue wants messages may have changed.
        self.demand_set: set[Queue] | None = None

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} in vhost {self.vhost_name!r}>"

    def reconfigure(self, settings: QueueSettings) -> None:
        """Adopt new effective settings (a policy changed; model/policies.py): its limits
        and timers apply at once (model/queue_limits.py)."""
        queue_limits.reconfigure(self, settings)

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

    def consumers_active(self) -> bool:
        """Whether consumers are attached and settled something within FLOW_ACTIVE s."""
        return bool(self.consumers) and self.clock.now - self.consumer_progress_at < FLOW_ACTIVE

    def behind(self, backlog: int) -> bool:
        """Whether more than ``backlog`` messages wait for consumers that are active: a
        publisher feeding this queue is paused (engine/connection.py `read_delay`)."""
        return len(self.ready) > backlog and self.consumers_active()

    def watch(self) -> None:
        """Ask the broker for ticks (TTL expiry, x-expires)."""
        if self.watch_set is not None:
            self.watch_set.add(self)

    # -- in ------------------------------------------------------------------------------
    def would_overflow(self, message: Message) -> bool:
        """True if this queue refuses the message (reject-publish and the limit reached)."""
        return queue_limits.would_overflow(self, message)

    def enqueue(
        self, message: Message, expiration_ms: int | None = None, promised: bool = False
    ) -> None:
        """Append a message and try to deliver it; drop-head enforces the length limits.

        ``expiration_ms`` is the message's own TTL (the ``expiration`` property); the lower
        of it and the queue's x-message-ttl wins. ``promised``: the publisher waits for a
        confirm or tx.commit-ok, so a stored entry is delivered only once written (held.py).
        """
        entry = QueueEntry(message, self.next_seq)
        self.next_seq += 1
        self.stats.publish += 1
        message.refs += 1
        ttl = self.message_ttl
        if expiration_ms is not None and (ttl is None or expiration_ms / 1000 < ttl):
            ttl = expiration_ms / 1000
        if ttl is not None:
            clock = self.clock
            entry.expires_at = expires_at = clock.now + ttl
            self._timed += 1
            if expires_at < clock.wake_at:  # (inline Clock.wake: this runs per message)
                clock.wake_at = expires_at
        if message.persistent and self.journal is not None and message.body is not None:
            entry.stored = True
            self.residency.add(entry)  # (appended to ready below)
            batch = self.journal.insert_message(
                self.store_key,
                entry.seq,
                MessageRecord(
                    message.exchange,
                    message.routing_key,
                    message.header,
                    message.body,
                    expires_at=entry.expires_at,
                ),
            )
            if promised:
                entry.hold = batch
            if self.pager is not None and len(self.ready) >= HOT_WINDOW:
                self.page_candidates.append((batch, entry))
                if self.paging_set is not None:
                    self.paging_set.add(self)
        self.ready.append(entry)
        self.ready_bytes += message.body_size
        if self.consumers:
            self.dispatch(entry)
        if self.max_length is not None or self.max_length_bytes is not None:
            queue_limits.drop_head_over_limit(self)
        if ttl is not None:
            self.expire()
            self.watch()

    def restore(self, entry: QueueEntry) -> None:
        """Append an entry recovered from the store (already journaled)."""
        entry.message.refs = 1
        self.ready.append(entry)
        self.ready_bytes += entry.message.body_size
        if entry.stored:
            self.residency.add(entry)
        if entry.expires_at is not None:
            self._timed += 1
            self.watch()
            self.clock.wake(entry.expires_at)

    # -- out -----------------------------------------------------------------------------
    def _pop_ready(self) -> QueueEntry:
        entry = self.ready.popleft()
        self.ready_bytes -= entry.message.body_size
        if entry.stored:
            self.residency.remove(entry)
        if entry.expires_at is not None:
            self._timed -= 1
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
        if self.groups is not None:
            self.groups.settled(self, entry)

    def discard(self, entry: QueueEntry, reason: str) -> None:
        """An entry leaves without being acked: rejected, expired, maxlen, delivery_limit.
        With x-dead-letter-exchange it is dead-lettered, otherwise dropped."""
        dead_letter = self.dead_letter
        if dead_letter is not None and not self._load_body(entry):
            log.error(
                "cannot dead-letter message %d of %r (%s): its body cannot be read from the "
                "store; it stays there and comes back when the broker restarts",
                entry.seq,
                self,
                reason,
            )
            return
        self.settled(entry)
        if dead_letter is not None:
            self.dead_letter_counts.at_most_once[reason] += 1
            dead_letter(self, entry.message, reason)
        else:
            self.dead_letter_counts.disabled[reason] += 1

    def _load_body(self, entry: QueueEntry) -> bool:
        """Make sure a paged-out entry's body is in memory (model/paging.py)."""
        return load_body(self, entry)

    def expire(self) -> None:
        """Drop (or dead-letter) expired messages at the head (RabbitMQ expires messages
        when they reach the head; with x-message-ttl that is all of them, in order)."""
        queue_limits.expire(self)

    def take(self) -> QueueEntry | None:
        """Pop the head entry (basic.get)."""
        self.last_used = self.clock.now
        if self.demand_set is not None:
            self.demand_set.add(self)
        self.expire()
        if not self.ready or self.held(self.ready[0]):
            return None  # (a promised head not yet written: as if empty, for a moment)
        if self.ready[0].message.body is None and not page_in(self):
            return None  # the store cannot be read now (logged): as if empty
        return self._pop_ready() if self.ready else None

    def tick(self) -> bool:
        """Timers: expire messages; return True when x-expires says the queue is unused for
        long enough and must be deleted. While body reads fail, retry delivering."""
        return queue_limits.tick(self)

    def next_deadline(self) -> float | None:
        """When this queue's timers next have something to do: the head message's expiry
        (RabbitMQ expires messages at the head, one timer per queue) and x-expires."""
        return queue_limits.next_deadline(self)

    @property
    def needs_ticks(self) -> bool:
        """Whether this queue still has timers to run."""
        return self.settings.expires is not None or self._timed > 0 or self.read_failing

    # -- back ----------------------------------------------------------------------------
    def requeue(self, entries: Iterable[QueueEntry], unsent: bool = False) -> None:
        """Put delivered entries back, marked redelivered (not when ``unsent``:
        queue_limits.coming_back): at their original positions (classic) or at the back
        (quorum, as RabbitMQ does), or dead-lettered past x-delivery-limit."""
        if self.deleted:
            return
        back = sorted(entries, key=_by_seq)
        if self.groups is not None:
            self.groups.returned(self, back)
        back = queue_limits.coming_back(self, back, unsent)
        if not back:
            return
        if self._selective:
            selective.rewind(self, back[0].seq)
        if self.groups is not None:
            self.groups.rewind(self.consumers, back[0].seq)
        for entry in back:
            entry.redelivered = entry.redelivered or not unsent
            self.ready_bytes += entry.message.body_size
            if entry.stored:
                self.residency.add(entry)
            if entry.expires_at is not None:
                self._timed += 1
        ready = self.ready
        if isinstance(ready, PriorityReady):
            ready.restore(back)
        elif self.settings.queue_type == "quorum":
            ready.extend(back)
        elif not ready or back[-1].seq < ready[0].seq:
            ready.extendleft(reversed(back))
        else:
            merged = list(ready)
            for entry in back:
                insort(merged, entry, key=_by_seq)
            self.ready = deque(merged)
        if self._timed:
            self.watch()
        self.dispatch()

    def purge(self) -> int:
        """Drop every ready message; return how many."""
        if self.demand_set is not None:
            self.demand_set.add(self)
        count = len(self.ready)
        if self.journal is not None:
            for entry in self.ready:
                self.settled(entry)
        self.ready.clear()
        self.ready_bytes = 0
        self.residency.clear()
        self._timed = 0
        return count

    # -- consumers -----------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        """Register a consumer and deliver what is ready."""
        self.consumers.append(consumer)
        self.had_consumer = True
        self.last_used = self.clock.now
        self._regroup()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Unregister a consumer (its unacked messages stay with its channel)."""
        try:
            index = self.consumers.index(consumer)
        except ValueError:
            return
        del self.consumers[index]
        self.last_used = self.clock.now
        if self.demand_set is not None:
            self.demand_set.add(self)
        self._regroup()
        if self.groups is not None:
            self.groups.consumer_left(self, consumer)
        if self.settings.single_active_consumer and index == 0:
            self.dispatch()  # fail over to the next consumer in registration order

    def _regroup(self) -> None:
        consumers = self.consumers
        self._selective = any(consumer.selector is not None for consumer in consumers)
        if self.settings.single_active_consumer:
            self._levels = [consumers[:1]] if consumers else []
        elif any(consumer.priority for consumer in consumers):
            priorities = sorted({consumer.priority for consumer in consumers}, reverse=True)
            self._levels = [[c for c in consumers if c.priority == p] for p in priorities]
        else:
            self._levels = [consumers]
        levels = self._levels
        if len(levels) == 1 and len(levels[0]) == 1:
            self._sole = levels[0][0]
            self._rr = 0  # what _next_consumer leaves after serving a single consumer
        else:
            self._sole = None

    def _next_consumer(self, skip: set[Any] | None = None) -> Consumer | None:
        """The consumer to deliver to: the highest x-priority level that has credit,
        round-robin within it (single active consumer: only the first one); consumers in
        ``skip`` (selective ones with nothing to take) are passed over."""
        for level in self._levels:
            count = len(level)
            start = self._rr
            for step in range(count):
                index = (start + step) % count
                consumer = level[index]
                if skip and consumer in skip:
                    continue
                if consumer.channel.has_credit(consumer):
                    self._rr = (index + 1) % count
                    return consumer
        return None

    def dispatch(self, arriving: QueueEntry | None = None) -> None:
        """Deliver ready messages to consumers that have credit.

        ``arriving`` is the entry being enqueued now: with a TTL of 0 it has expired the moment
        it arrives, but like RabbitMQ it still goes to a consumer that can take it at once."""
        if self.demand_set is not None:  # a federated queue: its demand may change
            self.demand_set.add(self)
        if self.groups is not None:
            self.groups.dispatch(self, arriving)
            return
        if self._selective:
            selective.dispatch(self, arriving)
            return
        ready = self.ready
        now = self.clock.now
        while ready and self.consumers:
            head = ready[0]
            expires_at = head.expires_at
            if (
                expires_at is not None
                and expires_at <= now
                and not (head is arriving and expires_at == now)
            ):
                if not queue_limits.discard_head(self, "expired"):
                    return
                continue
            if head.hold and self.held(head):
                return  # promised, not yet written: dispatched again once it is (held.py)
            sole = self._sole
            if sole is not None:  # one consumer (the usual case): no levels or round-robin
                consumer = sole if sole.channel.has_credit(sole) else None
            else:
                consumer = self._next_consumer()
            if consumer is None:
                return
            if head.message.body is None:
                if not page_in(self):
                    return
                continue
            consumer.channel.deliver(consumer, self, self._pop_ready())

    def held(self, entry: QueueEntry) -> bool:
        """Whether a promised entry still waits for its storage batch (held.py)."""
        progress = self.store_progress
        return entry.hold != 0 and progress is not None and progress.holds(self, entry.hold)

    # -- selective consumers (amqpd/model/selective.py) ----------------------------------
    def _expire_head(self, arriving: QueueEntry | None) -> bool:
        """Discard expired entries at the head (as `dispatch` does); False when one cannot
        be dead-lettered now."""
        return queue_limits.expire_head(self, arriving)

    def _take_ready(self, index: int) -> QueueEntry:
        """Remove the ready entry at ``index`` (a selective consumer's match)."""
        if index == 0:
            return self._pop_ready()
        ready = self.ready
        assert isinstance(ready, deque)  # selectors are refused on priority queues
        entry = ready[index]
        del ready[index]
        self.ready_bytes -= entry.message.body_size
        if entry.stored:
            self.residency.remove(entry)
        if entry.expires_at is not None:
            self._timed -= 1
        return entry


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq
