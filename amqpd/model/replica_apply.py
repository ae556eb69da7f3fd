"""Applying another worker's changes to a spread vhost, and this worker's snapshot of one
(amqpd/model/replica.py has the theory of operation). Off the per-message path: not
compiled."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

from amqpd.model.exchange import Exchange
from amqpd.model.queue import Queue
from amqpd.model.replica import Change, RemoteQueue, binding_change, exchange_change, queue_change
from amqpd.model.vhost import VirtualHost
from amqpd.wire.errors import AMQPError

SNAPSHOT_END = "snapshot-end"  # (SNAPSHOT_END, worker): that worker's snapshots are all sent


def snapshot(vhost: VirtualHost, worker: int) -> Change:
    """What ``worker`` (this one) holds of ``vhost``: its exchanges and the bindings between
    them, its own queues and their bindings."""
    changes: list[Change] = []
    for exchange in vhost.exchanges.values():
        if exchange.name and not exchange.name.startswith("amq."):
            changes.append(exchange_change(exchange))
    for queue in vhost.queues.values():
        changes.append(queue_change(queue, worker))
    for exchange in vhost.exchanges.values():
        for destination, key, arguments in exchange.router.bindings():
            if isinstance(destination, RemoteQueue):
                continue  # its owner's snapshot carries it
            if isinstance(destination, Queue | Exchange):
                changes.append(binding_change("bind", exchange, destination, key, arguments))
    return ("snapshot", worker, changes)


# -- applying changes ----------------------------------------------------------------------
def apply_change(vhost: VirtualHost, change: Change) -> None:
    """Make another worker's ``change`` here (idempotent; nothing is sent on)."""
    op = change[0]
    handler = _APPLY.get(op)
    if handler is None:
        raise ValueError(f"unknown topology change {op!r}")
    replica = vhost.replica
    here = -1 if replica is None else replica.worker
    vhost.replica = None  # what another worker changed is not sent back to the others
    try:
        handler(vhost, change, here)
    finally:
        vhost.replica = replica


def _apply_own_queue(vhost: VirtualHost, change: Change) -> None:
    """A queue declared on another worker for this one to own (a balancing locator)."""
    _, name, _worker, durable, _exclusive, auto_delete, arguments = change
    stub = vhost.remote.get(name)
    if stub is not None:
        vhost.drop_remote(stub)
    with suppress(AMQPError):  # refused here (a limit): the declarer's stub finds nothing
        vhost.declare_queue(name, False, durable, False, auto_delete, arguments, None)


def _apply_exchange(vhost: VirtualHost, change: Change, here: int) -> None:
    _, name, type_name, durable, auto_delete, internal, arguments = change
    if name not in vhost.exchanges:
        # refused here as it would not have been there: nothing to mirror
        with suppress(AMQPError):
            vhost.declare_exchange(
                name, type_name, False, durable, auto_delete, internal, arguments
            )


def _apply_exchange_delete(vhost: VirtualHost, change: Change, here: int) -> None:
    if change[1] in vhost.exchanges:
        vhost.delete_exchange(change[1], False)


def _apply_queue(vhost: VirtualHost, change: Change, here: int) -> None:
    _, name, worker, durable, exclusive, auto_delete, arguments = change
    if worker == here:
        _apply_own_queue(vhost, change)
        return
    if name in vhost.queues:
        return  # declared here meanwhile: this worker's queue wins here
    existing = vhost.remote.get(name)
    if existing is not None and existing.worker == worker:
        return
    if existing is not None:
        vhost.drop_remote(existing)
    stub = vhost.remote[name] = RemoteQueue(
        name, vhost.name, worker, durable, exclusive, auto_delete, arguments
    )
    stub.port = vhost.consuming
    vhost.topology.value += 1


def _apply_queue_delete(vhost: VirtualHost, change: Change, here: int) -> None:
    _, name, owner = change
    stub = vhost.remote.get(name)
    if stub is not None and stub.worker == owner:
        vhost.drop_remote(stub)
        return
    queue = vhost.queues.get(name)
    if queue is not None and owner == here:
        vhost.delete_queue(queue)  # queue.delete on another worker's stub of it


def _apply_purge(vhost: VirtualHost, change: Change, here: int) -> None:
    queue = vhost.queues.get(change[1])
    if queue is not None:
        queue.purge()


def _destination(vhost: VirtualHost, kind: str, name: str) -> Queue | Exchange | None:
    if kind == "exchange":
        return vhost.exchanges.get(name)
    queue = vhost.queues.get(name)
    return queue if queue is not None else vhost.remote.get(name)


def _apply_binding(vhost: VirtualHost, change: Change, here: int) -> None:
    op, source_name, kind, destination_name, key, arguments = change
    source = vhost.exchanges.get(source_name)
    destination = _destination(vhost, kind, destination_name)
    if source is None or destination is None:
        return
    try:
        if op == "bind":
            vhost.bind(source, destination, key, arguments)
        else:
            vhost.unbind(source, destination, key, arguments)
    except AMQPError:
        pass  # refused here as it would not have been there: nothing to mirror


def _apply_snapshot(vhost: VirtualHost, change: Change, here: int) -> None:
    _, worker, changes = change
    for stub in [stub for stub in vhost.remote.values() if stub.worker == worker]:
        vhost.drop_remote(stub)
    for item in changes:
        _APPLY[item[0]](vhost, item, here)


_APPLY: dict[str, Callable[[VirtualHost, Change, int], None]] = {
    "exchange": _apply_exchange,
    "exchange-delete": _apply_exchange_delete,
    "queue": _apply_queue,
    "queue-delete": _apply_queue_delete,
    "bind": _apply_binding,
    "unbind": _apply_binding,
    "snapshot": _apply_snapshot,
    "purge": _apply_purge,
}
