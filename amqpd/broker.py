"""The root object of the broker core: configuration, users, virtual hosts, connections.

With a store, the broker owns the `Journal` every durable change goes into, and the map of
storage batches to the channels waiting for them (confirms, tx.commit-ok). The shell's
group committer reports each batch back through `batch_committed` / `batch_failed`.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amqpd.codec import HeaderPeek, encode_shortstr, peek_header
from amqpd.message import Message, QueueEntry
from amqpd.queue import BodyLoader, Queue
from amqpd.vhost import Exchange, VirtualHost
from persistence.journal import Journal
from persistence.records import RecoveredState

if TYPE_CHECKING:
    from amqpd.channel import Channel
    from amqpd.connection import Connection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BrokerConfig:
    """Protocol limits and identities. Defaults are RabbitMQ's."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024
    handshake_timeout: float = 10.0
    users: dict[str, str] = field(default_factory=lambda: {"guest": "guest"})
    vhosts: tuple[str, ...] = ("/",)


class Broker:
    """Shared state of all connections (sans-IO: no sockets, no clock, no awaits)."""

    def __init__(self, config: BrokerConfig | None = None, journal: Journal | None = None) -> None:
        self.config = config or BrokerConfig()
        self.journal = journal
        self.vhosts: dict[str, VirtualHost] = {}
        self.paging_queues: set[Queue] = set()
        for name in self.config.vhosts:
            vhost = VirtualHost(name)
            vhost.journal = journal
            vhost.paging_queues = self.paging_queues
            self.vhosts[name] = vhost
        self.connections: set[Connection] = set()
        self._batch_waiters: dict[int, dict[Channel, None]] = {}
        self.blocked_reason: str | None = None  # set while the store is failing

    @property
    def default_vhost(self) -> VirtualHost:
        """The first configured vhost (a placeholder until Connection.Open picks one)."""
        return next(iter(self.vhosts.values()))

    def authenticate(self, user: str, password: str) -> bool:
        """Check a login (constant-time comparison; same answer for unknown users)."""
        expected = self.config.users.get(user)
        candidate = password.encode()
        if expected is None:
            hmac.compare_digest(candidate, candidate)
            return False
        return hmac.compare_digest(candidate, expected.encode())

    def connection_opened(self, connection: Connection) -> None:
        """A connection finished its handshake."""
        self.connections.add(connection)

    def connection_released(self, connection: Connection) -> None:
        """A connection is closing or gone: drop its exclusive queues."""
        self.connections.discard(connection)
        vhost = connection.vhost
        for queue in connection.exclusive_queues:
            vhost.delete_queue(queue)
        connection.exclusive_queues.clear()

    # -- storage batches -----------------------------------------------------------------
    def set_body_loader(self, loader: BodyLoader) -> None:
        """Let durable queues page bodies out to the store and read them back."""
        for vhost in self.vhosts.values():
            vhost.body_loader = loader
            for queue in vhost.queues.values():
                if queue.journal is not None:
                    queue.pager = loader

    def wait_for_batch(self, batch: int, channel: Channel) -> None:
        """``channel`` has confirms or a commit-ok waiting for storage batch ``batch``."""
        waiters = self._batch_waiters.get(batch)
        if waiters is None:
            self._batch_waiters[batch] = waiters = {}
        waiters[channel] = None

    def batch_committed(self, batch: int) -> None:
        """The group committer wrote ``batch``: release confirms and commit-oks."""
        if self.blocked_reason is not None:
            self.set_blocked(None)
        for channel in self._batch_waiters.pop(batch, ()):
            channel.batch_committed(batch)
        if self.paging_queues:
            for queue in list(self.paging_queues):
                if not queue.page_out(batch):
                    self.paging_queues.discard(queue)

    def batch_failed(self, batch: int, error: Exception) -> None:
        """The group committer could not write ``batch``: nack what waited for it and tell
        publishers (connection.blocked) until a later batch commits again."""
        log.error(
            "storage batch %d failed: %s; publishers are blocked until it recovers", batch, error
        )
        self.set_blocked(f"storage failure: {error}"[:255])
        for channel in self._batch_waiters.pop(batch, ()):
            channel.batch_failed(batch, error)

    def set_blocked(self, reason: str | None) -> None:
        """Send connection.blocked (reason) or connection.unblocked (None) to every client
        that announced the connection.blocked capability."""
        if reason == self.blocked_reason:
            return
        self.blocked_reason = reason
        for connection in self.connections:
            connection.notify_blocked(reason)

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
        queue_count = 0
        for q in state.queues:
            vhost = self._vhost_for(q.vhost)
            if vhost is None:
                continue
            queue = Queue(q.name, q.vhost, True, None, q.auto_delete, dict(q.arguments))
            vhost.attach_store(queue)
            vhost.queues[q.name] = queue
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
        message_count = 0
        for (vhost_name, queue_name), records in state.messages.items():
            vhost = self._vhost_for(vhost_name)
            found = vhost.queues.get(queue_name) if vhost is not None else None
            if found is None:
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
                message.refs = 1
                entry = QueueEntry(message, seq)
                entry.stored = True
                entry.redelivered = record.redelivered
                entry.delivery_count = record.delivery_count
                queue.ready.append(entry)
                queue.ready_bytes += message.body_size
            if records:
                queue.next_seq = records[-1][0] + 1
            message_count += len(records)
        return queue_count, message_count

    def _vhost_for(self, name: str) -> VirtualHost | None:
        vhost = self.vhosts.get(name)
        if vhost is None:
            log.warning("store holds vhost %r, which is not configured; its data is kept", name)
        return vhost
