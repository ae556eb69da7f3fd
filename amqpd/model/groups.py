"""Message groups on a queue (``x-message-groups``): ActiveMQ's JMSXGroupID, broker-side.

Why a queue argument. A group must stay on one consumer however many client processes
consume from the queue, so the assignment has to live where every consumer is seen: in the
queue. ``x-message-groups: true`` (declared by the JMS client on amqpd, or by any AMQP
client) turns it on; it is refused with 406 on priority and quorum queues, whose ready list
is not kept in publish order. The group of a message is its ``JMSXGroupID`` header (any
message without one is ungrouped and goes to any consumer); ``JMSXGroupSeq = -1`` closes
its group.

Theory of operation
-------------------
State: ``owner`` maps each open group to the consumer it is assigned to; ``inflight`` maps
each delivered, not yet settled entry of a group to its group, and ``pending`` counts them
per group.

Dispatch (replacing the queue's round-robin and selective dispatch while the argument is
on) takes consumers with credit in the queue's usual order (x-priority levels, round-robin
within a level, single active consumer); each takes the first ready entry after its
*cursor* that it may have: ungrouped, of a group it owns, or of a group nobody owns (which
it then owns), and that its selector (``x-selector``, if any) matches. The cursor is the
``seq`` of the last ready entry the consumer passed over, so the entries of other
consumers' groups are examined once per consumer, not on every dispatch; whenever a group
is released (closed, or its consumer gone) every cursor goes back to the head, and a
requeue moves the cursors back to the first requeued entry. A new group goes to the next
consumer in that order that has credit, so groups spread over the consumers. A consumer
with nothing to take sits out the rest of the round.

Order within a group. A group's entries are delivered in ``seq`` order to its owner only.
When the owner goes away (``basic.cancel``, channel closed, connection lost) its groups
are released, but a group with deliveries still unsettled stays blocked (``draining``)
until they are acked or come back (requeued to their original places): then the next
owner gets them first, and the rest of the group after them. ``basic.get`` ignores groups
(it takes the head), as it ignores selectors.

Owners. A group belongs to a consumer, or, when its ``basic.consume`` carries the argument
``x-message-group-owner``, to that owner name: the JMS client names each JMS consumer so,
because it re-subscribes under a new consumer tag as its acknowledgement window grows
(subscribing anew before cancelling the old tag); the groups stay while any consumer of
that owner is on the queue.

The consumer marks the first message of a group it receives (``JMSXGroupFirstForConsumer``)
on the client side (interop/jms/groups.py): the broker keeps the content header as sent.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Final, Protocol

from amqpd.model.message import Clock, QueueEntry
from amqpd.model.queue_args import InvalidQueueArgument, QueueSettings, amqp_type_name
from amqpd.model.selective import entry_lookup

__all__ = [
    "GROUPS_ARGUMENT",
    "GROUP_ID",
    "GROUP_SEQ",
    "OWNER_ARGUMENT",
    "MessageGroups",
    "parse_groups_argument",
]

GROUPS_ARGUMENT: Final = "x-message-groups"
GROUP_ID: Final = "JMSXGroupID"
GROUP_SEQ: Final = "JMSXGroupSeq"
OWNER_ARGUMENT: Final = "x-message-group-owner"
_GROUP_ID_RAW: Final = bytes((len(GROUP_ID),)) + GROUP_ID.encode()
_GROUP_SEQ_RAW: Final = bytes((len(GROUP_SEQ),)) + GROUP_SEQ.encode()
_LONG: Final = struct.Struct(">I")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_seq: Final = attrgetter("seq")


def _peek_string(raw: bytes, at: int) -> str | None:
    """A longstr table value (type ``S``) at ``at``, or None for any other encoding."""
    if raw[at : at + 1] != b"S" or at + 5 > len(raw):
        return None
    (size,) = _LONG.unpack_from(raw, at + 1)
    end = at + 5 + size
    return raw[at + 5 : end].decode("utf-8", "replace") if end <= len(raw) else None


def _peek_int(raw: bytes, at: int) -> int | None:
    """A signed 32- or 64-bit table value (``I`` / ``l``) at ``at``, or None."""
    kind = raw[at : at + 1]
    if kind == b"I" and at + 5 <= len(raw):
        return int(_INT32.unpack_from(raw, at + 1)[0])
    if kind == b"l" and at + 9 <= len(raw):
        return int(_INT64.unpack_from(raw, at + 1)[0])
    return None


class GroupQueue(Protocol):
    """What group dispatch needs of a queue (`amqpd.model.queue.Queue`); the underscored
    members are the queue's internal steps, shared with selective dispatch."""

    @property
    def clock(self) -> Clock:
        """The broker's clock."""
        ...

    @property
    def ready(self) -> deque[QueueEntry] | Any:
        """Ready entries in seq order."""
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

    def dispatch(self, arriving: QueueEntry | None = None) -> None:
        """Deliver what can be delivered."""
        ...


def parse_groups_argument(arguments: dict[str, Any], settings: QueueSettings) -> bool:
    """Whether the queue keeps message groups.

    Raises:
        InvalidQueueArgument: not a boolean, or on a priority or quorum queue (406).
    """
    enabled = arguments.get(GROUPS_ARGUMENT, False)
    if not isinstance(enabled, bool):
        raise InvalidQueueArgument(
            GROUPS_ARGUMENT, f"{{unacceptable_type,{amqp_type_name(enabled)}}}"
        )
    if enabled and (settings.max_priority is not None or settings.queue_type == "quorum"):
        raise InvalidQueueArgument(
            GROUPS_ARGUMENT, "message groups are not supported on priority or quorum queues"
        )
    return enabled


def owner_key(consumer: Any) -> Any:
    """Who owns a consumer's groups: its ``x-message-group-owner``, else the consumer."""
    name = consumer.arguments.get(OWNER_ARGUMENT)
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return ("owner", name) if isinstance(name, str) else consumer


def group_of(entry: QueueEntry) -> tuple[str | None, bool]:
    """The entry's group id (None: ungrouped) and whether its JMSXGroupSeq is -1."""
    message = entry.message
    raw = message.headers_raw
    if raw is None:
        return None, False
    at = raw.find(_GROUP_ID_RAW)
    if at < 0:  # no decoding for ungrouped messages
        return None, False
    fast = _peek_string(raw, at + len(_GROUP_ID_RAW))
    if fast is not None:  # the usual encoding: read the two entries, decode nothing else
        seq_at = raw.find(_GROUP_SEQ_RAW)
        if seq_at < 0:
            return fast, False
        seq = _peek_int(raw, seq_at + len(_GROUP_SEQ_RAW))
        if seq is not None:
            return fast, seq == -1
    headers = message.headers
    if not headers:
        return None, False
    group = headers.get(GROUP_ID)
    if isinstance(group, bytes):
        group = group.decode("utf-8", "replace")
    if not isinstance(group, str):
        return None, False
    return group, headers.get(GROUP_SEQ) == -1


class MessageGroups:
    """The group assignment of one queue (see the module comment)."""

    __slots__ = ("_dispatching", "_redo", "draining", "groups_of", "inflight", "owner", "pending")

    def __init__(self) -> None:
        self.owner: dict[str, Any] = {}  # group -> consumer
        self.groups_of: dict[Any, set[str]] = {}  # consumer -> its groups
        self.inflight: dict[QueueEntry, str] = {}  # delivered, unsettled -> group
        self.pending: dict[str, int] = {}  # group -> unsettled deliveries
        self.draining: set[str] = set()  # groups whose consumer left, deliveries unsettled
        self._dispatching = False
        self._redo = False

    # -- dispatch --------------------------------------------------------------------------
    def dispatch(self, queue: GroupQueue, arriving: QueueEntry | None) -> None:
        """Deliver ready messages to consumers with credit, honouring groups and selectors."""
        if self._dispatching:  # a settle inside a delivery freed a group: go round again
            self._redo = True
            return
        self._dispatching = True
        try:
            self._redo = True
            while self._redo:
                self._redo = False
                self._round(queue, arriving)
        finally:
            self._dispatching = False

    def _round(self, queue: GroupQueue, arriving: QueueEntry | None) -> None:
        ready = queue.ready
        idle: set[Any] = set()
        while ready and queue.consumers:
            if not queue._expire_head(arriving) or not ready:
                return
            consumer = queue._next_consumer(skip=idle)
            if consumer is None:
                return
            found = self._find(queue, consumer)
            if found is None:
                idle.add(consumer)
                continue
            index, group, closes = found
            me = owner_key(consumer)
            entry = ready[index]
            if entry.message.body is None and not queue._load_body(entry):
                return  # the store cannot be read now (logged); retried on the next tick
            entry = queue._take_ready(index)
            if group is not None:
                if group not in self.owner or group in self.draining:
                    # a new group, or a draining one its owner (a new tag of it) takes back
                    self.owner[group] = me
                    self.draining.discard(group)
                    self.groups_of.setdefault(me, set()).add(group)
                if not consumer.no_ack:
                    self.inflight[entry] = group
                    self.pending[group] = self.pending.get(group, 0) + 1
                if closes:  # JMSXGroupSeq -1: the group ends with this message
                    del self.owner[group]
                    self.groups_of[me].discard(group)
                    if not self.groups_of[me]:
                        del self.groups_of[me]
                    self._restart(queue.consumers)
            consumer.channel.deliver(consumer, queue, entry)

    def _find(self, queue: GroupQueue, consumer: Any) -> tuple[int, str | None, bool] | None:
        """The first ready entry after the consumer's cursor that it may take."""
        ready = queue.ready
        selector = consumer.selector
        owner = self.owner
        me = owner_key(consumer)
        now = queue.clock.now
        cursor = consumer.cursor
        start = 0 if not ready or ready[0].seq > cursor else bisect_right(ready, cursor, key=_seq)
        for index in range(start, len(ready)):
            entry = ready[index]
            group, closes = group_of(entry)
            holder = owner.get(group) if group is not None else None
            if holder is None or holder == me:
                expired = entry.expires_at is not None and entry.expires_at <= now
                if not expired and (selector is None or selector(entry_lookup(entry))):
                    return index, group, closes
            consumer.cursor = entry.seq
        return None

    # -- changes ---------------------------------------------------------------------------
    def consumer_left(self, queue: GroupQueue, consumer: Any) -> None:
        """``consumer`` left the queue: its groups go to the others (a group with
        deliveries still unsettled once those are settled), and dispatch runs."""
        me = owner_key(consumer)
        if any(owner_key(other) == me for other in queue.consumers):
            return  # the same owner is still there (a JMS consumer's new tag)
        groups = self.groups_of.pop(me, None)
        if not groups:
            return
        for group in groups:
            if self.pending.get(group):
                self.draining.add(group)
            else:
                del self.owner[group]
        self._restart(queue.consumers)
        queue.dispatch()

    def settled(self, queue: GroupQueue, entry: QueueEntry) -> None:
        """A delivered entry was acked or dropped."""
        if self._forget(queue, entry):
            self._restart(queue.consumers)
            queue.dispatch()

    def returned(self, queue: GroupQueue, entries: Iterable[QueueEntry]) -> None:
        """Delivered entries are being requeued (the queue dispatches afterwards, once they
        are back in their places; it moves the cursors back to them with `rewind`)."""
        released = False
        for entry in entries:
            released = self._forget(queue, entry) or released
        if released:
            self._restart(queue.consumers)

    def rewind(self, consumers: Iterable[Any], first_seq: int) -> None:
        """Entries from ``first_seq`` on came back: every consumer looks at them again."""
        for consumer in consumers:
            if consumer.cursor >= first_seq:
                consumer.cursor = first_seq - 1

    def _forget(self, queue: GroupQueue, entry: QueueEntry) -> bool:
        """Drop an entry from the in-flight set; True when that released a draining group
        (one whose owner came back in the meantime keeps it)."""
        group = self.inflight.pop(entry, None)
        if group is None:
            return False
        left = self.pending[group] - 1
        if left:
            self.pending[group] = left
            return False
        del self.pending[group]
        if group in self.draining:
            self.draining.discard(group)
            holder = self.owner.get(group)
            if any(owner_key(consumer) == holder for consumer in queue.consumers):
                self.groups_of.setdefault(holder, set()).add(group)
                return False
            self.owner.pop(group, None)
            return True
        return False

    @staticmethod
    def _restart(consumers: Iterable[Any]) -> None:
        for consumer in consumers:
            consumer.cursor = -1
