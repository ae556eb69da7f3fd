"""The storage ports of the model: small Protocols a store backend implements.

The model (queues, vhosts, the broker) never imports the engine, the shell or a store
backend. Where it calls out, it names a Protocol and the layer above plugs an object in.
Each Protocol lives with the module that calls through it, so no model module imports
another that imports it back:

* `JournalPort` / `BodyLoader` (here; queues, vhosts and the broker all use them) - the store:
  durable changes go into a journal the shell's group committer writes out; bodies paged out
  of memory are read back through a loader (persistence.journal.Journal and
  persistence.store.BodyReader for SQLite, persistence.postgres.bodies.PgBodyReader for
  PostgreSQL);
* `ConsumerSink` (model/queue.py) - where a queue hands a message for a consumer (the
  engine's Channel); `ExclusiveOwner` (model/queue.py) - the opaque owner of exclusive queues
  (the engine's Connection);
* `ClientHandle` (model/broker.py) - what the broker needs of a client connection;
* `BatchWaiter` (model/batches.py) - what waits for a storage batch (a channel's confirms
  and commit-oks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from persistence.records import BindingDef, ExchangeDef, MessageRecord, QueueDef


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

    def remember_id(self, queue: tuple[str, str], pos: int, dedup_id: bytes) -> int:
        """Journal a deduplication id a queue accepted; returns its batch id."""
        ...

    def forget_ids(self, queue: tuple[str, str], upto: int) -> None:
        """Journal that a queue's deduplication ids up to ``upto`` left its window."""
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
        storage failure (the queue contains it: see model/paging.py)."""
        ...

    def read_messages(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]:
        """``(seq, exchange, routing_key, header, body)`` of up to ``limit`` messages with
        ``seq > after_seq`` (delayed messages kept only in the store: model/delayed.py);
        raises on a storage failure."""
        ...
