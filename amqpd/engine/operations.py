"""What an operator does to a vhost without an AMQP connection (the management HTTP API):
declare, delete, purge, bind, publish and get, through the same core paths and with the
same checks and reply codes as a client's methods (sans-IO).

RabbitMQ's management plugin opens an internal AMQP connection as the requesting user for
these; here each function makes the checks that connection's channel would make
(`Authz`: configure / write / read, as `amqpd.engine.permissions` does for clients), then
calls the vhost's declare / delete / bind / route paths that `amqpd.engine.topology` and
`amqpd.engine.content` call, so durable objects and persistent messages are journaled
exactly as a client's. Refusals are `AMQPError`s (404, 403, 406, ...) for the caller to
translate. The caller (the shell) must call its ``after_core`` afterwards: consumers may
have been handed messages and the journal may have work.

Each request acts like RabbitMQ's short-lived management channel: its message counters
(publish, get, ack ...) go where a closed channel's go, ``broker.statistics.closed``, so
the node totals (/api/overview ``message_stats``) include them.

Nothing is ever exclusive here: there is no owning connection, so a queue declared by an
operator is shared, and another connection's exclusive queue is 405 RESOURCE_LOCKED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqpd.engine.content import PendingPublish, route_and_enqueue
from amqpd.engine.transaction import BufferedPublish
from amqpd.model.auth import Authz
from amqpd.model.broker import Broker
from amqpd.model.enqueue import storage_batch
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Queue
from amqpd.model.vhost import VirtualHost
from amqpd.wire import codec
from amqpd.wire.errors import ACCESS_REFUSED, AMQPError, not_found, precondition_failed

ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


def _exchange_name(name: str) -> str:
    """The management API spells the default exchange ``amq.default``."""
    return "" if name == "amq.default" else name


# -- queues ----------------------------------------------------------------------------------
def declare_queue(
    vhost: VirtualHost,
    authz: Authz,
    name: str,
    durable: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> bool:
    """queue.declare (never exclusive); True if the queue was created."""
    authz.configure("queue", name)
    created = name not in vhost.queues
    vhost.declare_queue(name, False, durable, False, auto_delete, arguments, None)
    return created


def usable_queue(vhost: VirtualHost, name: str) -> Queue:
    """The queue (404), unless another connection holds it exclusively (405)."""
    queue = vhost.get_queue(name)
    vhost.check_exclusive_access(queue, None)
    return queue


def delete_queue(
    vhost: VirtualHost, authz: Authz, name: str, if_empty: bool, if_unused: bool
) -> int:
    """queue.delete; 404 if there is no such queue (the API's answer, unlike the method's)."""
    authz.configure("queue", name)
    queue = usable_queue(vhost, name)
    if if_unused and queue.consumers:
        raise precondition_failed(f"queue '{name}' in vhost '{vhost.name}' in use")
    if if_empty and queue.message_count:
        raise precondition_failed(f"queue '{name}' in vhost '{vhost.name}' not empty")
    return vhost.delete_queue(queue)


def purge_queue(vhost: VirtualHost, authz: Authz, name: str) -> int:
    """queue.purge: drop the ready messages; how many."""
    authz.read("queue", name)
    return usable_queue(vhost, name).purge()


@dataclass(slots=True)
class Got:
    """One message taken by `get_messages`, and what was left in the queue after it."""

    message: Message
    redelivered: bool
    message_count: int


def get_messages(
    broker: Broker, vhost: VirtualHost, authz: Authz, name: str, count: int, ackmode: str
) -> list[Got]:
    """basic.get up to ``count`` times, then settle them all as ``ackmode`` says, as
    RabbitMQ's /get does: ack_requeue_true / reject_requeue_true put them back (marked
    redelivered, after the last get, so one request never sees a message twice),
    ack_requeue_false acks them, reject_requeue_false rejects them (dead-lettered if the
    queue says so)."""
    if ackmode not in ACK_MODES:
        raise ValueError(f"unknown ackmode {ackmode!r}")
    authz.read("queue", name)
    queue = usable_queue(vhost, name)
    stats, node = queue.stats, broker.statistics.closed
    taken: list[QueueEntry] = []
    got: list[Got] = []
    for _ in range(count):
        entry = queue.take()
        if entry is None:
            stats.get_empty += 1
            node.get_empty += 1
            break
        stats.get += 1
        node.get += 1
        if entry.redelivered:
            stats.redeliver += 1
            node.redeliver += 1
        queue.delivered(entry)
        taken.append(entry)
        got.append(Got(entry.message, entry.redelivered, queue.message_count))
    if ackmode.endswith("requeue_true"):
        queue.requeue(taken)
    elif ackmode == "ack_requeue_false":
        for entry in taken:
            stats.ack += 1
            node.ack += 1
            queue.settled(entry)
    else:
        for entry in taken:
            queue.discard(entry, "rejected")
    queue.consumer_progress_at = broker.clock.now
    return got


# -- exchanges -------------------------------------------------------------------------------
def declare_exchange(
    vhost: VirtualHost,
    authz: Authz,
    name: str,
    type_name: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any],
) -> bool:
    """exchange.declare; True if the exchange was created."""
    name = _exchange_name(name)
    authz.configure("exchange", name)
    created = name not in vhost.exchanges
    vhost.declare_exchange(name, type_name, False, durable, auto_delete, internal, arguments)
    return created


def delete_exchange(vhost: VirtualHost, authz: Authz, name: str, if_unused: bool) -> None:
    """exchange.delete; 404 if there is no such exchange (the API's answer)."""
    name = _exchange_name(name)
    authz.configure("exchange", name)
    if name and not name.startswith("amq."):
        vhost.get_exchange(name)
    vhost.delete_exchange(name, if_unused)


def publish(
    broker: Broker,
    vhost: VirtualHost,
    authz: Authz,
    exchange_name: str,
    routing_key: str,
    header: bytes,
    body: bytes,
) -> tuple[bool, int | None]:
    """basic.publish of one message (``header``: a raw content-header payload) with the
    checks a client's publish gets (write permission, internal exchange, size limit,
    user_id, expiration). Returns whether it was routed to a queue, and the storage batch
    that makes it durable (None: nothing to wait for)."""
    name = _exchange_name(exchange_name)
    authz.write("exchange", name)
    exchange = vhost.get_exchange(name)
    if exchange.internal:
        raise AMQPError(
            ACCESS_REFUSED, f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'"
        )
    pending = PendingPublish(_publish_args(name, routing_key), exchange)
    refused = pending.add_header(header, broker.config.max_message_size, authz)
    if refused is not None:
        raise refused
    pending.add_body(body)
    message = pending.message()
    queues = route_and_enqueue(
        BufferedPublish(exchange, message, False, pending.expiration_ms),
        vhost,
        broker.reply_queue,
        set(),
    )
    exchange.stats.publish_in += 1
    node = broker.statistics.closed
    node.publish += 1
    if queues:
        exchange.stats.publish_out += len(queues)
        return True, storage_batch(broker.journal, message, queues)
    node.drop_unroutable += 1
    return False, None


def _publish_args(exchange: str, routing_key: str) -> codec.PublishArgs:
    exchange_raw = codec.encode_shortstr(exchange)
    routing_key_raw = codec.encode_shortstr(routing_key)
    return codec.PublishArgs(exchange, routing_key, False, False, exchange_raw, routing_key_raw)


# -- bindings --------------------------------------------------------------------------------
def _destination(vhost: VirtualHost, kind: str, name: str) -> Queue | Exchange:
    """A binding's destination: a spread vhost's queue on another worker too (its stub,
    whose bindings this worker routes with and replicates, as queue.bind does)."""
    if kind == "q":
        queue = vhost.find_queue(name)
        if queue is None:
            raise not_found("queue", name, vhost.name)
        vhost.check_exclusive_access(queue, None)
        return queue
    return vhost.get_exchange(_exchange_name(name))


def bind(
    vhost: VirtualHost,
    authz: Authz,
    source: str,
    kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any],
) -> None:
    """queue.bind (``kind`` "q") or exchange.bind ("e"), with their permission checks:
    write on the destination, read on the source."""
    source = _exchange_name(source)
    authz.write("queue" if kind == "q" else "exchange", destination)
    authz.read("exchange", source)
    source_exchange = vhost.exchanges.get(source)
    if source_exchange is None:
        raise not_found("exchange", source, vhost.name)
    vhost.bind(source_exchange, _destination(vhost, kind, destination), routing_key, arguments)


def unbind(
    vhost: VirtualHost,
    authz: Authz,
    source: str,
    kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any],
) -> None:
    """queue.unbind / exchange.unbind of one existing binding."""
    source = _exchange_name(source)
    authz.write("queue" if kind == "q" else "exchange", destination)
    authz.read("exchange", source)
    vhost.unbind(
        vhost.get_exchange(source), _destination(vhost, kind, destination), routing_key, arguments
    )
