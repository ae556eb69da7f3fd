"""exchange.* and queue.* methods of one channel: declare, delete, bind, unbind, purge.

The handlers check nothing about access (`amqpd.engine.permissions` ran before) and leave the
rules and reply codes to the vhost; what is per channel is the last declared queue, which
an empty queue name means in later queue methods (``queue_name``).

In a spread vhost (amqpd/model/replica.py) a reply that follows a change of the topology is
held until the other workers applied it (`_answer`), and using a queue another worker owns
(declare, consume, get, purge, delete: `_move_if_elsewhere`) moves the whole connection to
that worker when nothing pins it here (`MoveConnection`, acted on by the connection and the
shell, engine/moving.py); otherwise a purge or delete is sent to that worker, and a consume
or get is served by it (engine/remote_consumers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands as spec
from pamqp.base import Frame as Method

from amqpd.engine.reply_to import REPLY_TO_QUEUE, remote_reply_queue
from amqpd.model.declare_checks import check_exchange_equivalent, check_queue_equivalent
from amqpd.model.queue import ExclusiveOwner, Queue
from amqpd.model.replica import RemoteQueue
from amqpd.model.vhost import VirtualHost
from amqpd.wire import codec
from amqpd.wire.errors import ACCESS_REFUSED, NOT_FOUND, AMQPError, not_found, precondition_failed


class MoveConnection(Exception):
    """The connection must continue on worker ``worker``, from the frame being handled on
    (the queue it uses lives there; engine/connection.py, amqpd/shell/workers/moves.py)."""

    def __init__(self, worker: int) -> None:
        super().__init__(f"move to worker {worker}")
        self.worker = worker


class TopologyOwner(ExclusiveOwner, Protocol):
    """What the handlers need of their connection: whether it may still move to another
    worker, whether it is being replayed there (replies thrown away: none is held), and
    how many replies it has held for the other workers (it cannot move while one is)."""

    replaying: bool
    held_replies: int

    @property
    def movable(self) -> bool: ...


class Topology:
    """The exchange and queue method handlers of one channel."""

    __slots__ = (
        "_fail_later",
        "_owner",
        "_reply",
        "_reply_later",
        "_reply_queues",
        "last_queue",
        "vhost",
    )

    def __init__(
        self,
        vhost: VirtualHost,
        owner: TopologyOwner,
        reply_queues: dict[str, Queue],
        reply: Callable[[Method], None],
        reply_later: Callable[[Method], None] | None = None,
        fail_later: Callable[[AMQPError], None] | None = None,
    ) -> None:
        """``owner`` owns the exclusive queues declared here; ``reply_queues`` are the live
        direct reply-to addresses; ``reply`` sends a method on the channel, ``reply_later``
        a held one (once the other workers of a spread vhost have a change, or another
        worker answered: not if the channel closed meanwhile), ``fail_later`` closes the
        channel for another worker's refusal."""
        self.vhost = vhost
        self._owner = owner
        self._reply_queues = reply_queues
        self._reply = reply
        self._reply_later = reply if reply_later is None else reply_later
        self._fail_later = fail_later
        self.last_queue: str | None = None

    def _ask_owner(
        self,
        queue: Queue,
        request: tuple[Any, ...],
        answer: Callable[[int, int], Method],
        method_id: int,
    ) -> bool:
        """Whether ``queue`` is another worker's, asked for ``request``: its answer (two
        counts) is replied with the method ``answer`` makes (held, as every topology reply,
        until every worker applied what was sent before it), a refusal closes the channel
        (engine/remote_consumers.py `ask`)."""
        if not isinstance(queue, RemoteQueue) or queue.port is None:
            return False
        port = queue.port
        fail_later = self._fail_later

        def refuse(code: int, text: str) -> None:
            if fail_later is not None:
                fail_later(AMQPError(code, text, 50, method_id))

        port.ask(queue, request, lambda one, two: self._answer(answer(one, two)), refuse)
        return True

    def _answer(self, method: Method, refused: Callable[[], None] | None = None) -> None:
        """Reply to a method that may have changed the topology: in a spread vhost, once
        every other worker applied the change (model/replica.py); ``refused`` instead of
        the reply when another worker refused it."""
        replica = self.vhost.replica
        owner = self._owner
        if replica is None or owner.replaying:
            self._reply(method)
        else:
            owner.held_replies += 1
            replica.hold(HeldReply(self._reply_later, method, owner, refused))

    def handlers(self) -> dict[int, Callable[[Any], None]]:
        """Method index -> handler, for the channel's dispatch table (queue.delete is the
        channel's own, around `queue_delete`)."""
        return {
            spec.Exchange.Declare.index: self._exchange_declare,
            spec.Exchange.Delete.index: self._exchange_delete,
            spec.Exchange.Bind.index: self._exchange_bind,
            spec.Exchange.Unbind.index: self._exchange_unbind,
            spec.Queue.Declare.index: self._queue_declare,
            spec.Queue.Bind.index: self._queue_bind,
            spec.Queue.Unbind.index: self._queue_unbind,
            spec.Queue.Purge.index: self._queue_purge,
        }

    def queue_name(self, name: str) -> str:
        """``name``, or the channel's last declared queue for an empty one (404 if none)."""
        if name:
            return name
        if self.last_queue is None:
            raise AMQPError(NOT_FOUND, "no previously declared queue")
        return self.last_queue

    def usable_queue(self, name: str, remote: bool = False) -> Queue:
        """The queue ``name`` means (404 if it does not exist, 405 if another connection
        holds it exclusively; another worker's: see the module's docstring, ``remote``: its
        stub, for a consume or get served by that worker)."""
        name = self.queue_name(name)
        vhost = self.vhost
        if vhost.remote:
            self._move_if_elsewhere(name)
            if remote and name not in vhost.queues:
                stub = vhost.remote.get(name)
                if stub is not None and stub.port is not None:
                    return stub
        queue = vhost.get_queue(name)
        vhost.check_exclusive_access(queue, self._owner)
        return queue

    def _move_if_elsewhere(self, name: str) -> None:
        """Move the connection to the worker that owns the queue ``name`` when it may: its
        state (counts, consumers, messages) is there (a spread vhost)."""
        vhost = self.vhost
        if name in vhost.queues:
            return
        stub = vhost.remote.get(name)
        if stub is None:
            return
        vhost.check_exclusive_access(stub, self._owner)  # 405: another connection's
        if self._owner.movable:
            raise MoveConnection(stub.worker)

    # -- exchanges -----------------------------------------------------------------------
    def _exchange_declare(self, method: spec.Exchange.Declare) -> None:
        vhost = self.vhost
        new = (
            vhost.replica is not None
            and not method.passive
            and method.exchange not in vhost.exchanges
        )
        vhost.declare_exchange(
            method.exchange,
            method.exchange_type,
            method.passive,
            method.durable,
            method.auto_delete,
            method.internal,
            dict(method.arguments or {}),
        )
        if not method.nowait:
            self._answer(
                spec.Exchange.DeclareOk(),
                self._exchange_declared_elsewhere(method) if new else None,
            )

    def _exchange_declared_elsewhere(self, method: spec.Exchange.Declare) -> Callable[[], None]:
        """What a new exchange's held declare-ok becomes when another worker declared it
        differently at the same moment and kept its own (model/replica_apply.py): 406, its
        text from that declaration when it has replaced this one here already."""
        vhost = self.vhost
        name, type_name, durable = method.exchange, method.exchange_type, method.durable
        auto_delete, internal = method.auto_delete, method.internal
        arguments = dict(method.arguments or {})

        def check() -> None:
            existing = vhost.exchanges.get(name)
            if existing is not None:
                check_exchange_equivalent(
                    vhost.name, existing, type_name, durable, auto_delete, internal, arguments
                )

        return self._refusal(f"exchange '{name}'", check, 40)

    def _exchange_delete(self, method: spec.Exchange.Delete) -> None:
        self.vhost.delete_exchange(method.exchange, method.if_unused)
        if not method.nowait:
            self._answer(spec.Exchange.DeleteOk())

    def _exchange_bind(self, method: spec.Exchange.Bind) -> None:
        destination = self.vhost.get_exchange(method.destination)
        source = self.vhost.get_exchange(method.source)
        self.vhost.bind(source, destination, method.routing_key, dict(method.arguments or {}))
        if not method.nowait:
            self._answer(spec.Exchange.BindOk())

    def _exchange_unbind(self, method: spec.Exchange.Unbind) -> None:
        # RabbitMQ 3.x (rabbit_binding:remove, absent_errs_only): unbind is idempotent, a
        # missing source or destination is not an error; the default exchange still is
        destination = self.vhost.exchanges.get(method.destination)
        source = self.vhost.exchanges.get(method.source)
        if destination is not None and source is not None:
            args = dict(method.arguments or {})
            self.vhost.unbind(source, destination, method.routing_key, args)
        elif not method.source or not method.destination:
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if not method.nowait:
            self._answer(spec.Exchange.UnbindOk())

    # -- queues --------------------------------------------------------------------------
    def _queue_declare(self, method: spec.Queue.Declare) -> None:
        if method.queue.startswith(REPLY_TO_QUEUE):
            self._declare_reply_to(method)
            return
        vhost = self.vhost
        if vhost.remote and method.queue:
            self._move_if_elsewhere(method.queue)  # its counts are there
        new = (
            vhost.replica is not None
            and not method.passive
            and bool(method.queue)  # a server-named queue's name is new everywhere
            and method.queue not in vhost.queues
            and method.queue not in vhost.remote
        )
        queue = vhost.declare_queue(
            method.queue,
            method.passive,
            method.durable,
            method.exclusive,
            method.auto_delete,
            dict(method.arguments or {}),
            self._owner,
        )
        self.last_queue = queue.name
        if method.nowait:
            return
        name = queue.name
        if not self._ask_owner(  # its counts are there
            queue,
            ("count",),
            lambda messages, consumers: codec.build(
                spec.Queue.DeclareOk,
                queue=name,
                message_count=messages,
                consumer_count=consumers,
            ),
            10,
        ):
            self._answer(
                codec.build(
                    spec.Queue.DeclareOk,
                    queue=queue.name,
                    message_count=queue.message_count,
                    consumer_count=len(queue.consumers),
                ),
                self._declared_elsewhere(method) if new else None,
            )

    def _declared_elsewhere(self, method: spec.Queue.Declare) -> Callable[[], None]:
        """What a new queue's held declare-ok becomes when a lower-numbered worker declared
        the same queue differently at the same moment (model/replica_apply.py): the 405 or
        406 the second declaration gets from RabbitMQ, its text from that worker's queue
        when its declaration arrived here already."""
        vhost, owner = self.vhost, self._owner
        name, durable, auto_delete = method.queue, method.durable, method.auto_delete
        exclusive, arguments = method.exclusive, dict(method.arguments or {})

        def check() -> None:
            stub = vhost.remote.get(name)
            if stub is not None:
                vhost.check_exclusive_access(stub, owner if exclusive else None, strict=True)
                check_queue_equivalent(vhost.name, stub, durable, auto_delete, arguments)

        return self._refusal(f"queue '{name}'", check, 50)

    def _refusal(self, what: str, check: Callable[[], None], class_id: int) -> Callable[[], None]:
        """Closing the channel for a declaration (of ``what``, method 10 of ``class_id``)
        another worker refused: with the error ``check`` raises against what this worker
        holds now (the other declaration, once it arrived), else a plain 406."""
        vhost, fail_later = self.vhost, self._fail_later

        def refused() -> None:
            if fail_later is None:
                return
            error = precondition_failed(
                f"{what} in vhost '{vhost.name}' was declared differently by another "
                "connection at the same moment"
            )
            try:
                check()
            except AMQPError as exc:
                error = exc
            fail_later(AMQPError(error.reply_code, error.text, class_id, 10))

        return refused

    def _declare_reply_to(self, method: spec.Queue.Declare) -> None:
        """RabbitMQ answers a declare (passive or not) of the direct reply-to pseudo-queue or
        of a live reply address with 0 messages and 1 consumer, so an RPC server can check
        that its client is still there; a gone address is 404."""
        name = method.queue
        if (
            name != REPLY_TO_QUEUE
            and name not in self._reply_queues
            and not remote_reply_queue(self.vhost, name)  # another worker's: taken as live
        ):
            raise not_found("queue", name, self.vhost.name)
        if not method.nowait:
            self._reply(
                codec.build(spec.Queue.DeclareOk, queue=name, message_count=0, consumer_count=1)
            )

    def _queue_bind(self, method: spec.Queue.Bind) -> None:
        name = self.queue_name(method.queue)
        queue = self.vhost.find_queue(name)  # another worker's queue too (a spread vhost)
        if queue is None:
            raise not_found("queue", name, self.vhost.name)
        self.vhost.check_exclusive_access(queue, self._owner)
        exchange = self.vhost.get_exchange(method.exchange)
        key = method.routing_key if (method.routing_key or method.queue) else queue.name
        self.vhost.bind(exchange, queue, key, dict(method.arguments or {}))
        if not method.nowait:
            self._answer(spec.Queue.BindOk())

    def _queue_unbind(self, method: spec.Queue.Unbind) -> None:
        # idempotent like exchange.unbind: a missing queue or exchange is not an error
        queue = self.vhost.find_queue(self.queue_name(method.queue))
        exchange = self.vhost.exchanges.get(method.exchange)
        if queue is not None and exchange is not None:
            self.vhost.check_exclusive_access(queue, self._owner)
            key = method.routing_key if (method.routing_key or method.queue) else queue.name
            self.vhost.unbind(exchange, queue, key, dict(method.arguments or {}))
        elif not method.exchange:
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        self._answer(spec.Queue.UnbindOk())

    def _queue_purge(self, method: spec.Queue.Purge) -> None:
        vhost = self.vhost
        if vhost.remote:
            name = self.queue_name(method.queue)
            self._move_if_elsewhere(name)
            stub = None if name in vhost.queues else vhost.remote.get(name)
            if stub is not None:  # a connection that cannot move: purged on its worker
                vhost.check_exclusive_access(stub, self._owner)
                purged = self._ask_owner(
                    stub, ("purge",), lambda count, _: spec.Queue.PurgeOk(message_count=count), 30
                )
                if not purged:
                    vhost.purge_remote_queue(stub)
                    if not method.nowait:  # how many it held is known there only
                        self._answer(spec.Queue.PurgeOk(message_count=0))
                return
        queue = self.usable_queue(method.queue)
        count = queue.purge()
        if not method.nowait:
            self._reply(spec.Queue.PurgeOk(message_count=count))

    def queue_delete(self, method: spec.Queue.Delete) -> None:
        """queue.delete (the channel's handler calls it: it orders the replies)."""
        name = self.queue_name(method.queue)
        if self.vhost.remote:
            self._move_if_elsewhere(name)  # its count, consumers and messages are there
        queue = self.vhost.queues.get(name)
        count = 0
        stub = self.vhost.remote.get(name) if queue is None and self.vhost.remote else None
        if stub is not None:  # another worker's queue: deleted there
            self.vhost.check_exclusive_access(stub, self._owner)
            vhost = self.vhost

            def deleted(count: int, _: int) -> Method:
                vhost.drop_remote(stub)  # (the owner sends the change to every worker)
                return spec.Queue.DeleteOk(message_count=count)

            request = ("delete", bool(method.if_unused), bool(method.if_empty))
            if self._ask_owner(stub, request, deleted, 40):
                return
            self.vhost.delete_remote_queue(stub)
        elif queue is not None:
            self.vhost.check_exclusive_access(queue, self._owner)
            if method.if_unused and queue.consumers:
                raise precondition_failed(f"queue '{name}' in vhost '{self.vhost.name}' in use")
            if method.if_empty and queue.message_count:
                raise precondition_failed(
                    f"queue '{name}' in vhost '{self.vhost.name}' is not empty"
                )
            count = self.vhost.delete_queue(queue)
        if not method.nowait:
            self._answer(spec.Queue.DeleteOk(message_count=count))


class HeldReply:
    """A topology method's reply, sent once the other workers applied its change (or
    ``refused`` called when one refused it: amqpd/model/replica_apply.py)."""

    __slots__ = ("_method", "_owner", "_refused", "_send")

    def __init__(
        self,
        send: Callable[[Method], None],
        method: Method,
        owner: TopologyOwner,
        refused: Callable[[], None] | None = None,
    ) -> None:
        self._send = send
        self._method = method
        self._owner = owner
        self._refused = refused

    def decided(self, ok: bool) -> None:
        self._owner.held_replies -= 1
        if not ok and self._refused is not None:
            self._refused()
        else:  # a worker that went away gets the topology again when it comes back
            self._send(self._method)
