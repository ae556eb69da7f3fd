"""Selective consumers: ``basic.consume`` with a JMS selector in the ``x-selector`` argument.

Theory of operation
-------------------
A consumer whose arguments carry ``x-selector`` (a JMS message selector, e.g.
``"region = 'eu' AND JMSPriority > 4"``) is handed only the ready messages that match it;
the others stay in the queue, in order, for the other consumers: ActiveMQ's selective queue
consumers. The selector sees the message's headers table as JMS properties and the JMS
header fields mapped from the AMQP properties (`entry_lookup`). A selector that does not
parse is refused at ``basic.consume`` with 406 PRECONDITION_FAILED, and so is one on a
priority (``x-max-priority``) or quorum queue, whose ready list is not in ``seq`` order.

While a queue has at least one selective consumer, `dispatch` replaces the queue's plain
round-robin: consumers with credit are taken in the queue's usual order (x-priority levels,
round-robin within a level); a plain consumer takes the head, a selective one the first
ready entry it matches. Each selective consumer keeps a *cursor*, the ``seq`` of the last
ready entry it examined: every entry up to the cursor either did not match or was taken,
so its selector runs on each entry once, never again from the head of the queue. The ready
deque of a classic queue stays in ``seq`` order (requeued entries go back to their
positions), so the first entry after a cursor is found by bisection. A requeue changes
JMSRedelivered and JMSXDeliveryCount, so it moves every cursor back to just before the
first requeued entry. A consumer with nothing to take is left out for the rest of the
round, which ends when no consumer with credit can take anything.

A *browser* (``basic.consume`` with ``x-browse=true`` and no-ack, optionally with a
selector) is not a consumer of the queue: it gets a copy of every ready message that
matches, in order, as they are at that moment (`browse_entries`; neither the redelivered
flag nor the delivery count changes, nothing is taken), then the broker cancels it
(``basic.cancel`` from the server): the end of the enumeration, like ActiveMQ's browse end
marker.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final, Protocol

from amqpd.model.message import Clock, QueueEntry
from amqpd.model.queue_args import QueueSettings
from amqpd.model.selector import Predicate, SelectorError, compile_selector
from amqpd.wire.errors import PRECONDITION_FAILED, AMQPError
from amqpd.wire.properties import RawProperties

__all__ = [
    "BROWSE_ARGUMENT",
    "SELECTOR_ARGUMENT",
    "SelectiveConsumer",
    "SelectiveQueue",
    "browse_entries",
    "consumer_selector",
    "dispatch",
    "entry_lookup",
    "rewind",
]


class _Sink(Protocol):
    def deliver(self, consumer: Any, queue: Any, entry: QueueEntry) -> None: ...


class SelectiveConsumer(Protocol):
    """What dispatch needs of a consumer (`amqpd.model.queue.Consumer`)."""

    selector: Predicate | None
    cursor: int

    @property
    def channel(self) -> _Sink:
        """Takes the deliveries."""
        ...


class SelectiveQueue(Protocol):
    """What dispatch needs of a queue (`amqpd.model.queue.Queue`); the underscored members
    are the queue's internal steps."""

    @property
    def name(self) -> str:
        """The queue's name."""
        ...

    @property
    def settings(self) -> QueueSettings:
        """Its parsed arguments."""
        ...

    @property
    def clock(self) -> Clock:
        """The broker's clock."""
        ...

    @property
    def ready(self) -> deque[QueueEntry] | Any:
        """Ready entries in seq order (a deque for classic queues)."""
        ...

    @property
    def consumers(self) -> Sequence[Any]:
        """Its consumers."""
        ...

    def _expire_head(self, arriving: QueueEntry | None) -> bool:
        """Drop expired entries at the head; False if one cannot be dead-lettered now."""
        ...

    def _next_consumer(self, skip: set[Any] | None = None) -> Any:
        """The next consumer with credit (not in ``skip``), or None."""
        ...

    def _load_body(self, entry: QueueEntry) -> bool:
        """Read a paged-out body back; False if the store cannot be read now."""
        ...

    def _take_ready(self, index: int) -> QueueEntry:
        """Remove the ready entry at ``index`` (accounting kept)."""
        ...

    def held(self, entry: QueueEntry) -> bool:
        """Whether a promised entry still waits for its storage batch (held.py)."""
        ...


SELECTOR_ARGUMENT: Final = "x-selector"
BROWSE_ARGUMENT: Final = "x-browse"

_CORRELATION_ID, _MESSAGE_ID, _TIMESTAMP, _TYPE = 10, 7, 6, 5


def consumer_selector(arguments: dict[str, Any], queue: SelectiveQueue) -> Predicate | None:
    """The compiled ``x-selector`` of a ``basic.consume``, or None without one.

    Raises:
        AMQPError: 406 when the selector is not a string, does not parse, or the queue
            cannot serve selectors (priority or quorum queue).
    """
    text = arguments.get(SELECTOR_ARGUMENT)
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{SELECTOR_ARGUMENT}': not a string")
    if not text.strip():
        return None
    if queue.settings.max_priority is not None or queue.settings.queue_type == "quorum":
        raise AMQPError(
            PRECONDITION_FAILED,
            f"'{SELECTOR_ARGUMENT}' is not supported on priority or quorum queues ('{queue.name}')",
        )
    try:
        return compile_selector(text)
    except SelectorError as exc:
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{SELECTOR_ARGUMENT}': {exc}") from None


def entry_lookup(entry: QueueEntry) -> Any:
    """The JMS view of a ready entry for a selector: identifier -> value or None."""
    message = entry.message
    raw: list[RawProperties] = []

    def prop(bit: int) -> RawProperties:
        if not raw:
            raw.append(RawProperties(message.header))
        return raw[0]

    def get(name: str) -> Any:
        if name.startswith("JMS"):
            return _jms_header(name, entry, prop)
        headers = message.headers
        value = headers.get(name) if headers else None
        if isinstance(value, Decimal):
            return float(value)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value

    return get


def _jms_header(name: str, entry: QueueEntry, prop: Any) -> Any:
    message = entry.message
    if name == "JMSPriority":
        return message.priority if message.priority is not None else 4
    if name == "JMSDeliveryMode":
        return "PERSISTENT" if message.persistent else "NON_PERSISTENT"
    if name == "JMSRedelivered":
        return entry.redelivered or entry.delivery_count > 0
    if name == "JMSXDeliveryCount":
        return entry.delivery_count + 1
    if name == "JMSMessageID":
        return prop(_MESSAGE_ID).get_shortstr(_MESSAGE_ID)
    if name == "JMSCorrelationID":
        return prop(_CORRELATION_ID).get_shortstr(_CORRELATION_ID)
    if name == "JMSType":
        return prop(_TYPE).get_shortstr(_TYPE)
    if name == "JMSTimestamp":
        stamp = prop(_TIMESTAMP).fields.get(_TIMESTAMP)
        return int.from_bytes(stamp, "big") * 1000 if stamp is not None else None
    headers = message.headers
    return headers.get(name) if headers else None


def browse_entries(queue: SelectiveQueue, selector: Predicate | None) -> list[QueueEntry]:
    """A browser's snapshot (``x-browse``): the ready entries that match, in queue order,
    their bodies in memory. Nothing about them changes (not delivered, not counted)."""
    now = queue.clock.now
    found = []
    for entry in list(queue.ready):
        if entry.expires_at is not None and entry.expires_at <= now:
            continue
        if selector is not None and not selector(entry_lookup(entry)):
            continue
        if entry.hold and queue.held(entry):
            continue  # promised, not yet written (held.py)
        if entry.message.body is None and not queue._load_body(entry):
            break  # the store cannot be read now (logged): the snapshot ends here
        found.append(entry)
    return found


def rewind(queue: SelectiveQueue, first_seq: int) -> None:
    """Entries from ``first_seq`` on were requeued: selectors must look at them again."""
    for consumer in queue.consumers:
        if consumer.selector is not None and consumer.cursor >= first_seq:
            consumer.cursor = first_seq - 1


def dispatch(queue: SelectiveQueue, arriving: QueueEntry | None) -> None:
    """Deliver ready messages to consumers with credit, honouring their selectors."""
    ready = queue.ready
    idle: set[SelectiveConsumer] = set()
    while ready and queue.consumers:
        if not queue._expire_head(arriving):
            return
        if not ready:
            return
        consumer: SelectiveConsumer | None = queue._next_consumer(skip=idle)
        if consumer is None:
            return
        index = 0 if consumer.selector is None else _find(queue, consumer)
        if index is None:
            idle.add(consumer)
            continue
        entry = ready[index]
        if entry.hold and queue.held(entry):
            return  # promised, not yet written: dispatched again once it is (held.py)
        if entry.message.body is None and not queue._load_body(entry):
            return  # the store cannot be read now (logged); retried on the next tick
        consumer.channel.deliver(consumer, queue, queue._take_ready(index))


def _find(queue: SelectiveQueue, consumer: SelectiveConsumer) -> int | None:
    """Index of the first ready entry after the consumer's cursor that it matches."""
    ready = queue.ready
    selector = consumer.selector
    assert selector is not None
    now = queue.clock.now
    start = bisect_right(ready, consumer.cursor, key=_seq)
    for index in range(start, len(ready)):
        entry = ready[index]
        consumer.cursor = entry.seq
        if entry.expires_at is not None and entry.expires_at <= now:
            continue  # expires when it reaches the head
        if selector(entry_lookup(entry)):
            return index
    return None


def _seq(entry: QueueEntry) -> int:
    return entry.seq
