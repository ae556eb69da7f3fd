"""Applying another worker's changes to a spread vhost, and this worker's snapshot of one
(amqpd/model/replica.py has the theory of operation). Off the per-message path: not
compiled.

Two workers declaring the same new queue at the same moment (each before the other's
change arrived) both make it. RabbitMQ serializes declarations in its metadata store, so
there the second declarer gets the first's queue; here the lower-numbered worker's queue
wins, decided the same way on both: the higher-numbered one, when the other's change
arrives, gives its queue up if nothing used it yet (no message ever enqueued, no consumer
ever) and sends the winner's change on, so every other worker ends with a stub of the
winner's queue whichever change it got last. A queue already used is kept (a warning
names it): giving it up would drop what it holds.

When the two declarations differ (durability, auto-delete, exclusivity, an equivalence
argument), the lower-numbered worker also *refuses* the other's change (`apply_change`
returns True; the link reports its publish id among the refused in its SETTLED answer), and
the declarer, whose declare-ok is held until then, closes the channel with 406 instead: as
RabbitMQ answers the second of two differing declarations (amqpd/engine/topology.py
`HeldReply`, amqpd/shell/workers/spread.py).

Exchanges have no owner: every worker holds each one. Of two differing declarations of
the same exchange made at the same moment on two workers, the one that sorts first
(`_exchange_key`: type, flags, arguments) wins on every worker whatever order the changes
arrive in: a worker holding the other replaces it (its bindings kept, moved to the winner;
not when it is an x-delayed-message exchange holding messages, kept with a warning), and
a worker holding the winner refuses the other's change, so that declarer gets the 406.
A snapshot never replaces an exchange: it may be older than what this worker holds.

A worker restarted while the others served (after kill -9, say: amqpd/shell/workers/
supervisor.py) is *rejoining* until it has every other worker's snapshot. It missed what
they changed while it was down (an exchange deleted, a binding removed: their changes to it
were lost with the link), and its store still holds what it had. So, as a RabbitMQ node
rejoining its cluster takes the metadata store's view: its snapshot gives the others its
own queues only (its exchanges and bindings are left out there: `_apply_snapshot`), and a
snapshot from a worker that stayed up is adopted (`_adopt_snapshot`): this worker's
exchanges and bindings it does not have are deleted (from the store too), the ones it has
are made, including the bindings to this worker's own queues (a snapshot carries those of
its recipient's queues, ``yours``). Two workers restarted at the same moment (neither up
while the other was down) merge as at a node's start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from amqpd.model.declare_checks import check_exchange_equivalent, check_queue_equivalent
from amqpd.model.exchange import Exchange
from amqpd.model.queue import Queue
from amqpd.model.replica import Change, RemoteQueue, binding_change, exchange_change, queue_change
from amqpd.model.vhost import VirtualHost
from amqpd.wire.errors import AMQPError

log = logging.getLogger(__name__)

SNAPSHOT_END = "snapshot-end"  # (SNAPSHOT_END, worker): that worker's snapshots are all sent


def snapshot(
    vhost: VirtualHost, worker: int, peer: int | None = None, rejoining: bool = False
) -> Change:
    """What ``worker`` (this one) holds of ``vhost``, for worker ``peer``: its exchanges and
    the bindings between them, its own queues and their bindings; and the bindings to
    ``peer``'s queues (used there when it is rejoining: see the module's docstring)."""
    changes: list[Change] = []
    yours: list[Change] = []
    for exchange in vhost.exchanges.values():
        if exchange.name and not exchange.name.startswith("amq."):
            changes.append(exchange_change(exchange))
    for queue in vhost.queues.values():
        changes.append(queue_change(queue, worker))
    for exchange in vhost.exchanges.values():
        for destination, key, arguments in exchange.router.bindings():
            if isinstance(destination, RemoteQueue):
                if destination.worker == peer:
                    yours.append(binding_change("bind", exchange, destination, key, arguments))
                continue  # its owner's snapshot carries it
            if isinstance(destination, Queue | Exchange):
                changes.append(binding_change("bind", exchange, destination, key, arguments))
    return ("snapshot", worker, changes, rejoining, yours)


# -- applying changes ----------------------------------------------------------------------
class _Refused(Exception):
    """The change declares a queue or exchange this worker keeps, declared differently."""


def apply_change(vhost: VirtualHost, change: Change) -> bool:
    """Make another worker's ``change`` here (idempotent; nothing is sent on); whether it is
    refused: it declares a queue or exchange that was declared differently here at the same
    moment and that this worker keeps (see the module's docstring)."""
    op = change[0]
    handler = _APPLY.get(op)
    if handler is None and op != "snapshot":
        raise ValueError(f"unknown topology change {op!r}")
    replica = vhost.replica
    here = -1 if replica is None else replica.worker
    vhost.replica = None  # what another worker changed is not sent back to the others
    refused = False
    try:
        if handler is not None:
            send_on = handler(vhost, change, here)
        elif replica is not None and replica.rejoining and not change[3]:
            send_on = _adopt_snapshot(vhost, change, here)  # they stayed up, this one not
        else:  # the other rejoins while this one stayed up, or neither or both (a start)
            rejoining = replica is not None and replica.rejoining
            send_on = _apply_snapshot(vhost, change, here, change[3] and not rejoining)
    except _Refused:
        send_on, refused = [], True
    finally:
        vhost.replica = replica
    if replica is not None:
        for item in send_on:  # a queue given up here: the winner's change, sent on
            replica.changed(vhost.name, item)
    return refused


def _apply_own_queue(vhost: VirtualHost, change: Change) -> None:
    """A queue declared on another worker for this one to own (a balancing locator)."""
    _, name, _worker, durable, _exclusive, auto_delete, arguments = change
    stub = vhost.remote.get(name)
    if stub is not None:
        vhost.drop_remote(stub)
    with suppress(AMQPError):  # refused here (a limit): the declarer's stub finds nothing
        vhost.declare_queue(name, False, durable, False, auto_delete, arguments, None)


def _add_exchange(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    """An exchange of a snapshot: made unless this worker has one of that name."""
    _, name, type_name, durable, auto_delete, internal, arguments = change
    if name not in vhost.exchanges:
        # refused here as it would not have been there: nothing to mirror
        with suppress(AMQPError):
            vhost.declare_exchange(
                name, type_name, False, durable, auto_delete, internal, arguments
            )
    return []


def _apply_exchange(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    mine = vhost.exchanges.get(change[1])
    if mine is None or _exchange_equivalent(vhost, mine, change):
        return _add_exchange(vhost, change, here)
    if _exchange_key(exchange_change(mine)) <= _exchange_key(change):
        raise _Refused  # declared differently here at the same moment: see the docstring
    if mine.delayed is not None and mine.delayed.count:
        log.warning(
            "exchange '%s' in vhost '%s' was declared differently on two workers at the same "
            "moment; worker %d keeps its own, which holds delayed messages (delete the "
            "exchange and declare it again to have one)",
            mine.name,
            vhost.name,
            here,
        )
        return []
    _replace_exchange(vhost, mine, change)
    return []


def _exchange_equivalent(vhost: VirtualHost, exchange: Exchange, change: Change) -> bool:
    _, _name, type_name, durable, auto_delete, internal, arguments = change
    try:
        check_exchange_equivalent(
            vhost.name, exchange, type_name, durable, auto_delete, internal, arguments
        )
    except AMQPError:
        return False
    return True


def _exchange_key(change: Change) -> str:
    """What orders two declarations of one exchange alike on every worker."""
    _, _name, type_name, durable, auto_delete, internal, arguments = change
    return repr((type_name, durable, auto_delete, internal, sorted(arguments.items())))


def _replace_exchange(vhost: VirtualHost, mine: Exchange, change: Change) -> None:
    """``mine`` gives way to another worker's declaration; the bindings stay."""
    outgoing = [(dest, key, dict(args)) for dest, key, args in mine.router.bindings()]
    incoming = [
        (source, key, dict(args))
        for source in vhost.exchanges.values()
        for dest, key, args in source.router.bindings()
        if dest is mine
    ]
    vhost.delete_exchange(mine.name, False)
    _add_exchange(vhost, change, -1)
    winner = vhost.exchanges.get(mine.name)
    if winner is None:
        return
    for destination, key, arguments in outgoing:
        if isinstance(destination, Queue | Exchange):
            with suppress(AMQPError):
                vhost.bind(winner, destination, key, arguments)
    for source, key, arguments in incoming:
        with suppress(AMQPError):
            vhost.bind(source, winner, key, arguments)


def _apply_exchange_delete(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    if change[1] in vhost.exchanges:
        vhost.delete_exchange(change[1], False)
    return []


def _apply_queue(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    name, worker = change[1], change[2]
    if worker == here:
        _apply_own_queue(vhost, change)
        return []
    mine = vhost.queues.get(name)
    if mine is not None:  # declared here meanwhile (see the module's docstring)
        if worker > here and not _equivalent(vhost, mine, change):
            raise _Refused
        if worker > here or not _unused(mine):
            if worker < here:
                log.warning(
                    "queue '%s' in vhost '%s' was declared on workers %d and %d at the "
                    "same moment; worker %d keeps its own, already in use (delete the "
                    "queue and declare it again to have one)",
                    name,
                    vhost.name,
                    worker,
                    here,
                    here,
                )
            return []
        bindings = _bindings_to(vhost, mine)
        vhost.delete_queue(mine)  # unused: nothing in it, nobody told of it but its declarer
        stub = _stub(vhost, change)
        for source, key, binding_arguments in bindings:
            with suppress(AMQPError):
                vhost.bind(source, stub, key, binding_arguments)
        return [change]
    existing = vhost.remote.get(name)
    if existing is not None and existing.worker == worker:
        return []
    if existing is not None:
        vhost.drop_remote(existing)
    _stub(vhost, change)
    return []


def _stub(vhost: VirtualHost, change: Change) -> RemoteQueue:
    _, name, worker, durable, exclusive, auto_delete, arguments = change
    stub = vhost.remote[name] = RemoteQueue(
        name, vhost.name, worker, durable, exclusive, auto_delete, arguments
    )
    stub.port = vhost.consuming
    vhost.topology.value += 1
    return stub


def _equivalent(vhost: VirtualHost, queue: Queue, change: Change) -> bool:
    """Whether ``change`` declares ``queue`` as it is (a redeclaration RabbitMQ accepts)."""
    _, _name, _worker, durable, exclusive, auto_delete, arguments = change
    if exclusive or queue.exclusive_owner is not None:
        return False  # RabbitMQ: 405 for the second declarer
    try:
        check_queue_equivalent(vhost.name, queue, durable, auto_delete, arguments)
    except AMQPError:
        return False
    return True


def _unused(queue: Queue) -> bool:
    """Nothing was ever enqueued in ``queue`` and it never had a consumer."""
    return (
        queue.exclusive_owner is None
        and queue.stats.publish == 0
        and queue.message_count == 0
        and not queue.had_consumer
        and not queue.consumers
    )


def _bindings_to(vhost: VirtualHost, queue: Queue) -> list[tuple[Exchange, str, dict[str, Any]]]:
    found = []
    for exchange in vhost.exchanges.values():
        for destination, key, arguments in exchange.router.bindings():
            if destination is queue:
                found.append((exchange, key, dict(arguments)))
    return found


def _apply_queue_delete(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    _, name, owner = change
    stub = vhost.remote.get(name)
    if stub is not None and stub.worker == owner:
        vhost.drop_remote(stub)
        return []
    queue = vhost.queues.get(name)
    if queue is not None and owner == here:
        vhost.delete_queue(queue)  # queue.delete on another worker's stub of it
    return []


def _apply_purge(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    queue = vhost.queues.get(change[1])
    if queue is not None:
        queue.purge()
    return []


def _destination(vhost: VirtualHost, kind: str, name: str) -> Queue | Exchange | None:
    if kind == "exchange":
        return vhost.exchanges.get(name)
    queue = vhost.queues.get(name)
    return queue if queue is not None else vhost.remote.get(name)


def _apply_binding(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    op, source_name, kind, destination_name, key, arguments = change
    source = vhost.exchanges.get(source_name)
    destination = _destination(vhost, kind, destination_name)
    if source is None or destination is None:
        return []
    try:
        if op == "bind":
            vhost.bind(source, destination, key, arguments)
        else:
            vhost.unbind(source, destination, key, arguments)
    except AMQPError:
        pass  # refused here as it would not have been there: nothing to mirror
    return []


def _apply_snapshot(vhost: VirtualHost, change: Change, here: int, rejoining: bool) -> list[Change]:
    """Another worker's snapshot; ``rejoining``: it was down while this one served."""
    _, worker, changes, _rejoining, _yours = change
    owned = {item[1] for item in changes if item[0] == "queue"}
    for stub in [stub for stub in vhost.remote.values() if stub.worker == worker]:
        if not rejoining or stub.name not in owned:
            vhost.drop_remote(stub)  # a rejoining worker's queue kept: its bindings stay
    send_on: list[Change] = []
    for item in changes:
        if item[0] == "exchange":
            if not rejoining:
                _add_exchange(vhost, item, here)  # never replacing: see the docstring
            continue
        if rejoining and item[0] != "queue":
            continue  # what it recovered, perhaps changed here meanwhile: the docstring
        with suppress(_Refused):  # a snapshot: nobody waits for its answer
            send_on += _APPLY[item[0]](vhost, item, here)
    return send_on


def _adopt_snapshot(vhost: VirtualHost, change: Change, here: int) -> list[Change]:
    """This worker is rejoining: the snapshot of ``worker``, which stayed up, holds the
    node's exchanges and bindings (see the module's docstring)."""
    _, worker, changes, _rejoining, yours = change
    for stub in [stub for stub in vhost.remote.values() if stub.worker == worker]:
        vhost.drop_remote(stub)
    exchanges = {item[1]: item for item in changes if item[0] == "exchange"}
    for name in list(vhost.exchanges):
        if name and not name.startswith("amq.") and name not in exchanges:
            vhost.delete_exchange(name, False)  # deleted while this worker was down
    for item in exchanges.values():
        mine = vhost.exchanges.get(item[1])
        if mine is not None and not _exchange_equivalent(vhost, mine, item):
            _replace_exchange(vhost, mine, item)
        else:
            _add_exchange(vhost, item, here)
    send_on: list[Change] = []
    for item in changes:
        if item[0] == "queue":
            with suppress(_Refused):
                send_on += _apply_queue(vhost, item, here)
    bindings = [item for item in (*changes, *yours) if item[0] == "bind"]
    for item in bindings:  # made first: an auto-delete exchange keeps the ones it has
        _apply_binding(vhost, item, here)
    wanted = {_binding_key(item) for item in bindings}
    for exchange in [exchange for exchange in vhost.exchanges.values() if exchange.name]:
        for destination, key, arguments in list(exchange.router.bindings()):
            if isinstance(destination, RemoteQueue) or not isinstance(
                destination, Queue | Exchange
            ):
                continue  # another worker's queue: its owner's snapshot has its bindings
            item = binding_change("unbind", exchange, destination, key, arguments)
            if _binding_key(item) not in wanted and exchange.name in vhost.exchanges:
                _apply_binding(vhost, item, here)  # removed while this worker was down
    return send_on


def _binding_key(change: Change) -> str:
    _, source, kind, destination, key, arguments = change
    return repr((source, kind, destination, key, sorted(arguments.items())))


_APPLY: dict[str, Callable[[VirtualHost, Change, int], list[Change]]] = {
    "exchange": _apply_exchange,
    "exchange-delete": _apply_exchange_delete,
    "queue": _apply_queue,
    "queue-delete": _apply_queue_delete,
    "bind": _apply_binding,
    "unbind": _apply_binding,
    "purge": _apply_purge,
}
