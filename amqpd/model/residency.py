"""Where a queue's ready messages are, kept as counters (RabbitMQ's
``messages_persistent(_bytes)`` and ``messages_paged_out(_bytes)``; sans-IO).

Theory of operation
-------------------
A ready entry is *persistent* when it is stored (``entry.stored``: a persistent message
in a durable queue) and *paged out* when its body is in the store only (``message.body is
None``). Every paged-out ready entry is stored (only stored entries are paged out or
recovered without a body), so the queue touches these counters only for stored entries:
non-persistent traffic pays one branch, persistent traffic (already journaled) a call.

The queue (amqpd/model/queue.py) calls `add` when a stored entry joins ``ready`` (enqueue,
recovery, requeue), `remove` when one leaves it (every pop, a failed batch's drop),
`dropped` / `loaded` when a ready entry's body is paged out / read back, and `clear` on
purge. Listings, scrapes and the memory breakdown read the four numbers: O(1) per queue.
An entry outside ``ready`` (delivered, unacked) always has its body: `paging.page_out`
drops only the bodies of entries never delivered, which are in ``ready``.
"""

from __future__ import annotations

from amqpd.model.message import Message, QueueEntry


class Residency:
    """A queue's ready messages by where they are (counts and body bytes)."""

    __slots__ = ("paged_out", "paged_out_bytes", "persistent", "persistent_bytes")

    def __init__(self) -> None:
        self.persistent = 0  # stored ready entries
        self.persistent_bytes = 0
        self.paged_out = 0  # ready entries whose body is in the store only
        self.paged_out_bytes = 0

    def add(self, entry: QueueEntry) -> None:
        """A stored entry joined the ready list."""
        message = entry.message
        size = message.body_size
        self.persistent += 1
        self.persistent_bytes += size
        if message.body is None:
            self.paged_out += 1
            self.paged_out_bytes += size

    def remove(self, entry: QueueEntry) -> None:
        """A stored entry left the ready list."""
        message = entry.message
        size = message.body_size
        self.persistent -= 1
        self.persistent_bytes -= size
        if message.body is None:
            self.paged_out -= 1
            self.paged_out_bytes -= size

    def dropped(self, message: Message) -> None:
        """A ready entry's body was paged out (its body is now None)."""
        self.paged_out += 1
        self.paged_out_bytes += message.body_size

    def loaded(self, message: Message) -> None:
        """A ready entry's paged-out body was read back."""
        self.paged_out -= 1
        self.paged_out_bytes -= message.body_size

    def clear(self) -> None:
        """The ready list was emptied (purge)."""
        self.persistent = self.persistent_bytes = self.paged_out = self.paged_out_bytes = 0
