"""The root object of the broker core: configuration, users, virtual hosts, connections.

With a store, the broker owns the journal (`JournalPort`) every durable change goes into,
and the record of which storage batch each confirm and tx.commit-ok waits for
(`BatchWaits`). The shell's group committer reports each batch back through
`batch_committed` / `batch_failed`. Connections are `ClientHandle`s (below): the model
never imports the engine.

Time is passed in: ``now`` (unix seconds) at construction, then through `tick` and the
engine's entry points, which set the one `Clock` queues and vhosts read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from amqpd.model.alarms import ResourceAlarms
from amqpd.model.auth import AccessControl, AccessState, Authz, Permission, default_access
from amqpd.model.batches import BatchWaits
from amqpd.model.delayed import STORE_PREFIX, DelayedHub
from amqpd.model.exchange import Exchange, TopologyVersion
from amqpd.model.federated_queues import FederatedQueues
from amqpd.model.held import StoreProgress, drop_failed
from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.paging import page_out
from amqpd.model.queue import ExclusiveOwner, Queue
from amqpd.model.statistics import NodeStatistics
from amqpd.model.stream import StreamLogs, StreamQueue
from amqpd.model.stream_dedup import rebuild_stream_window
from amqpd.model.vhost import VirtualHost
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import HeaderPeek, peek_header
from amqpd.wire.errors import CONNECTION_FORCED
from persistence.records import QueueKey, RecoveredState

if TYPE_CHECKING:
    from amqpd.model.ports import BodyLoader, JournalPort
    from amqpd.model.replica import ReplicaPort

log = logging.getLogger(__name__)


class ClientHandle(ExclusiveOwner, Protocol):
    """What the broker needs of an open client connection (the engine's Connection)."""

    user: str
    vhost: VirtualHost
    authz: Authz

    def close(self, reply_code: int, reply_text: str) -> None:
        """Close the connection from the broker's side (Connection.Close)."""
        ...

    def resources_available(self) -> None:
        """Every resource alarm cleared: the connection may be read again."""
        ...


class OtherWorkersChannels(Protocol):
    """With several workers, a user's channels on the other workers (its max-channels limit
    holds for the node, model/user_limits.py; amqpd/shell/workers/channel_tally.py)."""

    def elsewhere(self, user: str) -> int:
        """How many channels ``user`` has open on the other workers."""
        ...

    def changed(self, user: str) -> None:
        """``user`` opened or closed a channel here."""
        ...


@dataclass(slots=True)
class BrokerConfig:
    """Protocol limits and identities. Defaults are RabbitMQ's."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024
    handshake_timeout: float = 10.0
    vhosts: tuple[str, ...] = ("/",)  # a memory-only broker's vhosts (a store has its own)
    loopback_users: tuple[str, ...] = ("guest",)  # may only connect from 127/8 or ::1
    connection_max: int | None = None  # open connections on the broker; None: unlimited
    memory_high_watermark: int | None = None  # bytes; None: no memory alarm
    disk_free_limit: int | None = None  # bytes; None: no disk alarm
    write_ahead_limit: int = 4 * 1024 * 1024  # unflushed output before deliveries pause
    auth_mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")  # RabbitMQ's; EXTERNAL if listed
    server_properties: tuple[tuple[str, str], ...] = ()  # Connection.Start overrides


class Broker:
    """Shared state of all connections (sans-IO: no sockets, no clock, no awaits)."""

    def __init__(
        self,
        config: BrokerConfig | None = None,
        journal: JournalPort | None = None,
        now: float = 0.0,
    ) -> None:
        self.config = config or BrokerConfig()
        self.journal = journal
        self.vhosts: dict[str, VirtualHost] = {}
        self.paging_queues: set[Queue] = set()
        self.delayed_hub = DelayedHub()  # x-delayed-message exchanges (model/delayed.py)
        self.federated_queues = FederatedQueues()  # what federation links must follow
        self.clock = Clock(now)  # unix time, advanced by tick(now) and the engine's input
        self.body_loader: BodyLoader | None = None
        self.stream_logs: StreamLogs | None = None  # the shell's (model/stream.py)
        self.dirty_streams: set[StreamQueue] | None = set() if journal is not None else None
        self.statistics = NodeStatistics()  # node-wide message totals and rates
        self.topology = TopologyVersion()  # bumped by every topology change (model/vhost.py)
        self.store_progress = StoreProgress()  # promised messages wait for it (model/held.py)
        # the links a spread vhost's changes and publishes go out on (model/replica.py)
        self.replica_of: Callable[[str], ReplicaPort | None] | None = None
        for name in self.config.vhosts:
            self.add_vhost(name)
        self.access = AccessControl(default_access(self.config.vhosts), self.config.loopback_users)
        self.alarms = ResourceAlarms(self.config.memory_high_watermark, self.config.disk_free_limit)
        self.vhost_connections: dict[str, int] = {}
        self.connections: set[ClientHandle] = set()
        self.batch_waits = BatchWaits()  # what confirms and tx.commit-oks wait for
        self.reply_queues: dict[str, Queue] = {}  # direct reply-to addresses -> pseudo-queue
        self._no_vhost = VirtualHost("")  # never registered: there may be no vhost at all
        # With several workers, which vhosts of the access state this process holds (the
        # others live on other workers, amqpd/shell/workers/placement.py); None: all of them
        self.hosts: Callable[[str], bool] | None = None
        self.other_workers: OtherWorkersChannels | None = None  # and their users' channels

    @property
    def default_vhost(self) -> VirtualHost:
        """A placeholder until Connection.Open picks the connection's vhost."""
        return next(iter(self.vhosts.values()), self._no_vhost)

    @property
    def cluster_name(self) -> str:
        """RabbitMQ's cluster name: the global parameter ``cluster_name`` if one is set
        (``PUT /api/cluster-name``, definitions), else the node name. Connection.Start
        announces it and federation uses it (x-received-from, loop detection)."""
        name = self.access.state.global_parameters.get("cluster_name")
        return name if isinstance(name, str) and name else self.statistics.node

    # -- vhosts and access control (amqpd/auth.py) -----------------------------------------
    def add_vhost(self, name: str) -> VirtualHost:
        """The vhost called ``name``, created (empty) if it does not exist."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = VirtualHost(name)
            vhost.clock = self.clock
            vhost.churn = self.statistics.churn
            vhost.topology = self.topology
            vhost.dead_letters = self.statistics.dead_letters
            vhost.journal = self.journal
            vhost.paging_queues = self.paging_queues
            vhost.store_progress = self.store_progress
            vhost.federation = self.federated_queues
            vhost.body_loader = self.body_loader
            vhost.stream_logs, vhost.dirty_streams = self.stream_logs, self.dirty_streams
            vhost.delayed_hub = self.delayed_hub
            if self.replica_of is not None:
                replica = vhost.replica = self.replica_of(name)
                vhost.consuming = None if replica is None else replica.consuming
            self.vhosts[name] = vhost
        return vhost

    def load_access(self, state: AccessState) -> None:
        """Adopt stored access definitions: their vhosts replace the configured ones (call
        before `recover`, while the vhosts are still empty)."""
        self.access.state = state
        for name in list(self.vhosts):
            if not self._holds(name):
                del self.vhosts[name]
        for name in state.vhosts:
            if self._holds(name):
                self.add_vhost(name)
        self.install_policies()

    def _holds(self, name: str) -> bool:
        """Whether the vhost ``name`` of the access state lives in this process."""
        hosts = self.hosts
        return name in self.access.state.vhosts and (hosts is None or hosts(name))

    def replace_access(self, state: AccessState) -> None:
        """Adopt changed access definitions while clients are connected, as RabbitMQ does:
        a deleted vhost is deleted with everything in it and its connections are closed
        (320 "vhost 'v' is down"); a deleted user's connections are closed (320 "user 'u'
        is deleted"); everyone else's permissions change at once, on open channels too
        (no permissions left: every check refuses with 403). New vhosts are created."""
        self.access.state = state
        for name in [name for name in self.vhosts if not self._holds(name)]:
            self.delete_vhost(name)
        for name in state.vhosts:
            if self._holds(name):
                self.add_vhost(name)
        self.install_policies()
        for connection in list(self.connections):
            user = connection.user
            if not self.access.is_user(user):
                connection.close(CONNECTION_FORCED, f"CONNECTION_FORCED - user '{user}' is deleted")
                continue
            vhost = connection.vhost.name
            authz = self.access.authz(user, vhost)
            connection.authz = authz or Authz(user, vhost, Permission("", "", ""))

    def install_policies(self) -> None:
        """Give each vhost its policies from the access state; where they changed, every
        queue and exchange of the vhost is re-evaluated at once (model/policies.py)."""
        state = self.access.state
        for name, vhost in self.vhosts.items():
            info = state.vhosts.get(name)
            vhost.max_queues = None if info is None else info.max_queues  # a vhost limit
            policies = [p for p in state.policies.values() if p.vhost == name]
            operator = [p for p in state.operator_policies.values() if p.vhost == name]
            if policies != vhost.policies or operator != vhost.operator_policies:
                vhost.policies, vhost.operator_policies = policies, operator
                vhost.apply_policies()

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost: close its connections, drop its queues and exchanges (journaled)."""
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return
        for connection in list(self.connections):
            if connection.vhost is vhost:
                connection.close(CONNECTION_FORCED, f"CONNECTION_FORCED - vhost '{name}' is down")
        vhost.replica = None  # every worker deletes its own part
        vhost.delete_everything()
        self.vhost_connections.pop(name, None)
        log.info("deleted vhost %r", name)

    def connection_limit_error(self, vhost: str, refused: str) -> str | None:
        """Why one more connection to ``vhost`` is refused (RabbitMQ's wording; ``refused``
        is the "access to vhost … refused for user …" prefix), or None."""
        limit = self.config.connection_max
        if limit is not None and len(self.connections) >= limit:
            return f"connection refused: node connection limit ({limit}) is reached"
        info = self.access.state.vhosts.get(vhost)
        vhost_limit = None if info is None else info.max_connections
        if (
            vhost_limit is not None
            and vhost_limit >= 0
            and self.vhost_connections.get(vhost, 0) >= vhost_limit
        ):
            return f"{refused}: connection limit ({vhost_limit}) is reached"
        return None

    # -- resource alarms (amqpd/alarms.py) -------------------------------------------------
    def memory_used(self, used: int) -> None:
        """The shell's measurement of the broker's memory (bytes)."""
        if self.alarms.memory_used(used):
            self._alarms_changed()

    def disk_free(self, free: int) -> None:
        """The shell's measurement of the data directory's free space (bytes)."""
        if self.alarms.disk_free(free):
            self._alarms_changed()

    def _alarms_changed(self) -> None:
        if not self.alarms.active:
            for connection in list(self.connections):
                connection.resources_available()

    def connection_opened(self, connection: ClientHandle) -> None:
        """A connection finished its handshake."""
        self.connections.add(connection)
        self.statistics.churn.connections_opened += 1
        name = connection.vhost.name
        self.vhost_connections[name] = self.vhost_connections.get(name, 0) + 1

    def connection_released(self, connection: ClientHandle) -> None:
        """A connection is closing or gone: drop its exclusive queues."""
        if connection in self.connections:
            self.connections.discard(connection)
            self.statistics.churn.connections_closed += 1
            name = connection.vhost.name
            self.vhost_connections[name] -= 1
        vhost = connection.vhost
        for queue in connection.exclusive_queues:
            vhost.delete_queue(queue)
        connection.exclusive_queues.clear()

    def reply_queue(self, address: str) -> list[Queue]:
        """The pseudo-queue behind a direct reply-to address (empty if it is gone)."""
        queue = self.reply_queues.get(address)
        return [queue] if queue is not None else []

    def tick(self, now: float) -> None:
        """Run queue timers: message TTL expiry and x-expires deletion of unused queues,
        then announce each watched queue's next deadline on the clock (`Clock.wake`).

        One queue's failure (a bug: storage errors are contained by the queue itself) is
        logged and the others still run; it must not take the broker down."""
        clock = self.clock
        clock.now = now
        for vhost in list(self.vhosts.values()):
            watched = vhost.watch_queues
            for queue in list(watched):
                try:
                    if queue.deleted:
                        watched.discard(queue)
                    elif queue.tick():
                        vhost.delete_queue(queue)
                        watched.discard(queue)
                    elif not queue.needs_ticks:
                        watched.discard(queue)
                    else:
                        deadline = queue.next_deadline()
                        if deadline is not None and deadline > now:  # not yet due; a due
                            clock.wake(deadline)  # one it could not act on (an unreadable
                            # body) is retried by the periodic tick, not in a busy loop
                except Exception:
                    log.exception("timers of %r failed", queue)
        if self.delayed_hub.pending:
            self.delayed_hub.tick(now)

    # -- storage batches -----------------------------------------------------------------
    def set_body_loader(self, loader: BodyLoader) -> None:
        """Let durable queues page bodies out to the store and read them back."""
        self.body_loader = loader
        for vhost in self.vhosts.values():
            vhost.body_loader = loader
            for queue in vhost.queues.values():
                if queue.journal is not None:
                    queue.pager = loader
            for exchange in vhost.exchanges.values():
                if exchange.delayed is not None and exchange.delayed.journal is not None:
                    exchange.delayed.pager = loader

    def set_stream_logs(self, logs: StreamLogs) -> None:
        """Where streams keep their logs (call before `recover`)."""
        self.stream_logs = logs
        for vhost in self.vhosts.values():
            vhost.stream_logs = logs

    def batch_committed(self, batch: int) -> None:
        """The group committer wrote ``batch``: release confirms and commit-oks, then the
        promised messages that waited for it (model/held.py)."""
        if self.alarms.store_failing and self.alarms.store_written():
            self._alarms_changed()
        self.batch_waits.committed(batch)
        for waiting in self.store_progress.release(batch):
            if not waiting.deleted:
                waiting.dispatch()
        if self.paging_queues:
            for queue in list(self.paging_queues):
                if not page_out(queue, batch):
                    self.paging_queues.discard(queue)
        if self.delayed_hub.paging:
            self.delayed_hub.batch_committed(batch)

    def batch_failed(self, batch: int, error: Exception, queues: Iterable[QueueKey] = ()) -> None:
        """The group committer could not write ``batch`` (``queues``: those it inserted
        messages into): take its promised messages out of those queues before anyone gets
        them, nack their publishers (fail the tx.commits), and raise the disk alarm until
        a batch commits again (model/alarms.py)."""
        dropped = 0
        for vhost_name, name in queues:
            vhost = self.vhosts.get(vhost_name)
            queue = vhost.queues.get(name) if vhost is not None else None
            if queue is not None:
                dropped += drop_failed(queue, batch)
        if self.alarms.store_failing:
            log.info("storage batch %d failed too (%d messages dropped): %s", batch, dropped, error)
        else:
            log.error(
                "storage batch %d failed: %s; its %d unconfirmed messages are dropped and "
                "publishers nacked",
                batch,
                error,
                dropped,
            )
        if self.alarms.store_failed(str(error)):
            self._alarms_changed()
        self.batch_waits.failed(batch, error)
        for waiting in self.store_progress.release(batch):
            if not waiting.deleted:
                waiting.dispatch()

    # -- recovery ------------------------------------------------------------------------
    def recover(self, state: RecoveredState) -> tuple[int, int]:
        """Rebuild durable exchanges, queues, bindings and messages read from the store.

        Returns:
            (queues, messages) recovered.
        """
        for ex in state.exchanges:
            vhost = self._vhost_for(ex.vhost)
            if vhost is not None and ex.name not in vhost.exchanges:
                vhost.exchanges[ex.name] = Exchange(
                    ex.name, ex.type_name, True, ex.auto_delete, ex.internal, dict(ex.arguments)
                )
                vhost.attach_delayed(vhost.exchanges[ex.name])
        queue_count = 0
        for q in state.queues:
            vhost = self._vhost_for(q.vhost)
            if vhost is None or q.name.startswith(STORE_PREFIX):  # a delayed exchange's
                continue
            queue = vhost.new_queue(q.name, True, None, q.auto_delete, dict(q.arguments))
            vhost.attach_store(queue)
            vhost.queues[q.name] = queue
            vhost.federate(queue)
            queue_count += 1
        for b in state.bindings:
            vhost = self._vhost_for(b.vhost)
            if vhost is None:
                continue
            source = vhost.exchanges.get(b.source)
            destination: Queue | Exchange | None = (
                vhost.queues.get(b.destination)
                if b.destination_kind == "queue"
                else vhost.exchanges.get(b.destination)
            )
            if source is not None and destination is not None:
                vhost.restore_binding(source, destination, b.routing_key, dict(b.arguments))
        for vhost in self.vhosts.values():
            vhost.apply_policies()  # recovered exchanges (queues got theirs when created)
        message_count = 0
        for (vhost_name, queue_name), keys in state.message_keys.items():
            vhost = self._vhost_for(vhost_name)
            held_by = vhost.exchanges.get(queue_name[len(STORE_PREFIX) :]) if vhost else None
            if held_by is not None and held_by.delayed is not None:  # x-delayed-message
                message_count += held_by.delayed.restore_keys(keys)
        for (vhost_name, queue_name), records in state.messages.items():
            vhost = self._vhost_for(vhost_name)
            found = vhost.queues.get(queue_name) if vhost is not None else None
            if found is None:
                held_by = vhost.exchanges.get(queue_name[len(STORE_PREFIX) :]) if vhost else None
                if held_by is not None and held_by.delayed is not None:  # x-delayed-message
                    message_count += held_by.delayed.restore(records)
                continue
            queue = found
            shortstrs: dict[str, bytes] = {}  # a million messages share a few names
            peeks: dict[bytes, HeaderPeek] = {}
            for seq, record in records:
                peek = peeks.get(record.header)
                if peek is None:
                    peek = peeks[record.header] = peek_header(record.header)
                exchange_raw = shortstrs.get(record.exchange)
                if exchange_raw is None:
                    exchange_raw = shortstrs[record.exchange] = encode_shortstr(record.exchange)
                key_raw = shortstrs.get(record.routing_key)
                if key_raw is None:
                    key_raw = shortstrs[record.routing_key] = encode_shortstr(record.routing_key)
                paged_out = record.body_size is not None
                message = Message(
                    record.exchange,
                    record.routing_key,
                    exchange_raw,
                    key_raw,
                    record.header,
                    None if paged_out else record.body,
                    True,
                    peek.priority,
                    peek.expiration,
                    peek.headers_raw,
                )
                if record.body_size is not None:
                    message.body_size = record.body_size
                entry = QueueEntry(message, seq)
                entry.stored = True
                entry.redelivered = record.redelivered
                entry.delivery_count = record.delivery_count
                entry.expires_at = record.expires_at
                queue.restore(entry)
            if records:
                queue.next_seq = records[-1][0] + 1
            if queue.max_length is not None or queue.max_length_bytes is not None:
                queue.reconfigure(queue.settings)  # a limit lowered while stopped applies now
            message_count += len(records)
        for (vhost_name, queue_name), ids in state.dedup_ids.items():
            vhost = self._vhost_for(vhost_name)
            deduplicating = vhost.queues.get(queue_name) if vhost is not None else None
            if deduplicating is not None and deduplicating.dedup is not None:
                deduplicating.dedup.restore(ids)
        for vhost in self.vhosts.values():  # ids of appends fsynced before their batch
            for recovered in vhost.queues.values():
                if isinstance(recovered, StreamQueue):
                    rebuild_stream_window(recovered)
        return queue_count, message_count

    def _vhost_for(self, name: str) -> VirtualHost | None:
        vhost = self.vhosts.get(name)
        if vhost is None:
            log.warning("store holds vhost %r, which is not configured; its data is kept", name)
        return vhost
