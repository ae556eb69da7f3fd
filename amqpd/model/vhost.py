"""A virtual host: the registry of exchanges, queues and bindings, and routing across them."""

from __future__ import annotations

import base64
import secrets
from typing import TYPE_CHECKING, Any

from amqpd.model.deadletter import dead_lettered_message, is_cycle
from amqpd.model.declare_checks import (
    check_exchange_equivalent,
    check_exchange_type,
    check_queue_equivalent,
    check_quorum_declare,
)
from amqpd.model.delayed import DelayedHub, DelayedMessages, store_name
from amqpd.model.exchange import STANDARD_EXCHANGES, Exchange, TopologyVersion
from amqpd.model.federated_queues import FederatedQueues
from amqpd.model.federation import federation_policy_key
from amqpd.model.message import Clock, Message
from amqpd.model.policies import PolicyRecord, alternate_exchange, queue_policy, select
from amqpd.model.queue import ExclusiveOwner, Queue
from amqpd.model.queue_args import InvalidQueueArgument
from amqpd.model.replica import (
    RemoteQueue,
    balanced,
    binding_change,
    exchange_change,
    has_remote,
    least_loaded,
    queue_change,
)
from amqpd.model.routing import Routing
from amqpd.model.statistics import Churn, DeadLetterCounts
from amqpd.model.stream import StreamLogs, StreamQueue, new_stream_queue
from amqpd.model.stream_args import check_stream_declare, is_stream
from amqpd.model.stream_dedup import with_stream_dedup
from amqpd.wire.errors import (
    NOT_IMPLEMENTED,
    RESOURCE_LOCKED,
    AMQPError,
    access_refused,
    not_found,
    precondition_failed,
)
from exchanges.base import InvalidBinding
from exchanges.delayed import DELAYED_TYPE
from persistence.records import BindingDef, ExchangeDef, QueueDef

if TYPE_CHECKING:
    from amqpd.model.held import StoreProgress
    from amqpd.model.ports import BodyLoader, JournalPort

Destination = Queue | Exchange


def _is_standard(name: str) -> bool:
    """The default exchange and the amq.* ones exist in every vhost and are never stored."""
    return not name or name.startswith("amq.")


def generated_name(prefix: str) -> str:
    """A server-generated name like RabbitMQ's ``amq.gen-…`` / ``amq.ctag-…``."""
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


class VirtualHost(Routing):
    """Exchanges, queues and bindings of one vhost (routing: `Routing`)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.exchanges[""] = Exchange("", "direct")
        for ex_name, type_name in STANDARD_EXCHANGES:
            self.exchanges[ex_name] = Exchange(ex_name, type_name)
        # destination -> {source exchange: number of bindings} (for cleanup on delete)
        self._bound_from: dict[Destination, dict[Exchange, int]] = {}
        # Set by the broker when it has a store: durable definitions are journaled, and long
        # durable queues page bodies out (paging_queues: those with candidates).
        self.journal: JournalPort | None = None
        self.body_loader: BodyLoader | None = None
        self.paging_queues: set[Queue] | None = None
        self.store_progress: StoreProgress | None = None  # promised entries wait (held.py)
        self.clock = Clock()  # shared with the broker, which replaces it
        self.watch_queues: set[Queue] = set()  # queues with timers (TTL, x-expires)
        self.policies: list[PolicyRecord] = []  # set by the broker (model/policies.py)
        self.max_queues: int | None = None  # the vhost limit, set by the broker
        self.operator_policies: list[PolicyRecord] = []
        self.federation: FederatedQueues | None = None  # the broker's (federated_queues.py)
        self.churn = Churn()  # the broker's node-wide counters replace these two
        self.topology = TopologyVersion()  # the broker's replaces this one too
        self.dead_letters = DeadLetterCounts()
        self.stream_logs: StreamLogs | None = None  # set by the broker (model/stream.py)
        self.dirty_streams: set[StreamQueue] | None = None  # with a store: fsync before confirm
        self.delayed_hub = DelayedHub()  # the broker's replaces it (model/delayed.py)

    # -- exchanges -------------------------------------------------------------------------
    def get_exchange(self, name: str) -> Exchange:
        """The exchange, or 404."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise not_found("exchange", name, self.name)
        return exchange

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> Exchange:
        """Exchange.Declare with RabbitMQ's checks and reply codes."""
        if not name:
            raise access_refused("operation not permitted on the default exchange")
        existing = self.exchanges.get(name)
        if passive:
            if existing is None:
                raise not_found("exchange", name, self.name)
            return existing
        if name.startswith("amq.") and existing is None:
            raise access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        check_exchange_type(type_name, arguments, new=existing is None)
        if existing is not None:
            check_exchange_equivalent(
                self.name, existing, type_name, durable, auto_delete, internal, arguments
            )
            return existing
        exchange = Exchange(name, type_name, durable, auto_delete, internal, arguments)
        self._apply_exchange_policy(exchange)
        self.exchanges[name] = exchange
        self.topology.value += 1
        if durable and self.journal is not None:
            self.journal.put_exchange(
                ExchangeDef(self.name, name, type_name, auto_delete, internal, arguments)
            )
        self.attach_delayed(exchange, declared=True)
        if self.replica is not None:
            self.replica.changed(self.name, exchange_change(exchange))
        return exchange

    def attach_delayed(self, exchange: Exchange, declared: bool = False) -> None:
        """Give an x-delayed-message exchange its held messages (stored in an internal
        queue of the store when durable, put there when ``declared``)."""
        if exchange.type_name != DELAYED_TYPE:
            return
        journal = self.journal if exchange.durable else None
        exchange.delayed = DelayedMessages(
            self.name,
            exchange.name,
            self.clock,
            lambda message: self.route_here(exchange, message),
            self.delayed_hub,
            journal,
            self.body_loader,
        )
        if declared and journal is not None:
            journal.put_queue(QueueDef(self.name, store_name(exchange.name), False, {}))

    def delete_exchange(self, name: str, if_unused: bool) -> None:
        """Exchange.Delete (a missing exchange is not an error, as in RabbitMQ 3.x)."""
        if not name:
            raise access_refused("operation not permitted on the default exchange")
        if name.startswith("amq."):
            raise access_refused(f"cannot delete reserved exchange '{name}'")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and len(exchange.router):
            raise precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        del self.exchanges[exchange.name]
        self.topology.value += 1
        if self.replica is not None:
            self.replica.changed(self.name, ("exchange-delete", exchange.name))
        if exchange.durable and self.journal is not None:
            self.journal.delete_exchange(self.name, exchange.name)  # cascades its bindings
        if exchange.delayed is not None:
            exchange.delayed.drop_all()
            if exchange.delayed.journal is not None:
                exchange.delayed.journal.delete_queue(self.name, store_name(exchange.name))
        for destination, _key, _args in list(exchange.router.bindings()):
            assert isinstance(destination, Queue | Exchange)
            sources = self._bound_from.get(destination)
            if sources is not None:
                sources.pop(exchange, None)
                if not sources:
                    del self._bound_from[destination]
        self._unbind_destination(exchange)

    # -- queues ----------------------------------------------------------------------------
    def get_queue(self, name: str) -> Queue:
        """The queue, or 404 (540 for a queue another worker owns: see `find_queue`)."""
        queue = self.queues.get(name)
        if queue is None:
            stub = self.remote.get(name)
            if stub is not None:
                raise AMQPError(
                    NOT_IMPLEMENTED,
                    f"queue '{name}' in vhost '{self.name}' lives on worker {stub.worker} and "
                    "this connection cannot move there (it published, consumes or moved "
                    "already): consume from it on a connection of its own "
                    "(docs/multicore.md, stage 2)",
                )
            raise not_found("queue", name, self.name)
        return queue

    def declare_queue(
        self,
        name: str,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
        owner: ExclusiveOwner | None,
    ) -> Queue:
        """Queue.Declare with RabbitMQ's checks and reply codes (``owner``: the declaring
        connection; None only for declarations that are never exclusive)."""
        existing = self.find_queue(name) if name else None
        if passive:
            if existing is None:
                raise not_found("queue", name, self.name)
            self.check_exclusive_access(existing, owner)
            existing.last_used = self.clock.now  # RabbitMQ: a passive declare renews x-expires
            return existing
        self.churn.queues_declared += 1
        if existing is not None:
            existing.last_used = self.clock.now
            # rabbit_amqqueue:assert_equivalence: exclusivity is checked strictly and first,
            # so an exclusive-flag mismatch is 405, not 406
            self.check_exclusive_access(existing, owner if exclusive else None, strict=True)
            check_queue_equivalent(self.name, existing, durable, auto_delete, arguments)
            return existing
        if is_stream(arguments):  # RabbitMQ's stream rules (model/stream_args.py)
            check_stream_declare(name, self.name, durable, exclusive, auto_delete, arguments)
        if not name:
            name = generated_name("amq.gen-")
        elif name.startswith("amq."):
            raise access_refused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        limit = self.max_queues  # a spread vhost's: its queues on every worker (`remote`)
        if limit is not None and limit >= 0 and len(self.queues) + len(self.remote) >= limit:
            raise precondition_failed(  # RabbitMQ 3.10.8's text
                f"cannot declare queue '{name}': queue limit in vhost '{self.name}' ({limit}) "
                "is reached"
            )
        if self.replica is not None and not exclusive:
            elsewhere = self._place_elsewhere(name, durable, auto_delete, arguments)
            if elsewhere is not None:
                return elsewhere
        try:
            queue = self.new_queue(
                name, durable, owner if exclusive else None, auto_delete, arguments
            )
        except InvalidQueueArgument as exc:
            raise precondition_failed(
                f"invalid arg '{exc.name}' for queue '{name}' in vhost '{self.name}': {exc.problem}"
            ) from exc
        if queue.settings.queue_type == "quorum":
            check_quorum_declare(self.name, name, durable, exclusive, auto_delete, arguments)
        self.queues[name] = queue
        if self.replica is not None:
            self.replica.changed(self.name, queue_change(queue, self.replica.worker))
        if queue.policy is not None:
            self.federate(queue)
        self.churn.queues_created += 1
        self.topology.value += 1
        if exclusive:
            assert owner is not None, "an exclusive queue needs an owner"
            owner.exclusive_queues.append(queue)
        elif durable and self.journal is not None:
            self.attach_store(queue)
            self.journal.put_queue(QueueDef(self.name, name, auto_delete, arguments))
        return queue

    def _place_elsewhere(
        self, name: str, durable: bool, auto_delete: bool, arguments: dict[str, Any]
    ) -> RemoteQueue | None:
        """A new shared queue of a spread vhost whose locator balances and that another
        worker should own: its stub here (that worker makes it when the change arrives);
        None to make it here (model/replica.py).

        Raises:
            AMQPError: 406 for a bad x- argument (checked here, as the owner would).
        """
        replica = self.replica
        assert replica is not None
        policy = select(self.policies, "queue", name)
        if not balanced(arguments, None if policy is None else policy.definition):
            return None
        owner = least_loaded(replica.worker, replica.workers, len(self.queues), self.remote)
        if owner == replica.worker:
            return None
        try:
            stub = RemoteQueue(name, self.name, owner, durable, False, auto_delete, arguments)
            stub.port = self.consuming
        except InvalidQueueArgument as exc:
            raise precondition_failed(
                f"invalid arg '{exc.name}' for queue '{name}' in vhost '{self.name}': {exc.problem}"
            ) from exc
        self.remote[name] = stub
        self.churn.queues_declared += 1
        self.topology.value += 1
        replica.changed(self.name, queue_change(stub, owner))
        return stub

    def new_queue(
        self,
        name: str,
        durable: bool,
        owner: ExclusiveOwner | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> Queue:
        """A queue wired to this vhost's clock, dead-lettering and timers (not registered).

        Raises:
            InvalidQueueArgument: a bad x- argument.
        """
        if is_stream(arguments):
            stream = new_stream_queue(
                name,
                self.name,
                arguments,
                self.stream_logs,
                self.clock,
                self.watch_queues,
                self.dirty_streams,
            )
            stream = with_stream_dedup(stream)  # x-message-deduplication (model/stream_dedup.py)
            if self.policies or self.operator_policies:
                self._apply_queue_policy(stream)  # max-age, max-length-bytes, segment size
            return stream
        queue = Queue(name, self.name, durable, owner, auto_delete, arguments, self.clock)
        queue.watch_set = self.watch_queues
        queue.dead_letter_counts = self.dead_letters
        if queue.settings.dead_letter_exchange is not None:
            queue.dead_letter = self.dead_letter
        if queue.settings.expires is not None:
            queue.watch()
            self.clock.wake(self.clock.now + queue.settings.expires / 1000)
        if self.policies or self.operator_policies:
            self._apply_queue_policy(queue)
        return queue

    # -- policies (model/policies.py) ------------------------------------------------------
    def apply_policies(self) -> None:
        """Re-evaluate which policy applies to every queue and exchange (they changed)."""
        self.topology.value += 1
        for queue in list(self.queues.values()):
            if not queue.deleted:
                self._apply_queue_policy(queue)
        for exchange in self.exchanges.values():
            self._apply_exchange_policy(exchange)

    def _apply_queue_policy(self, queue: Queue) -> None:
        policy, operator, settings = queue_policy(
            queue.name,
            queue.settings.queue_type,
            queue.arguments,
            self.policies,
            self.operator_policies,
        )
        queue.policy, queue.operator_policy = policy, operator
        if settings != queue.settings or queue.settings.queue_type == "stream":
            has_dlx = settings.dead_letter_exchange is not None
            queue.dead_letter = self.dead_letter if has_dlx else None
            queue.reconfigure(settings)
        self.federate(queue)

    def federate(self, queue: Queue) -> None:
        """Tell the broker's federation tracker whether ``queue``'s policy federates it
        (registered queues only: never a reply-to pseudo-queue or a refused declaration)."""
        if self.federation is not None and self.queues.get(queue.name) is queue:
            policy = queue.policy
            self.federation.policy_applied(
                queue, policy is not None and federation_policy_key(policy.definition) is not None
            )

    def _apply_exchange_policy(self, exchange: Exchange) -> None:
        if exchange.is_default:
            return
        exchange.policy = select(self.policies, "exchange", exchange.name)
        exchange.alternate = alternate_exchange(exchange.arguments, exchange.policy)

    def attach_store(self, queue: Queue) -> None:
        """Make a durable queue journal its persistent messages (and page long tails)."""
        queue.journal = self.journal
        queue.pager = self.body_loader
        queue.paging_set = self.paging_queues
        queue.store_progress = self.store_progress

    def check_exclusive_access(
        self, queue: Queue, connection: ExclusiveOwner | None, strict: bool = False
    ) -> None:
        """405 RESOURCE_LOCKED if another connection owns this exclusive queue; ``strict``
        (redeclare): also unless the owner is exactly ``connection`` (None = not exclusive)."""
        owner = queue.exclusive_owner
        if owner is not connection and (strict or owner is not None):
            raise AMQPError(
                RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{queue.name}' "
                f"in vhost '{self.name}'. It could be originally declared on another "
                "connection or the exclusive property value does not match that of the "
                "original declaration.",
            )

    def delete_queue(self, queue: Queue) -> int:
        """Remove a queue, its bindings and consumers; return its ready-message count."""
        if queue.deleted:
            return 0
        count = queue.message_count
        self.churn.queues_deleted += 1
        if queue.journal is not None:
            queue.journal.delete_queue(self.name, queue.name)  # cascades messages, bindings
        queue.deleted = True
        self.queues.pop(queue.name, None)
        self.topology.value += 1
        self._unbind_destination(queue)
        queue.purge()
        for consumer in list(queue.consumers):
            consumer.channel.cancel_by_broker(consumer)
        queue.consumers.clear()
        if self.replica is not None:
            change = ("queue-delete", queue.name, self.replica.worker)
            self.replica.changed(self.name, change)
        return count

    def delete_remote_queue(self, stub: RemoteQueue) -> None:
        """queue.delete of a queue another worker owns: the stub goes here, the queue on
        its owner (and the other stubs) once the change reaches them."""
        self.drop_remote(stub)
        if self.replica is not None:
            self.replica.changed(self.name, ("queue-delete", stub.name, stub.worker))

    def purge_remote_queue(self, stub: RemoteQueue) -> None:
        """queue.purge of a queue another worker owns: purged there when the change
        arrives."""
        if self.replica is not None:
            self.replica.changed(self.name, ("purge", stub.name))

    def drop_remote(self, stub: RemoteQueue) -> None:
        """Forget the stub of a queue another worker owns, and its bindings."""
        if self.remote.get(stub.name) is stub:
            del self.remote[stub.name]
        stub.deleted = True
        self.topology.value += 1
        self._unbind_destination(stub)

    def delete_everything(self) -> None:
        """The vhost itself is deleted: drop every queue and (non-standard) exchange, with
        their bindings, journaling what was stored."""
        for queue in list(self.queues.values()):
            self.delete_queue(queue)
        for stub in list(self.remote.values()):
            self.drop_remote(stub)
        for exchange in list(self.exchanges.values()):
            if not _is_standard(exchange.name) and exchange.name in self.exchanges:
                self._remove_exchange(exchange)

    # -- bindings --------------------------------------------------------------------------
    def bind(
        self, source: Exchange, destination: Destination, key: str, arguments: dict[str, Any]
    ) -> None:
        """Add a binding (idempotent)."""
        if source.is_default or (isinstance(destination, Exchange) and destination.is_default):
            raise access_refused("operation not permitted on the default exchange")
        try:
            source.router.validate_binding(key, arguments)
        except InvalidBinding as exc:
            raise precondition_failed(str(exc)) from exc
        if source.router.bind(destination, key, arguments):
            self.topology.value += 1
            sources = self._bound_from.setdefault(destination, {})
            sources[source] = sources.get(source, 0) + 1
            binding = self._binding_def(source, destination, key, arguments)
            if binding is not None and self.journal is not None:
                self.journal.put_binding(binding)
            if self.replica is not None:
                change = binding_change("bind", source, destination, key, arguments)
                self.replica.changed(self.name, change)

    def unbind(
        self, source: Exchange, destination: Destination, key: str, arguments: dict[str, Any]
    ) -> None:
        """Remove a binding (a missing binding is not an error, as in RabbitMQ 3.x)."""
        if source.is_default or (isinstance(destination, Exchange) and destination.is_default):
            raise access_refused("operation not permitted on the default exchange")
        if source.router.unbind(destination, key, arguments):
            self.topology.value += 1
            binding = self._binding_def(source, destination, key, arguments)
            if binding is not None and self.journal is not None:
                self.journal.delete_binding(binding)
            if self.replica is not None:
                change = binding_change("unbind", source, destination, key, arguments)
                self.replica.changed(self.name, change)
            sources = self._bound_from.get(destination)
            if sources is not None:
                remaining = sources.get(source, 1) - 1
                if remaining > 0:
                    sources[source] = remaining
                else:
                    sources.pop(source, None)
                    if not sources:
                        del self._bound_from[destination]
            self._maybe_auto_delete(source)

    def _binding_def(
        self, source: Exchange, destination: Destination, key: str, arguments: dict[str, Any]
    ) -> BindingDef | None:
        """The stored form of a binding, or None if it does not survive a restart (RabbitMQ:
        only bindings between durable exchanges and durable queues/exchanges persist)."""
        if not source.durable:
            return None
        if isinstance(destination, Queue):
            if destination.journal is None:
                return None
            return BindingDef(self.name, source.name, "queue", destination.name, key, arguments)
        if not destination.durable:
            return None
        return BindingDef(self.name, source.name, "exchange", destination.name, key, arguments)

    def restore_binding(
        self, source: Exchange, destination: Destination, key: str, arguments: dict[str, Any]
    ) -> None:
        """Re-create a binding read from the store (not journaled again)."""
        if source.router.bind(destination, key, arguments):
            sources = self._bound_from.setdefault(destination, {})
            sources[source] = sources.get(source, 0) + 1

    def _unbind_destination(self, destination: Destination) -> None:
        for source in self._bound_from.pop(destination, ()):
            self.topology.value += 1
            source.router.unbind_all(destination)
            self._maybe_auto_delete(source)

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not len(exchange.router) and exchange.name in self.exchanges:
            self._remove_exchange(exchange)

    # -- dead-lettering (model/deadletter.py) ----------------------------------------------
    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish a message that left ``queue`` unacked to its dead-letter exchange, with
        RabbitMQ's x-death headers; dropped if that exchange does not exist or for target
        queues that would close an automatic cycle."""
        settings = queue.settings
        assert settings.dead_letter_exchange is not None
        exchange = self.exchanges.get(settings.dead_letter_exchange)
        if exchange is None:
            return
        fixed_key = settings.dead_letter_routing_key
        dead, deaths = dead_lettered_message(
            message, queue.name, reason, exchange.name, fixed_key, self.clock.now
        )
        targets = (
            self._route_key(exchange, dead, dead.routing_key)
            if fixed_key is not None
            else self.route(exchange, dead)
        )
        if self.remote and has_remote(targets):
            targets = self._forward_elsewhere(dead, targets)
        for target in targets:
            if not is_cycle(deaths, target.name):
                target.enqueue(dead)
