"""A spread vhost's topology on every worker (issue 26 stage 2, docs/multicore.md "Stage 2").

Theory of operation
-------------------
A *spread* vhost (``--spread-vhosts``) has connections on every worker. Every worker holds
every exchange and every binding of it; each queue lives on one worker: the worker of the
connection that declared it (RabbitMQ's default queue leader locator, ``client-local``),
or, when the queue's ``x-queue-leader-locator`` / ``x-queue-master-locator`` argument or
its policy's ``queue-leader-locator`` / ``queue-master-locator`` asks to balance
(``least-leaders``, ``balanced``, ``min-masters``, ``random``), the worker owning the
fewest queues of the vhost (`place`): the declaring worker then makes a stub and the owner
the queue itself when the change reaches it. Exclusive and server-named queues are always
the connection's own worker's.
A queue owned by another worker is a `RemoteQueue` here: a stub in `VirtualHost.remote`,
never in `VirtualHost.queues` (so listings, statistics, limits and timers never see it),
bound in the exchanges' routers like a queue, so routing returns it and the publishing
worker forwards the message to its owner (`ReplicaPort.forward`).

Every change to the topology (an exchange declared or deleted, a queue created or deleted,
a binding added or removed) is made on the local vhost first, with every check and reply
code of a single process; `VirtualHost` then describes it as a `Change` (a plain tuple) and
gives it to its `ReplicaPort`, which sends it to every other worker over the links between
workers; there `apply_change` makes the same change (a queue becomes a stub). A client's
topology method asks the port to `hold` its ``-ok`` until every other worker applied what
was sent before it, so routing from any connection sees a new binding once the client has
its bind-ok, as with a single process. Applying is idempotent: an exchange or binding that
exists is left alone, a stub of a queue this worker owns is never made.

`snapshot` describes what this worker contributes to a spread vhost: its exchanges and the
bindings between them, its own queues and their bindings. It is sent to a peer each time a
link to it comes up (a worker started or restarted), and the peer replaces every stub of
that worker with it, so a restarted worker's queues are found again and a deleted one's
stub goes (both in amqpd/model/replica_apply.py). A worker restarted while the others
served (*rejoining*) missed what they changed meanwhile, so there the others' exchanges and
bindings win over what it recovered from its store.

A connection that cannot move to a queue's worker consumes from its stub (or gets from it):
the stub's `ConsumingPort` (amqpd/engine/remote_consumers.py) asks the owner to serve the
consumer there (amqpd/engine/served_consumers.py), and what the channel does with the
owner's deliveries comes back through the stub's own methods: ``settled`` is an ack,
``requeue`` and ``discard`` a nack, ``remove_consumer`` a cancel, ``dispatch`` (credit is
back) lets the owner send more. A delivery the owner expects settled is marked ``stored``
here (the stub stores nothing else); the owner's delivery tag is its ``seq``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from amqpd.model.exchange import Exchange
from amqpd.model.queue import Queue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from amqpd.model.message import Message, QueueEntry
    from amqpd.model.queue import Consumer, ConsumerSink

# ("exchange", name, type, durable, auto_delete, internal, arguments)
# ("exchange-delete", name)
# ("queue", name, owner worker, durable, exclusive, auto_delete, arguments)
# ("queue-delete", name, owner worker)
# ("purge", name): queue.purge of another worker's queue by a connection that cannot move
# ("bind" | "unbind", source, "queue" | "exchange", destination, routing key, arguments)
# ("snapshot", worker, [changes], rejoining, [bindings to the recipient's queues])
Change = tuple[Any, ...]


class Decision(Protocol):
    """What waits for other workers: a held topology reply, a publisher's confirm."""

    def decided(self, ok: bool) -> None:
        """Every other worker answered (``ok``), or one refused or was lost (not ``ok``)."""


class ReplicaPort(Protocol):
    """The links to the other workers, as a spread vhost uses them (the shell's
    amqpd/shell/workers/spread.py)."""

    worker: int  # this worker's index
    workers: int  # how many workers the node has
    # restarted while the others served, and not yet ready: the others' exchanges and
    # bindings are the node's (amqpd/model/replica_apply.py "rejoining")
    rejoining: bool

    @property
    def consuming(self) -> ConsumingPort | None:
        """This worker's consumers of other workers' queues."""

    def changed(self, vhost: str, change: Change) -> None:
        """Send ``change`` of ``vhost`` to every other worker (with the next flush)."""

    def hold(self, decision: Decision) -> None:
        """Decide ``decision`` once every other worker applied every change sent so far
        (at once when nothing was sent since the last hold)."""

    def forward(
        self,
        vhost: str,
        message: Message,
        expiration_ms: int | None,
        promised: bool,
        targets: list[Queue],
        decision: Decision | None,
        local: bool,
    ) -> None:
        """Send one copy of ``message`` to the owner of each `RemoteQueue` in ``targets``;
        ``decision`` (None: nobody waits) is decided when every copy was settled, and also
        waits for `local_done` when ``local`` (a copy here waits for its storage batch)."""

    def local_done(self, decision: Decision, ok: bool) -> None:
        """The local copy of a forwarded publish is settled (``ok``) or refused."""


class ConsumingPort(Protocol):
    """This worker's consumers and basic.gets on other workers' queues (the engine's
    amqpd/engine/remote_consumers.py)."""

    def consume(self, channel: ConsumerSink, consumer: Consumer, nowait: bool) -> None:
        """Ask the owner of ``consumer.queue`` (a stub) to serve ``consumer``; its
        consume-ok (unless ``nowait``) or the refusal comes when the owner answers."""

    def get(self, channel: ConsumerSink, stub: RemoteQueue, no_ack: bool) -> None:
        """basic.get from ``stub``'s owner; the channel answers when the owner did."""

    def browse(
        self,
        channel: ConsumerSink,
        stub: RemoteQueue,
        tag: str,
        arguments: dict[str, Any],
        nowait: bool,
    ) -> None:
        """An ``x-browse`` consumer (no-ack) of ``stub``'s queue: its consume-ok (unless
        ``nowait``), the copies and the server-side cancel come when the owner answered."""

    def ask(
        self,
        stub: RemoteQueue,
        request: tuple[Any, ...],
        answer: Callable[[int, int], None],
        refuse: Callable[[int, str], None],
    ) -> None:
        """Ask ``stub``'s owner for its queue's counts (``("count",)``), to purge it
        (``("purge",)``: the count purged) or to delete it (``("delete", if_unused,
        if_empty)``: the count deleted); ``answer`` gets two counts (messages, consumers),
        ``refuse`` a reply code and text (404: gone; 406: in use or not empty)."""

    def settle(self, worker: int, kind: str, entries: list[QueueEntry]) -> None:
        """Deliveries from ``worker`` are acked ("ack"), requeued ("requeue") or rejected
        ("discard")."""

    def cancel(self, consumer: Consumer) -> None:
        """``consumer`` is cancelled here: the owner stops serving it."""

    def resume(self, stub: RemoteQueue) -> None:
        """Channels consuming from ``stub`` may take more: the owner may send more."""


class _Elsewhere:
    """The owner of an exclusive queue that lives on another worker: no connection here
    is it, so every one of them gets 405 RESOURCE_LOCKED."""

    def __init__(self) -> None:
        self.exclusive_queues: list[Queue] = []


ELSEWHERE = _Elsewhere()


class RemoteQueue(Queue):
    """A queue of a spread vhost that worker ``worker`` owns: what this worker knows of it
    (its name and declaration), to route to it and to check redeclarations."""

    __slots__ = ("flooding", "port", "worker")

    def __init__(
        self,
        name: str,
        vhost_name: str,
        worker: int,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        super().__init__(
            name, vhost_name, durable, ELSEWHERE if exclusive else None, auto_delete, arguments
        )
        self.worker = worker
        self.port: ConsumingPort | None = None  # set by its vhost (`VirtualHost.remote`)
        # its owner said it is far behind its consumers (engine/flood_watch.py)
        self.flooding = False

    def __repr__(self) -> str:
        return f"<RemoteQueue {self.name!r} in vhost {self.vhost_name!r} on worker {self.worker}>"

    def behind(self, backlog: int) -> bool:
        """The owner's word (engine/flood_watch.py), not this stub's empty ``ready``."""
        return self.flooding

    # -- what a channel does with the owner's deliveries (see the module's docstring) ------
    def delivered(self, entry: QueueEntry) -> None:
        """The owner counted the delivery already."""

    def settled(self, entry: QueueEntry) -> None:
        """Acked (or handed out with no-ack: then the owner settled it itself)."""
        if entry.stored and self.port is not None:
            entry.stored = False
            self.port.settle(self.worker, "ack", [entry])

    def discard(self, entry: QueueEntry, reason: str) -> None:
        """Rejected without requeue: the owner dead-letters or drops it."""
        if entry.stored and self.port is not None:
            entry.stored = False
            self.port.settle(self.worker, "discard", [entry])

    def requeue(self, entries: Iterable[QueueEntry], unsent: bool = False) -> None:
        """Back into the owner's queue (nack, recover, a channel closed); ``unsent``: never
        handed to the client (its channel's global qos was full), back as they were."""
        back = []
        for entry in entries:
            if entry.stored:
                entry.stored = False
                back.append(entry)
        if back and self.port is not None:
            self.port.settle(self.worker, "unsent" if unsent else "requeue", back)

    def remove_consumer(self, consumer: Consumer) -> None:
        """basic.cancel, or its channel closed."""
        if self.port is not None:
            self.port.cancel(consumer)

    def dispatch(self, arriving: QueueEntry | None = None) -> None:
        """A channel consuming from here has credit again."""
        if self.port is not None:
            self.port.resume(self)


BALANCED: Final = frozenset({"least-leaders", "balanced", "min-masters", "random"})
LOCATOR_ARGUMENTS: Final = ("x-queue-leader-locator", "x-queue-master-locator")
LOCATOR_KEYS: Final = ("queue-leader-locator", "queue-master-locator")


def balanced(arguments: dict[str, Any], policy: dict[str, Any] | None) -> bool:
    """Whether a new queue's locator (its argument, else its policy's) balances queues over
    the workers rather than keeping them on the declaring connection's."""
    for key in LOCATOR_ARGUMENTS:
        value = arguments.get(key)
        if value is not None:
            return (value.decode() if isinstance(value, bytes) else value) in BALANCED
    if policy is not None:
        for key in LOCATOR_KEYS:
            value = policy.get(key)
            if value is not None:
                return value in BALANCED
    return False


def least_loaded(here: int, workers: int, local: int, remote: dict[str, RemoteQueue]) -> int:
    """The worker owning the fewest of a vhost's queues (``local`` of them here). A tie
    keeps the queue here (connections are spread already: two workers declaring at once
    then each keep theirs), else goes to the lowest index."""
    counts = [0] * workers
    counts[here] = local
    for stub in remote.values():
        if stub.worker < workers:
            counts[stub.worker] += 1
    fewest = min(counts)
    return here if counts[here] == fewest else counts.index(fewest)


def has_remote(queues: list[Queue]) -> bool:
    """Whether any of ``queues`` lives on another worker."""
    for queue in queues:  # noqa: SIM110 (a loop compiles to less than any())
        if type(queue) is RemoteQueue:
            return True
    return False


def local_only(queues: list[Queue]) -> list[Queue]:
    """The queues of ``queues`` that live here."""
    return [queue for queue in queues if type(queue) is not RemoteQueue]


def local_noting_floods(queues: list[Queue], flow_queues: set[Queue]) -> list[Queue]:
    """The queues of ``queues`` that live here; the others whose owner reported them far
    behind (`RemoteQueue.flooding`) go into ``flow_queues``, as a local queue far behind
    does at its enqueue."""
    here: list[Queue] = []
    for queue in queues:
        if type(queue) is not RemoteQueue:
            here.append(queue)
        elif queue.flooding:
            flow_queues.add(queue)
    return here


def remote_by_worker(queues: list[Queue]) -> dict[int, list[str]]:
    """Owner worker -> the names of ``queues`` it owns (remote queues only)."""
    owners: dict[int, list[str]] = {}
    for queue in queues:
        if isinstance(queue, RemoteQueue):
            names = owners.get(queue.worker)
            if names is None:
                owners[queue.worker] = names = []
            names.append(queue.name)
    return owners


# -- describing changes ------------------------------------------------------------------
def exchange_change(exchange: Exchange) -> Change:
    """An exchange was declared."""
    return (
        "exchange",
        exchange.name,
        exchange.type_name,
        exchange.durable,
        exchange.auto_delete,
        exchange.internal,
        dict(exchange.arguments),
    )


def queue_change(queue: Queue, worker: int) -> Change:
    """``queue``, owned by ``worker``, was created."""
    return (
        "queue",
        queue.name,
        worker,
        queue.durable,
        queue.exclusive_owner is not None,
        queue.auto_delete,
        dict(queue.arguments),
    )


def binding_change(
    op: str, source: Exchange, destination: Queue | Exchange, key: str, arguments: dict[str, Any]
) -> Change:
    """A binding was added (``op`` "bind") or removed ("unbind")."""
    kind = "queue" if isinstance(destination, Queue) else "exchange"
    return (op, source.name, kind, destination.name, key, dict(arguments))
