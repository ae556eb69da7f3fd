"""The journal: durable mutations waiting for the next store transaction.

Theory of operation
-------------------
The broker core calls the journal synchronously, on the hot path, for every change that must
survive a restart: definitions (exchanges, queues, bindings) and persistent messages in
durable queues (insert, mark delivered, delete on ack). The journal does no I/O. It keeps an
*open batch*; every mutation joins it. The group committer (:mod:`persistence.group_commit`)
calls :meth:`Journal.take_batch`, which closes the open batch, turns it into ``executemany``
rows (:class:`persistence.records.Batch`), and opens the next one, so that everything that
happens while one transaction is being written goes into the next single transaction.

The open batch is not a log but the *net effect* of the mutations since the last
``take_batch``, kept in dicts so that each mutation is O(1):

* ``_inserts[queue][seq] -> MessageRecord``: messages inserted in this batch. An ack
  (:meth:`delete_message`) of a message still here removes it and writes nothing at all
  (ActiveMQ's "concurrent store and dispatch": a message consumed faster than the disk
  commits never touches the disk). :meth:`mark_delivered` updates the pending record in
  place. Rows are built from the records only in :meth:`take_batch`, so the batch is a
  snapshot of their state at that moment.
* ``_deletes[queue] -> [seq]`` and ``_updates[queue][seq] -> delivery_count``: acks and
  redelivery marks for messages whose insert was already taken (committed or in flight).
  A delete supersedes a pending update of the same message.
* Definitions: per-key "put" dicts plus "deleted" sets. A delete always reaches the store
  (the object may exist there from an earlier batch); a put after a delete keeps the delete
  so the old object's messages and bindings go first.

Keeping messages per queue makes :meth:`delete_queue` O(1) for the queue's pending
inserts (the inner dict is dropped whole) and avoids building a ``(queue, seq)`` tuple per
call. A counter of pending message entries makes :attr:`pending` O(1).

:meth:`take_batch` emits the operations in a fixed order that is safe for any sequence of
calls within one batch::

    DELETE_BINDING, DELETE_QUEUE (messages, bindings to it, the queue),
    DELETE_EXCHANGE (bindings from/to it, the exchange),
    PUT_EXCHANGE, PUT_QUEUE, PUT_BINDING, DELETE_MESSAGE, INSERT_MESSAGE, MARK_DELIVERED,
    FORGET_IDS, REMEMBER_ID

(FORGET_IDS before REMEMBER_ID is safe: ``forget_ids`` drops pending ids in its range, so a
remembered id in the batch is always above every forgotten position.)

Deletes of definitions come before puts, so "put q, insert, delete q, put q, insert" leaves
the new queue with only the last insert (the first insert was dropped by delete_queue, the
store's old copy of q is purged before q is put again). Definitions come before the
messages that reference them. Message deletes come before inserts (a delete then re-insert
of the same ``(queue, seq)`` leaves the row; an insert then delete cancels in the journal).
Updates come last, and an insert drops a pending update of its ``(queue, seq)``, so an
update only ever reaches a row from an earlier batch. Pending binding puts that refer to a
deleted queue or exchange are dropped, because the store's cascade would run before them.

Contract: a ``(queue, seq)`` is inserted at most once while it is stored, i.e. it may be
inserted again only after its delete (or its queue's delete) has been journaled. The broker
numbers messages per queue and a requeue keeps the number, so this holds; the journal relies
on it, because cancelling an insert against an ack can only be right if no older row with
the same key is in the store.

Waiters: :meth:`insert_message` returns the id of the batch its message will be committed
in, and the caller holds its publisher confirm until that id commits. If every write of the
batch is then cancelled (published and acked before the commit) the batch still has to be
handed out so the caller hears about it: :attr:`pending` stays true and
:meth:`take_batch` returns a batch with no operations, which the store applies as a no-op.
:meth:`barrier` asks for the same without a mutation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from persistence import fieldcodec
from persistence.records import (
    Batch,
    BindingDef,
    ExchangeDef,
    MessageRecord,
    Op,
    OpKind,
    QueueDef,
    QueueKey,
    Row,
)

__all__ = ["Journal", "JournalStats"]

_BindingKey = tuple[str, str, str, str, str, bytes]
_BindingPredicate = Callable[[_BindingKey], bool]


@dataclass(slots=True)
class JournalStats:
    """Counters since the journal was created.

    Attributes:
        saved_writes: Message inserts that never reached the store because the message was
            acked (or its queue deleted) while its insert was still in the open batch.
        inserts: Calls to :meth:`Journal.insert_message`.
        deletes: Calls to :meth:`Journal.delete_message`.
        batches: Batches handed out by :meth:`Journal.take_batch`.
    """

    saved_writes: int = 0
    inserts: int = 0
    deletes: int = 0
    batches: int = 0


class Journal:
    """Pending mutations not yet handed to the store.

    Mutations join the current open batch; :meth:`take_batch` closes it and returns it;
    later mutations join the next one. Not thread-safe; call it from the event loop only.
    """

    __slots__ = (
        "_b_dels",
        "_b_puts",
        "_batch_id",
        "_dedup_forget",
        "_dedup_ids",
        "_deletes",
        "_ex_dels",
        "_ex_puts",
        "_inserts",
        "_n_msg",
        "_q_dels",
        "_q_puts",
        "_updates",
        "_waiters",
        "stats",
    )

    def __init__(self) -> None:
        self._batch_id = 1
        self.stats = JournalStats()
        self._reset()

    def _reset(self) -> None:
        self._inserts: dict[QueueKey, dict[int, MessageRecord]] = {}
        self._deletes: dict[QueueKey, list[int]] = {}
        self._updates: dict[QueueKey, dict[int, int]] = {}
        self._n_msg = 0  # entries in _inserts + _deletes + _updates + _dedup_*
        self._dedup_ids: dict[QueueKey, dict[int, bytes]] = {}
        self._dedup_forget: dict[QueueKey, int] = {}
        self._waiters = False
        # Definitions. The "deleted" dicts are insertion-ordered sets of rows.
        self._ex_puts: dict[QueueKey, Row] = {}
        self._ex_dels: dict[QueueKey, None] = {}
        self._q_puts: dict[QueueKey, Row] = {}
        self._q_dels: dict[QueueKey, None] = {}
        self._b_puts: dict[_BindingKey, None] = {}
        self._b_dels: dict[_BindingKey, None] = {}

    # -- definitions --------------------------------------------------------------------

    def put_exchange(self, d: ExchangeDef) -> None:
        """Create or replace a durable exchange.

        Args:
            d: The exchange. Its arguments are encoded now (later changes to the dict are
                not seen).

        Raises:
            TypeError: An argument value has a type the store cannot keep.
        """
        args = fieldcodec.encode(d.arguments)
        self._ex_puts[(d.vhost, d.name)] = (
            d.vhost,
            d.name,
            d.type_name,
            d.auto_delete,
            d.internal,
            args,
        )

    def delete_exchange(self, vhost: str, name: str) -> None:
        """Delete a durable exchange and every binding from or to it.

        Args:
            vhost: Virtual host name.
            name: Exchange name.
        """
        key = (vhost, name)
        self._ex_puts.pop(key, None)
        self._ex_dels[key] = None
        self._drop_binding_puts(
            lambda b: b[0] == vhost and (b[1] == name or (b[2] == "exchange" and b[3] == name))
        )

    def put_queue(self, d: QueueDef) -> None:
        """Create or replace a durable queue (its stored messages are kept).

        Args:
            d: The queue. Its arguments are encoded now.

        Raises:
            TypeError: An argument value has a type the store cannot keep.
        """
        args = fieldcodec.encode(d.arguments)
        self._q_puts[(d.vhost, d.name)] = (d.vhost, d.name, d.auto_delete, args)

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a durable queue, all its messages and every binding to it.

        Pending inserts, deletes and redelivery marks of the queue are dropped.

        Args:
            vhost: Virtual host name.
            name: Queue name.
        """
        key = (vhost, name)
        self._q_puts.pop(key, None)
        self._q_dels[key] = None
        inserts = self._inserts.pop(key, None)
        if inserts:
            self._n_msg -= len(inserts)
            self.stats.saved_writes += len(inserts)
        deletes = self._deletes.pop(key, None)
        if deletes:
            self._n_msg -= len(deletes)
        updates = self._updates.pop(key, None)
        if updates:
            self._n_msg -= len(updates)
        ids = self._dedup_ids.pop(key, None)
        if ids:
            self._n_msg -= len(ids)
        if self._dedup_forget.pop(key, None) is not None:
            self._n_msg -= 1
        self._drop_binding_puts(lambda b: b[0] == vhost and b[2] == "queue" and b[3] == name)

    def put_binding(self, d: BindingDef) -> None:
        """Create a durable binding (a no-op if it exists).

        Args:
            d: The binding.

        Raises:
            TypeError: An argument value has a type the store cannot keep.
        """
        key = _binding_key(d)
        self._b_dels.pop(key, None)
        self._b_puts[key] = None

    def delete_binding(self, d: BindingDef) -> None:
        """Delete a durable binding (matched on all fields, arguments included).

        Args:
            d: The binding.

        Raises:
            TypeError: An argument value has a type the store cannot keep.
        """
        key = _binding_key(d)
        self._b_puts.pop(key, None)
        self._b_dels[key] = None

    def _drop_binding_puts(self, doomed: _BindingPredicate) -> None:
        for key in [k for k in self._b_puts if doomed(k)]:
            del self._b_puts[key]

    # -- messages (hot path) ------------------------------------------------------------

    def insert_message(self, queue: QueueKey, seq: int, record: MessageRecord) -> int:
        """Store a persistent message in a durable queue.

        The journal keeps ``record`` itself (no copy) until the batch is taken;
        :meth:`mark_delivered` may update it in place until then.

        Args:
            queue: The queue, which must be stored (put in this or an earlier batch).
            seq: The message's position in the queue. It must not be stored already (see
                the module docstring): insert a ``seq`` again only after its delete.
            record: The message.

        Returns:
            The id of the batch the insert will be committed in.
        """
        self.stats.inserts += 1
        inserts = self._inserts.get(queue)
        if inserts is None:
            inserts = self._inserts[queue] = {}
        size = len(inserts)
        inserts[seq] = record
        self._n_msg += len(inserts) - size
        if self._updates:
            updates = self._updates.get(queue)
            if updates and updates.pop(seq, None) is not None:
                self._n_msg -= 1
        self._waiters = True
        return self._batch_id

    def mark_delivered(self, queue: QueueKey, seq: int, delivery_count: int) -> None:
        """Persist that a message was delivered (``redelivered=True`` and its count).

        Args:
            queue: The queue.
            seq: The message's position in the queue.
            delivery_count: The new delivery count.
        """
        inserts = self._inserts.get(queue)
        if inserts is not None:
            record = inserts.get(seq)
            if record is not None:
                record.redelivered = True
                record.delivery_count = delivery_count
                return
        updates = self._updates.get(queue)
        if updates is None:
            updates = self._updates[queue] = {}
        size = len(updates)
        updates[seq] = delivery_count
        self._n_msg += len(updates) - size

    def delete_message(self, queue: QueueKey, seq: int) -> None:
        """Remove an acked message.

        If its insert is still in the open batch the two cancel out and nothing is written
        (counted in :attr:`JournalStats.saved_writes`); otherwise a delete joins the open
        batch.

        Args:
            queue: The queue.
            seq: The message's position in the queue.
        """
        self.stats.deletes += 1
        inserts = self._inserts.get(queue)
        if inserts is not None and inserts.pop(seq, None) is not None:
            self._n_msg -= 1
            self.stats.saved_writes += 1
            return
        deletes = self._deletes.get(queue)
        if deletes is None:
            self._deletes[queue] = [seq]
        else:
            deletes.append(seq)
        self._n_msg += 1
        if self._updates:
            updates = self._updates.get(queue)
            if updates and updates.pop(seq, None) is not None:
                self._n_msg -= 1

    # -- deduplication windows ----------------------------------------------------------

    def remember_id(self, queue: QueueKey, pos: int, dedup_id: bytes) -> int:
        """Store a deduplication id the queue accepted, at window position ``pos``.

        Returns:
            The id of the batch it will be committed in.
        """
        ids = self._dedup_ids.get(queue)
        if ids is None:
            ids = self._dedup_ids[queue] = {}
        ids[pos] = dedup_id
        self._n_msg += 1
        self._waiters = True
        return self._batch_id

    def forget_ids(self, queue: QueueKey, upto: int) -> None:
        """Drop the queue's deduplication ids at positions ``<= upto`` (out of the window).

        Pending ids in that range are dropped from the batch without being written.
        """
        ids = self._dedup_ids.get(queue)
        if ids:
            for pos in [p for p in ids if p <= upto]:
                del ids[pos]
                self._n_msg -= 1
        if queue not in self._dedup_forget:
            self._n_msg += 1
        self._dedup_forget[queue] = max(upto, self._dedup_forget.get(queue, upto))

    # -- batching -----------------------------------------------------------------------

    def barrier(self) -> int:
        """Ask for the open batch to be committed even if it holds no writes.

        For a caller that must wait until everything journaled so far is durable (for
        example ``tx.commit-ok``) without knowing whether it journaled anything.

        Returns:
            The id of the open batch; it will be handed out by :meth:`take_batch`.
        """
        self._waiters = True
        return self._batch_id

    @property
    def pending(self) -> bool:
        """Whether :meth:`take_batch` would return a batch."""
        return bool(
            self._n_msg
            or self._waiters
            or self._ex_puts
            or self._ex_dels
            or self._q_puts
            or self._q_dels
            or self._b_puts
            or self._b_dels
        )

    @property
    def open_batch_id(self) -> int:
        """The id of the batch the next mutation joins (ids start at 1 and go up by 1)."""
        return self._batch_id

    def take_batch(self) -> Batch | None:
        """Close the open batch and return it; later mutations join the next one.

        Returns:
            ``None`` if nothing is pending. Otherwise the batch, whose operations are in an
            order that is safe to execute as given. Its ``ops`` are empty only when every
            write was cancelled but an :meth:`insert_message` or :meth:`barrier` caller is
            waiting for its id.
        """
        if not self.pending:
            return None
        ops: list[Op] = []
        if self._b_dels:
            ops.append((OpKind.DELETE_BINDING, list(self._b_dels)))
        if self._q_dels:
            ops.append((OpKind.DELETE_QUEUE, list(self._q_dels)))
        if self._ex_dels:
            ops.append((OpKind.DELETE_EXCHANGE, list(self._ex_dels)))
        if self._ex_puts:
            ops.append((OpKind.PUT_EXCHANGE, list(self._ex_puts.values())))
        if self._q_puts:
            ops.append((OpKind.PUT_QUEUE, list(self._q_puts.values())))
        if self._b_puts:
            ops.append((OpKind.PUT_BINDING, list(self._b_puts)))
        size = self._message_ops(ops) if self._n_msg else 0
        batch = Batch(self._batch_id, ops, size)
        self._batch_id += 1
        self.stats.batches += 1
        self._reset()
        return batch

    def _message_ops(self, ops: list[Op]) -> int:
        """Append the message operations; return the bytes of bodies inserted."""
        size = 0
        deletes: list[Row] = []
        for (vhost, name), seqs in self._deletes.items():
            deletes += [(vhost, name, seq) for seq in seqs]
        if deletes:
            ops.append((OpKind.DELETE_MESSAGE, deletes))
        inserts: list[Row] = []
        for (vhost, name), records in self._inserts.items():
            inserts += [
                (
                    vhost,
                    name,
                    seq,
                    r.exchange,
                    r.routing_key,
                    r.header,
                    r.body,
                    r.redelivered,
                    r.delivery_count,
                    r.expires_at,
                )
                for seq, r in records.items()
            ]
            for r in records.values():
                size += len(r.body)
        if inserts:
            ops.append((OpKind.INSERT_MESSAGE, inserts))
        updates: list[Row] = []
        for (vhost, name), counts in self._updates.items():
            updates += [(vhost, name, seq, count) for seq, count in counts.items()]
        if updates:
            ops.append((OpKind.MARK_DELIVERED, updates))
        if self._dedup_forget:
            forget: list[Row] = [(v, n, upto) for (v, n), upto in self._dedup_forget.items()]
            ops.append((OpKind.FORGET_IDS, forget))
        remember: list[Row] = []
        for (vhost, name), ids in self._dedup_ids.items():
            remember += [(vhost, name, pos, dedup_id) for pos, dedup_id in ids.items()]
        if remember:
            ops.append((OpKind.REMEMBER_ID, remember))
        return size


def _binding_key(d: BindingDef) -> _BindingKey:
    return (
        d.vhost,
        d.source,
        d.destination_kind,
        d.destination,
        d.routing_key,
        fieldcodec.encode(d.arguments, canonical=True),
    )
