"""Messages held by ``x-delayed-message`` exchanges until their delay ends.

Theory of operation
-------------------
Each delayed exchange has one `DelayedMessages`: the messages it holds, ordered by due time
in ONE deadline structure, a binary heap of integer keys. A key is the due time in whole
milliseconds shifted left by `KEY_SHIFT` bits, plus a counter in the low bits (bumped on a
clash), so keys are unique, ordered by due time and, among equal due times, by arrival.
``_hot`` maps the key of each message held in memory to its `Message`; ``_cold`` holds the
keys of those kept only in the store (below). There is no timer per message: the head of the
heap is the exchange's next deadline, announced on the broker's `Clock` (``wake``) when a
message arrives earlier than everything held and after every tick, and the shell's ticker
sleeps until the earliest deadline of the whole core (as for message TTLs).

A held message is not in any queue. When its time comes (`fire`, from `DelayedHub.tick`)
it is routed through its exchange as it is bound *then* (the plugin's rule), following
exchange-to-exchange bindings and alternate exchanges, and enqueued in every queue it
reaches, as a publish would be (x-overflow, deduplication and its own expiration apply
from that moment). Its ``x-delay`` header reads ``-delay`` from the moment it is held, as
the plugin's swap_delay_header leaves it, so republishing a delivered message does not
delay it again. At most `FIRE_BUDGET` messages fire per tick, and (stored exchanges) into
one storage batch; the rest wait for the next tick (10 ms later), so that a backlog that
is due at once (after a restart) neither stops the broker serving its clients nor piles
up uncommitted messages in memory faster than the store commits them.

Storage: a persistent message on a durable exchange is journaled in the store as a
message of an internal queue named ``amq.delayed-<exchange>`` (clients cannot declare
``amq.`` names), with the key as its sequence number, so the store's order of that queue
IS due order. The publisher's confirm waits for that insert's batch like any other
persistent message (`holder` is the stand-in queue the publish path sees), and firing
journals the delete together with the inserts into the target queues, in one batch.

Memory stays bounded: once its insert has committed while more than `HOT_WINDOW` messages
are held, a stored message is forgotten but for its key (``_cold``: a heap slot, an int and
a set entry, ~80 bytes); `fire` reads the next `PAGE_SIZE` messages back in one read
(``BodyLoader.read_messages(after key)``, due order) when it reaches a key it does not
hold in memory. After a restart the store's load returns only the keys, already sorted (a
sorted list is a heap; ``load(keys_only=STORE_PREFIX)`` reads the primary key's index, no
row), so a restart with a million held costs ~1 s of reading. A failed read is logged
once, the messages stay, and the periodic tick retries.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from amqpd.model.message import Clock, Message
from amqpd.model.queue import Queue
from amqpd.model.queue_args import parse_expiration
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header
from amqpd.wire.properties import RawProperties
from exchanges.delayed import DELAY_HEADER, delay_of
from persistence.records import MessageRecord

if TYPE_CHECKING:
    from amqpd.model.ports import BodyLoader, JournalPort

log = logging.getLogger(__name__)

STORE_PREFIX: Final = "amq.delayed-"  # the internal store queue of a durable delayed exchange
KEY_SHIFT: Final = 20  # low bits of a key: the arrival counter
_COUNTER_MASK: Final = (1 << KEY_SHIFT) - 1
HOT_WINDOW: Final = 1024  # held beyond this many, committed messages live in the store only
PAGE_SIZE: Final = 1024  # messages read back per page
FIRE_BUDGET: Final = 2000  # messages fired per tick and exchange at most

Route = Callable[[Message], list[Queue]]


def store_name(exchange: str) -> str:
    """The internal store queue of a delayed exchange's persistent messages."""
    return STORE_PREFIX + exchange


def due_of(key: int) -> float:
    """The due time (unix seconds) a key encodes."""
    return (key >> KEY_SHIFT) / 1000


class DelayedHub:
    """The broker's delayed exchanges that hold messages (ticked) and that have messages
    to page out after a commit; one per broker (a lone vhost keeps its own)."""

    __slots__ = ("paging", "pending")

    def __init__(self) -> None:
        self.pending: set[DelayedMessages] = set()
        self.paging: set[DelayedMessages] = set()

    def tick(self, now: float) -> None:
        """Fire what is due in every delayed exchange and announce the next deadlines."""
        for delayed in list(self.pending):
            try:
                delayed.fire(now)
            except Exception:  # a bug must not stop the other exchanges or the broker
                log.exception("firing delayed messages of %r failed", delayed)
            if not delayed.count:
                self.pending.discard(delayed)

    def batch_committed(self, batch: int) -> None:
        """Forget (keep only the keys of) the messages whose insert is now stored."""
        for delayed in list(self.paging):
            if not delayed.page_out(batch):
                self.paging.discard(delayed)


class DelayedMessages:
    """The messages one delayed exchange holds (see the module comment)."""

    __slots__ = (
        "_candidates",
        "_cold",
        "_counter",
        "_fired_batch",
        "_heap",
        "_hot",
        "_names",
        "clock",
        "holder",
        "hub",
        "journal",
        "pager",
        "read_failing",
        "route",
        "store_key",
    )

    def __init__(
        self,
        vhost_name: str,
        exchange_name: str,
        clock: Clock,
        route: Route,
        hub: DelayedHub,
        journal: JournalPort | None = None,
        pager: BodyLoader | None = None,
    ) -> None:
        name = store_name(exchange_name)
        self.store_key = (vhost_name, name)
        self.clock = clock
        self.route = route  # routes a message through the exchange as bound now
        self.hub = hub
        self.journal = journal  # set for a durable exchange on a broker with a store
        self.pager = pager
        # what the publish path sees as "the queue it went to": confirms wait for its store
        self.holder = Queue(name, vhost_name, journal is not None, None, False, {}, clock)
        self.holder.journal = journal
        self._heap: list[int] = []  # every key, a binary heap: the one deadline structure
        self._hot: dict[int, Message] = {}  # held messages in memory
        self._cold: set[int] = set()  # held messages only in the store (read back to fire)
        self._counter = 0
        self._candidates: deque[tuple[int, int]] = deque()  # (batch, key) to page out
        self._names: dict[str, bytes] = {}  # shortstrs of paged-in names (a few distinct)
        self._fired_batch = (-1, 0)  # (open batch id, messages fired into it)
        self.read_failing = False

    def __repr__(self) -> str:
        return f"<DelayedMessages {self.store_key[1]!r} in vhost {self.store_key[0]!r}>"

    @property
    def count(self) -> int:
        """Messages held (the plugin's ``messages_delayed``)."""
        return len(self._heap)

    def next_deadline(self) -> float | None:
        """When the next held message is due, or None."""
        return due_of(self._heap[0]) if self._heap else None

    # -- in ------------------------------------------------------------------------------
    @staticmethod
    def delay(message: Message) -> int | None:
        """The delay (ms) the message asks for, or None to route it at once."""
        if message.headers_raw is None or DELAY_HEADER.encode() not in message.headers_raw:
            return None
        return delay_of(message.headers)

    def hold(self, message: Message, delay: int) -> list[Queue]:
        """Keep ``message`` until ``delay`` ms from now; returns ``[holder]`` (what the
        publish path counts as routed and waits on for the confirm)."""
        props = RawProperties(message.header)
        props.edit_headers({DELAY_HEADER: -delay})
        message.header = props.encode()
        message.headers_raw = peek_header(message.header).headers_raw
        message.reset_headers()
        due_ms = math.ceil(self.clock.now * 1000) + delay
        self._counter = counter = (self._counter + 1) & _COUNTER_MASK
        key = (due_ms << KEY_SHIFT) | counter
        hot, cold = self._hot, self._cold
        while key in hot or key in cold:  # the counter wrapped onto one due the same ms
            key += 1
        heap = self._heap
        if not heap or key < heap[0]:
            self.clock.wake(due_of(key))
        heapq.heappush(heap, key)
        hot[key] = message
        self.hub.pending.add(self)
        journal = self.journal
        if journal is not None and message.persistent and message.body is not None:
            batch = journal.insert_message(
                self.store_key,
                key,
                MessageRecord(
                    message.exchange, message.routing_key, message.header, message.body,
                    expires_at=due_ms / 1000,
                ),
            )  # fmt: skip
            if self.pager is not None:
                self._candidates.append((batch, key))
                self.hub.paging.add(self)
        return [self.holder]

    def restore(self, records: list[tuple[int, MessageRecord]]) -> int:
        """Adopt the messages recovered from the store (in ascending key order, so the key
        list is a heap as it is): those loaded with their body stay in memory, the others
        only as keys. Returns how many."""
        heap = self._heap
        hot, cold = self._hot, self._cold
        for key, record in records:
            if heap and key < heap[-1]:  # never from the store; keep the heap valid anyway
                heapq.heappush(heap, key)
            else:
                heap.append(key)
            if record.body_size is None and (self.pager is None or len(hot) < HOT_WINDOW):
                hot[key] = self._message(
                    record.exchange, record.routing_key, record.header, record.body
                )
            else:
                cold.add(key)
        if heap:
            self.clock.wake(due_of(heap[0]))
            self.hub.pending.add(self)
        return len(records)

    def restore_keys(self, keys: list[int]) -> int:
        """Adopt the keys of the messages in the store (ascending: a heap as it is); each
        is read back a page at a time when it is due. Returns how many."""
        heap = self._heap
        if heap:  # (never: a restart starts empty) keep the heap valid anyway
            for key in keys:
                heapq.heappush(heap, key)
        else:
            heap.extend(keys)
        self._cold.update(keys)
        if heap:
            self.clock.wake(due_of(heap[0]))
            self.hub.pending.add(self)
        return len(keys)

    def _message(self, exchange: str, routing_key: str, header: bytes, body: bytes) -> Message:
        """A stored message back in memory."""
        names = self._names
        exchange_raw = names.get(exchange)
        if exchange_raw is None:
            exchange_raw = names[exchange] = encode_shortstr(exchange)
        key_raw = names.get(routing_key)
        if key_raw is None:
            if len(names) > 4096:
                names.clear()
            key_raw = names[routing_key] = encode_shortstr(routing_key)
        peek = peek_header(header)
        return Message(
            exchange, routing_key, exchange_raw, key_raw, header, body, True,
            peek.priority, peek.expiration, peek.headers_raw,
        )  # fmt: skip

    # -- out -----------------------------------------------------------------------------
    def fire(self, now: float) -> int:
        """Route every message due by ``now`` (at most `FIRE_BUDGET` per tick, and at most
        `FIRE_BUDGET` stored ones into one storage batch); announce the next deadline.
        Returns how many fired."""
        heap = self._heap
        hot = self._hot
        journal = self.journal
        now_ms = now * 1000
        fired = stored = 0
        room = FIRE_BUDGET  # stored messages this batch may still take
        if journal is not None and self._fired_batch[0] == journal.open_batch_id:
            room -= self._fired_batch[1]
        while heap and (heap[0] >> KEY_SHIFT) <= now_ms:
            if fired >= FIRE_BUDGET or stored >= room:
                self.clock.wake(now)  # the rest next tick: clients get served in between
                break
            key = heap[0]
            message = hot.pop(key, None)
            if message is None:
                if not self._page_in(key):
                    break  # the store cannot be read now: the periodic tick retries
                continue  # in memory now (or dropped, logged, if the store lost it)
            heapq.heappop(heap)
            if journal is not None and message.persistent:
                journal.delete_message(self.store_key, key)
                stored += 1
            self._deliver(message)
            fired += 1
        else:
            if heap:
                self.clock.wake(due_of(heap[0]))
        if journal is not None and stored:
            batch = journal.open_batch_id
            into = self._fired_batch[1] if self._fired_batch[0] == batch else 0
            self._fired_batch = (batch, into + stored)
        return fired

    def _deliver(self, message: Message) -> None:
        """Enqueue a due message where its exchange routes it now."""
        expiration_ms = None
        if message.expiration is not None:
            try:
                expiration_ms = parse_expiration(message.expiration)
            except ValueError:  # checked at publish; never stored otherwise
                expiration_ms = None
        for queue in self.route(message):
            if queue.rejects_overflow and queue.would_overflow(message):
                if queue.settings.overflow == "reject-publish-dlx" and queue.dead_letter:
                    queue.dead_letter(queue, message, "maxlen")
                continue
            if queue.dedup is not None and not queue.dedup.admit(message, queue.journal):
                continue
            queue.enqueue(message, expiration_ms)

    def drop_all(self) -> None:
        """The exchange is deleted: forget everything (its store queue's delete cascades)."""
        self._heap.clear()
        self._hot.clear()
        self._cold.clear()
        self._candidates.clear()
        self.hub.pending.discard(self)
        self.hub.paging.discard(self)

    # -- paging --------------------------------------------------------------------------
    def page_out(self, committed_batch: int) -> bool:
        """Forget (keep only the key of) the messages whose insert committed, while more
        than `HOT_WINDOW` are held. Returns True while candidates remain."""
        candidates = self._candidates
        hot, cold = self._hot, self._cold
        keep = len(self._heap) <= HOT_WINDOW
        while candidates and candidates[0][0] <= committed_batch:
            _batch, key = candidates.popleft()
            if not keep and hot.pop(key, None) is not None:
                cold.add(key)
        return bool(candidates)

    def _page_in(self, head: int) -> bool:
        """Read the next page of held messages (in due order) back from the store. False
        if it cannot be read now (logged once); a message the store lost is dropped."""
        pager = self.pager
        cold = self._cold
        if pager is not None:
            try:
                page = pager.read_messages(self.store_key, head - 1, PAGE_SIZE)
            except Exception as exc:  # any backend's failure, contained here
                if not self.read_failing:
                    self.read_failing = True
                    log.error(
                        "cannot read delayed messages of %r from the store: %s; they fire "
                        "when it can be read again",
                        self,
                        exc,
                    )
                return False
            if self.read_failing:
                self.read_failing = False
                log.info("delayed messages of %r can be read from the store again", self)
            hot = self._hot
            for key, exchange, routing_key, header, body in page:
                if key in cold:
                    cold.discard(key)
                    hot[key] = self._message(exchange, routing_key, header, body)
        if head in cold:
            log.error("lost delayed message %d of %r; dropping it", head, self)
            cold.discard(head)
            heapq.heappop(self._heap)
            if self.journal is not None:
                self.journal.delete_message(self.store_key, head)
        return True
