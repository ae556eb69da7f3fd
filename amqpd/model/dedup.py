"""Broker-side message deduplication on a queue (``x-message-deduplication``).

Theory of operation. A queue declared with ``x-message-deduplication: true`` keeps a
*window*: the deduplication ids of the last ``x-deduplication-window`` messages it accepted
(default 100,000), oldest first. A message's id is its ``message_id`` property, or the value
of the header named by ``x-deduplication-header``. A message whose id is in the window is a
duplicate: it is not enqueued, and the publisher still gets a ``basic.ack`` (not a nack:
a publisher that retries after a lost confirm must not be told to retry again) once the
original is safely stored. A message without an id is always accepted and not remembered.
When the window is full, accepting an id evicts the oldest one: a duplicate that arrives
after more than ``window`` other ids were accepted is enqueued again. That is the bound.

Durability. For a durable queue the window is stored with the messages (the ``dedup_ids``
table, schema 5): an accepted id is journaled in the same storage batch as the message (for
persistent messages; a transient message is lost in a restart, so its id is not kept
either), and evictions are journaled too, so after a restart the window is what it was at
the last commit. Ids are positioned by a per-queue counter (``pos``), not by the message
``seq``, because the window outlives the messages (a consumed message's id stays in it).
A duplicate's confirm waits for the open storage batch (``barrier``), which commits after
the batch that holds the original's id.

Scope: published messages only (``engine/content.route_and_enqueue`` asks ``admit`` before
each enqueue); dead-lettered messages enter a queue without passing the window. An id stays
in the window if its message's storage batch fails (the publisher got a nack for it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from amqpd.model.message import Message
from amqpd.model.ports import JournalPort
from amqpd.model.queue_args import InvalidQueueArgument, amqp_type_name
from amqpd.wire.content_header import decode_headers_table
from amqpd.wire.properties import RawProperties

__all__ = ["DEFAULT_WINDOW", "Deduplicator", "parse_dedup_arguments"]

DEFAULT_WINDOW = 100_000
MAX_WINDOW = 10_000_000
_MESSAGE_ID = 7  # property bit of message_id (wire/properties.PROPERTY_LAYOUT)


@dataclass(frozen=True, slots=True)
class DedupSettings:
    """``x-deduplication-window`` and ``x-deduplication-header`` of a deduplicating queue."""

    window: int = DEFAULT_WINDOW
    header: str | None = None


def parse_dedup_arguments(arguments: dict[str, Any]) -> DedupSettings | None:
    """The queue's deduplication settings, or None when it does not deduplicate.

    Raises:
        InvalidQueueArgument: A value of the wrong type or out of range (406).
    """
    enabled = arguments.get("x-message-deduplication", False)
    if not isinstance(enabled, bool):
        raise InvalidQueueArgument(
            "x-message-deduplication", f"{{unacceptable_type,{amqp_type_name(enabled)}}}"
        )
    if not enabled:
        return None
    window = arguments.get("x-deduplication-window", DEFAULT_WINDOW)
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        raise InvalidQueueArgument(
            "x-deduplication-window", f"expected an integer in 1..{MAX_WINDOW}, got {window!r}"
        )
    header = arguments.get("x-deduplication-header")
    if isinstance(header, bytes | bytearray):
        header = bytes(header).decode(errors="replace")
    if header is not None and (not isinstance(header, str) or not header):
        raise InvalidQueueArgument(
            "x-deduplication-header", f"{{unacceptable_type,{amqp_type_name(header)}}}"
        )
    return DedupSettings(window, header)


class Deduplicator:
    """The window of one queue; see the module docstring.

    Args:
        settings: Window size and id source.
        store_key: The queue's ``(vhost, name)`` in the store.
    """

    __slots__ = ("_ids", "next_pos", "settings", "store_key")

    def __init__(self, settings: DedupSettings, store_key: tuple[str, str]) -> None:
        self.settings = settings
        self.store_key = store_key
        self._ids: OrderedDict[bytes, int] = OrderedDict()  # id -> pos, oldest first
        self.next_pos = 0

    def __len__(self) -> int:
        return len(self._ids)

    def key(self, message: Message) -> bytes | None:
        """The message's deduplication id (None: it has none)."""
        header = self.settings.header
        if header is None:
            raw = RawProperties(message.header).fields.get(_MESSAGE_ID)
            return None if raw is None or len(raw) < 2 else raw[1:]
        table = decode_headers_table(message.headers_raw)
        value = None if table is None else table.get(header)
        if value is None:
            return None
        if isinstance(value, bytes | bytearray):
            return bytes(value)
        return str(value).encode()

    def admit(self, message: Message, journal: JournalPort | None) -> bool:
        """Remember the message's id and return True, or return False for a duplicate.

        Args:
            message: The published message.
            journal: The queue's journal when it is stored, else None.

        A duplicate of a persistent message in a stored queue asks the journal for a barrier,
        so its confirm (which waits for the open batch) follows the original's commit.
        """
        key = self.key(message)
        if key is None:
            return True
        if key in self._ids:
            if journal is not None and message.persistent:
                journal.barrier()
            return False
        pos = self.next_pos
        self.next_pos += 1
        self._ids[key] = pos
        if journal is not None and message.persistent:
            journal.remember_id(self.store_key, pos, key)
        if len(self._ids) > self.settings.window:
            _, evicted = self._ids.popitem(last=False)
            if journal is not None:
                journal.forget_ids(self.store_key, evicted)
        return True

    def forget(self, message: Message) -> None:
        """The message was taken out again (its storage batch failed and its publisher
        was nacked): a republish of it is not a duplicate."""
        key = self.key(message)
        if key is not None:
            self._ids.pop(key, None)

    def restore(self, ids: list[tuple[int, bytes]]) -> None:
        """Load the stored window (``(pos, id)`` in ascending ``pos``) after a restart."""
        for pos, key in ids:
            self._ids[key] = pos
            self._ids.move_to_end(key)
        while len(self._ids) > self.settings.window:  # the window was made smaller
            self._ids.popitem(last=False)
        if ids:
            self.next_pos = max(self.next_pos, ids[-1][0] + 1)
