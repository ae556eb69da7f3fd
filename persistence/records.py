"""Plain records exchanged between the broker core, the journal and the store.

Everything here is a slotted dataclass or a type alias; nothing does I/O. The row layouts of
the batch operations (:class:`OpKind`) are the contract between :mod:`persistence.journal`,
which builds the rows, and :mod:`persistence.store`, which hands them to ``executemany``
unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "Batch",
    "BindingDef",
    "ExchangeDef",
    "MessageRecord",
    "Op",
    "OpKind",
    "QueueDef",
    "QueueKey",
    "RecoveredState",
    "Row",
    "SqlValue",
]

QueueKey: TypeAlias = tuple[str, str]
"""A queue's identity: ``(vhost, queue name)``."""

SqlValue: TypeAlias = str | int | float | bytes | None
"""A value SQLite binds directly (``bool`` is an ``int``)."""

Row: TypeAlias = tuple[SqlValue, ...]
"""One parameter row for ``executemany``."""


@dataclass(slots=True, init=False)
class MessageRecord:
    """A persistent message as stored for one queue.

    Attributes:
        exchange: The exchange it was published to.
        routing_key: The routing key it was published with.
        header: The raw AMQP content-header payload, exactly as the publisher sent it.
        body: The message body.
        redelivered: Whether it has been delivered before (the ``redelivered`` flag).
        delivery_count: How many times it has been delivered.
        expires_at: Absolute unix time at which it expires (TTL), or ``None``. Stored, never
            interpreted by the persistence layer.
        body_size: Set (and ``body`` left empty) when a load skipped the body to save
            memory; read it back with `BodyReader.read_bodies` when it is needed.
    """

    exchange: str
    routing_key: str
    header: bytes
    body: bytes
    redelivered: bool = False
    delivery_count: int = 0
    expires_at: float | None = None
    body_size: int | None = None

    # init=False and a written __init__: mypyc compiles it (a dataclass-generated __init__
    # stays interpreted, ~0.2 µs per object; this one is built per message).
    def __init__(
        self,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        redelivered: bool = False,
        delivery_count: int = 0,
        expires_at: float | None = None,
        body_size: int | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.header = header
        self.body = body
        self.redelivered = redelivered
        self.delivery_count = delivery_count
        self.expires_at = expires_at
        self.body_size = body_size


@dataclass(slots=True)
class ExchangeDef:
    """A durable exchange.

    Attributes:
        vhost: Virtual host name.
        name: Exchange name.
        type_name: Exchange type (``direct``, ``topic``, ...).
        auto_delete: The ``auto-delete`` flag.
        internal: The ``internal`` flag.
        arguments: The declare arguments (an AMQP field table).
    """

    vhost: str
    name: str
    type_name: str
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class QueueDef:
    """A durable queue.

    Attributes:
        vhost: Virtual host name.
        name: Queue name.
        auto_delete: The ``auto-delete`` flag.
        arguments: The declare arguments (an AMQP field table).
    """

    vhost: str
    name: str
    auto_delete: bool
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class BindingDef:
    """A binding of a durable exchange to a queue or to another exchange.

    A binding's identity is all of its fields, arguments included (as in RabbitMQ, two
    bindings that differ only in their arguments are distinct).

    Attributes:
        vhost: Virtual host name.
        source: Source exchange name.
        destination_kind: ``"queue"`` or ``"exchange"``.
        destination: Destination queue or exchange name.
        routing_key: The binding key.
        arguments: The bind arguments (an AMQP field table).
    """

    vhost: str
    source: str
    destination_kind: Literal["queue", "exchange"]
    destination: str
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


class OpKind(enum.Enum):
    """The kinds of batch operation, with the layout of their rows.

    ``args`` below is the field table encoded by :func:`persistence.fieldcodec.encode`.
    Deleting a queue also deletes its messages and the bindings to it; deleting an
    exchange also deletes the bindings from and to it.
    """

    DELETE_BINDING = "delete_binding"
    """``(vhost, source, destination_kind, destination, routing_key, args)``"""
    DELETE_QUEUE = "delete_queue"
    """``(vhost, name)``"""
    DELETE_EXCHANGE = "delete_exchange"
    """``(vhost, name)``"""
    PUT_EXCHANGE = "put_exchange"
    """``(vhost, name, type_name, auto_delete, internal, args)``"""
    PUT_QUEUE = "put_queue"
    """``(vhost, name, auto_delete, args)``"""
    PUT_BINDING = "put_binding"
    """``(vhost, source, destination_kind, destination, routing_key, args)``"""
    DELETE_MESSAGE = "delete_message"
    """``(vhost, queue, seq)``"""
    INSERT_MESSAGE = "insert_message"
    """``(vhost, queue, seq, exchange, routing_key, header, body, redelivered,
    delivery_count, expires_at)``"""
    MARK_DELIVERED = "mark_delivered"
    """``(vhost, queue, seq, delivery_count)``"""
    REMEMBER_ID = "remember_id"
    """``(vhost, queue, pos, id)``: a deduplication id the queue accepted"""
    FORGET_IDS = "forget_ids"
    """``(vhost, queue, pos)``: ids at or below ``pos`` left the deduplication window"""


Op: TypeAlias = tuple[OpKind, list[Row]]
"""One ``executemany``: the kind (which names the SQL) and its parameter rows."""


@dataclass(slots=True, init=False)
class Batch:
    """The mutations that go into one store transaction.

    Attributes:
        id: Batch id (1, 2, 3, ... in the order the journal closed them).
        ops: Operations to run in list order, each kind at most once and never with an
            empty row list. ``ops`` is empty only for a batch whose every write was
            cancelled but on which a caller is still waiting (see
            :meth:`persistence.journal.Journal.take_batch`).
        size: Bytes of message bodies it inserts (the shell measures free disk space
            after every few MiB written).
    """

    id: int
    ops: list[Op]
    size: int = 0

    def __init__(self, id: int, ops: list[Op], size: int = 0) -> None:
        self.id = id  # (init=False: see MessageRecord)
        self.ops = ops
        self.size = size

    def inserted_queues(self) -> set[QueueKey]:
        """The queues this batch inserts messages into."""
        return {
            (str(row[0]), str(row[1]))
            for kind, rows in self.ops
            if kind is OpKind.INSERT_MESSAGE
            for row in rows
        }


@dataclass(slots=True)
class RecoveredState:
    """Everything the store holds, as loaded at startup.

    Attributes:
        exchanges: Durable exchanges.
        queues: Durable queues.
        bindings: Durable bindings.
        messages: For each queue that has messages, its ``(seq, record)`` pairs in
            ascending ``seq`` order.
        dedup_ids: For each queue with a deduplication window, its ``(pos, id)`` pairs in
            ascending ``pos`` order.
        message_keys: For each queue loaded as keys only (``load(keys_only=prefix)``), its
            messages' ``seq`` in ascending order (read the messages back with
            ``read_messages``); those queues are not in ``messages``.
    """

    exchanges: list[ExchangeDef]
    queues: list[QueueDef]
    bindings: list[BindingDef]
    messages: dict[QueueKey, list[tuple[int, MessageRecord]]]
    dedup_ids: dict[QueueKey, list[tuple[int, bytes]]] = field(default_factory=dict)
    message_keys: dict[QueueKey, list[int]] = field(default_factory=dict)
