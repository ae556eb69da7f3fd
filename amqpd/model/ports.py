"""What the model calls outside itself: small Protocols, implemented by other layers.

The model (queues, vhosts, the broker) never imports the engine, the shell or a store
backend. Where it must call out it names one of these ports, and the layer above plugs an
object in:

* `ConsumerSink` - where a queue hands a message for a consumer (the engine's Channel);
* `ExclusiveOwner` - the opaque owner of exclusive queues (the engine's Connection);
* `ClientHandle` - what the broker needs of a client connection (the engine's Connection);
* `JournalPort` / `BodyLoader` - the store: durable changes go into a journal the shell's
  group committer writes out; bodies paged out of memory are read back through a loader
  (persistence.journal.Journal and persistence.store.BodyReader for SQLite).

What waits for a storage batch (a channel's confirms and commit-oks) is
amqpd/model/batches.py's `BatchWaiter`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amqpd.model.auth import Authz
    from amqpd.model.consumer import Consumer
    from amqpd.model.message import QueueEntry
    from amqpd.model.queue import Queue
    from amqpd.model.vhost import VirtualHost
    from persistence.records import BindingDef, ExchangeDef, MessageRecord, QueueDef


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


class ClientHandle(ExclusiveOwner, Protocol):
    """What the broker needs of an open client connection."""

    user: str
    vhost: VirtualHost
    authz: Authz

    def notify_blocked(self, reason: str | None) -> None:
        """Send connection.blocked (reason) or connection.unblocked (None) if wanted."""
        ...

    def close(self, reply_code: int, reply_text: str) -> None:
        """Close the connection from the broker's side (Connection.Close)."""
        ...

    def resources_available(self) -> None:
        """Every resource alarm cleared: the connection may be read again."""
        ...


class JournalPort(Protocol):
    """Durable changes, collected into numbered batches that a group committer writes."""

    def put_exchange(self, d: ExchangeDef) -> None: ...
    def delete_exchange(self, vhost: str, name: str) -> None: ...
    def put_queue(self, d: QueueDef) -> None: ...
    def delete_queue(self, vhost: str, name: str) -> None: ...
    def put_binding(self, d: BindingDef) -> None: ...
    def delete_binding(self, d: BindingDef) -> None: ...

    def insert_message(self, queue: tuple[str, str], seq: int, record: MessageRecord) -> int:
        """Journal a message; returns the id of the batch it will be committed in."""
        ...

    def mark_delivered(self, queue: tuple[str, str], seq: int, delivery_count: int) -> None: ...
    def delete_message(self, queue: tuple[str, str], seq: int) -> None: ...

    def barrier(self) -> int:
        """Ask for the open batch to be committed even without writes; returns its id."""
        ...

    @property
    def pending(self) -> bool:
        """Whether there is a batch for the committer to write."""
        ...

    @property
    def open_batch_id(self) -> int:
        """The id of the batch the next change joins."""
        ...


class BodyLoader(Protocol):
    """Reads committed message bodies back from the store (a page at a time)."""

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """``(seq, body)`` of up to ``limit`` messages with ``seq > after_seq``; raises on a
        storage failure (the queue contains it: see Queue.page_in)."""
        ...
