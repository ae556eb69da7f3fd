"""The I/O shell: an anyio TCP listener driving the sans-IO protocol engine.

Each accepted socket gets two tasks: a reader that feeds every received chunk (up to 64 KiB)
to its `Connection`, and a writer that sleeps until the engine reports output and then sends
everything pending in one write. The engine never calls back: after every piece of input
(a chunk, a tick, a storage batch, an alarm change, an admin command, a lost socket) the
shell calls `after_core`, the one place that wakes the writers of the connections the
engine's `Outbox` lists, resumes readers, and wakes the group committer if the journal has
work. Because the reader processes a whole chunk before it next awaits, all frames produced
for any connection during that chunk go out in one write per connection. One ticker task
drives every timer: it sleeps until the core's next deadline (`Clock.wake_at`) and at most a
tick interval (1 s); `after_core` wakes it early when input brought an earlier deadline.
The core gets the time with its input: unix seconds (``time.time()``), one time base for
heartbeats, TTLs and x-expires alike.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from amqpd.engine import ctl_commands
from amqpd.engine.connection import Connection
from amqpd.engine.outbox import Outbox
from amqpd.engine.rates import SAMPLE_INTERVAL, RateSampler
from amqpd.model import bounded_json
from amqpd.model.admin_commands import AdminError, execute, problems_text
from amqpd.model.alarms import DISK_CHECK_BYTES
from amqpd.model.auth import (
    DEFAULT_HASHING,
    INTERNAL_USER,
    AccessState,
    Permission,
    User,
    hash_password,
)
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.definitions import DefinitionsError, import_definitions
from amqpd.model.delayed import STORE_PREFIX
from amqpd.model.global_parameters import ensure_cluster_id
from amqpd.model.queue import HOT_WINDOW
from amqpd.model.statistics import NodeSample
from amqpd.shell import management, metrics, node_sample, resources
from amqpd.shell.admin_socket import AdminReply, serve_admin
from amqpd.shell.direct_write import transport_of, write_now
from amqpd.shell.http_listener import bind, serve_http
from amqpd.shell.links.client import LocalEndpoint
from amqpd.shell.links.federation import ExchangeFederation
from amqpd.shell.links.federation_status import (
    FederationLinkStatus,
    FederationStatusSource,
    federation_table,
)
from amqpd.shell.links.queue_federation import QueueFederation
from amqpd.shell.links.supervisor import LinkSupervisor, shovel_table
from amqpd.shell.listen_errors import naming
from amqpd.shell.store_io import CountingBodyReader, CountingStore
from amqpd.shell.store_role import LockLost, StoreRole
from amqpd.shell.streams import StreamFiles
from amqpd.shell.tls import TLSOptions, certificate_identity, server_context, tls_failure_reason
from persistence.backend import BodyReaderPort, StoreBackend
from persistence.errors import StoreError
from persistence.group_commit import GroupCommitter
from persistence.journal import Journal
from persistence.records import Batch

log = logging.getLogger(__name__)

READ_SIZE = 65536
SHUTDOWN_GRACE = 2.0
TIMER_SLACK = 0.001  # past a deadline when waking for it (sleep and clock granularity)
TIMER_RESOLUTION = 0.01  # deadline-driven ticks at most this often (messages expiring
# back to back are expired in batches, not one tick each)


@dataclass(slots=True)
class ServerConfig:
    """Where to listen and how often to tick."""

    host: str = "127.0.0.1"
    port: int = 5672
    tick_interval: float = 1.0
    data_dir: Path | None = None  # None: memory only (nothing survives a restart)
    store: str | None = None  # postgresql:// URL (shared, active/standby); None: SQLite in data_dir
    synchronous: str = "FULL"  # SQLite synchronous mode: FULL (durable) or NORMAL (faster)
    tls_port: int | None = None  # AMQPS listener (RabbitMQ: 5671); needs ``tls``
    tls: TLSOptions | None = None
    definitions: Path | None = None  # RabbitMQ definitions JSON imported at startup
    memory_check_interval: float = 0.1  # seconds between memory measurements
    memory_probe: Callable[[], int] = resources.rss_bytes  # bytes the broker uses
    disk_probe: Callable[[Path], int] = resources.disk_free  # free bytes at the data dir
    default_user: tuple[str, str] | None = None  # (name, password) of a new store's admin
    reopen_logs: Callable[[], bool] | None = None  # on SIGHUP; True if a log file reopened
    management_port: int | None = None  # management API + dashboard (RabbitMQ: 15672); None: off
    prometheus_port: int | None = None  # Prometheus /metrics (RabbitMQ: 15692); None: off
    management_host: str | None = None  # management.tcp.ip; None: ``host``
    prometheus_host: str | None = None  # prometheus.tcp.ip; None: ``host``


class _Peer:
    """Shell-side state of one socket."""

    __slots__ = ("backlog", "conn", "done", "resume", "stream", "transport", "wake", "writing")

    def __init__(self, conn: Connection, stream: anyio.abc.ByteStream) -> None:
        self.conn = conn
        self.stream = stream
        self.transport = transport_of(stream)  # None: always write through the writer task
        self.writing = False  # the writer task is inside stream.send
        self.backlog = False  # a direct write left bytes in the transport: writer drains
        self.wake = anyio.Event()
        self.done = anyio.Event()
        self.resume = anyio.Event()  # set when a connection blocked by an alarm may read

    def kick(self) -> None:
        self.wake.set()

    def unpause(self) -> None:
        self.resume.set()


def _journal_of(broker: Broker) -> Journal | None:
    journal = broker.journal
    assert journal is None or isinstance(journal, Journal), "the shell writes SQLite batches"
    return journal


class Server:
    """Owns the listener, the peers and the ticker for one `Broker`."""

    def __init__(self, broker: Broker, config: ServerConfig | None = None) -> None:
        self.broker = broker
        self.config = config or ServerConfig()
        self.port = 0
        self.tls_port = 0
        self.management_port = 0  # bound ports, once serving (0: that listener is off)
        self.prometheus_port = 0
        self._tls_context: ssl.SSLContext | None = None
        self._peers: dict[Connection, _Peer] = {}
        self._outbox: Outbox[Connection] = Outbox()
        self._journal = _journal_of(broker)
        self._stopping = False
        self._committer: GroupCommitter | None = None
        self._store: StoreBackend | None = None
        self._body_reader: BodyReaderPort | None = None
        self._role = StoreRole(self.config.store, self.config.data_dir, self.config.synchronous)
        self._scope: anyio.CancelScope | None = None
        self.lost: LockLost | None = None  # set when this node stopped being the active one
        self.started = time.time()
        self.rates = RateSampler(broker)  # message rates, sampled (amqpd/engine/rates.py)
        self.listeners: list[dict[str, Any]] = []  # RabbitMQ's overview/nodes "listeners"
        self.links: LinkSupervisor | None = None  # the shovels (amqpd/shell/links/)
        self.queue_federation: QueueFederation | None = None  # federated queues' links
        # the federation link supervisors (exchange side, queue side)
        self.federation_sources: list[FederationStatusSource] = []
        self.exchange_federation: ExchangeFederation | None = None  # federated exchanges
        self._clock = broker.clock
        self._federated = broker.federated_queues  # (amqpd/model/federated_queues.py)
        self._ticker_wake: anyio.Event | None = None  # set to re-plan the ticker's sleep
        self._ticker_until = math.inf  # when the sleeping ticker wakes (inf: it is not asleep)
        self._unmeasured = 0  # bytes the store wrote since free disk space was measured
        broker.statistics.node = node_sample.node_name()
        self.streams = StreamFiles(broker, self.config.data_dir)  # amqpd/shell/streams.py
        broker.set_stream_logs(self.streams)

    @property
    def role(self) -> str:
        """standalone (SQLite or memory), standby, active or lost (amqpd/shell/store_role.py)."""
        return self._role.role

    def node_sample(self) -> NodeSample:
        """The process measured now, for the statistics (amqpd/shell/node_sample.py)."""
        sample = node_sample.sample(
            self.broker, self.started, self.config.data_dir, len(self._peers), self.listeners
        )
        sample.role = self._role.role
        return sample

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Recover the store (if any), listen and serve until cancelled or `shutdown` is
        called. Reports the bound port."""
        resources.raise_open_file_limit()
        if self.config.tls is not None:
            self._tls_context = server_context(self.config.tls)
        with anyio.CancelScope() as self._scope:
            try:
                async with anyio.create_task_group() as outer:
                    await self._role.prepare()  # PostgreSQL: data dir lock, connection
                    if self._role.shared and self.config.data_dir is not None:
                        # a standby answers `amqpd ctl status` too
                        await outer.start(serve_admin, self.config.data_dir, self.admin_request)
                    await self._serve_store(await self._open_store(), task_status)
                    outer.cancel_scope.cancel()
            finally:
                self._role.close()
        if self.lost is not None:
            raise self.lost

    async def _serve_store(
        self, store: StoreBackend | None, task_status: anyio.abc.TaskStatus[int]
    ) -> None:
        """Listen and serve with the store open (recovered) until cancelled."""
        self.streams.recovering = False  # streams opened from now on are new ones
        tls_listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        http_sockets: dict[str, socket.socket] = {}
        try:
            await self._import_definitions(store)
            host = self.config.host
            with naming("AMQP", "--port", host, self.config.port):
                listener = await anyio.create_tcp_listener(
                    local_host=host, local_port=self.config.port, reuse_port=False
                )
            self.port = listener.extra(SocketAttribute.local_port)
            tls_listener = None
            if self._tls_context is not None and self.config.tls_port is not None:
                with naming("AMQPS", "--tls-port", host, self.config.tls_port):
                    tls_listener = await anyio.create_tcp_listener(
                        local_host=host, local_port=self.config.tls_port, reuse_port=False
                    )
                self.tls_port = tls_listener.extra(SocketAttribute.local_port)
            http_sockets = self._bind_http()
            self._add_listener("amqp", self.port)
            if tls_listener is not None:
                self._add_listener("amqp/ssl", self.tls_port)
            async with listener, anyio.create_task_group() as group:
                group.start_soon(self._ticker)
                group.start_soon(self._resource_monitor)
                group.start_soon(self._sample_rates)
                if self._committer is not None:
                    group.start_soon(self._committer.run)
                if store is not None and self._role.shared:
                    group.start_soon(self._role.guard, store, self._lock_lost)
                group.start_soon(listener.serve, self._handle, group)
                if tls_listener is not None:
                    group.start_soon(tls_listener.serve, partial(self._handle, tls=True), group)
                    log.info("listening for AMQPS on %s:%d", self.config.host, self.tls_port)
                if store is not None and self.config.data_dir is not None and not self._role.shared:
                    await group.start(serve_admin, self.config.data_dir, self.admin_request)
                await self._serve_http(group, http_sockets)
                self._start_links()
                log.info("listening on %s:%d", self.config.host, self.port)
                task_status.started(self.port)
                await anyio.sleep(math.inf)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_links()
            for sock in http_sockets.values():
                sock.close()  # closed by serve_http already unless serving never started
            if tls_listener is not None:
                with anyio.CancelScope(shield=True):
                    await tls_listener.aclose()
            if store is not None:
                with anyio.CancelScope(shield=True):
                    await self._close_store(store)
            self.streams.close()

    def _start_links(self) -> None:
        """Run the stored shovels; they reach the local broker as the internal user."""
        secret = secrets.token_urlsafe(32)
        self.broker.access.internal_secret = secret
        local = LocalEndpoint(self.config.host, self.port, INTERNAL_USER, secret)
        self.links = LinkSupervisor(
            self.broker, local, self.broker.statistics.node, self._shovel_finished
        )
        self.links.reconcile()
        self.exchange_federation = ExchangeFederation(self.broker, local)
        self.federation_sources.append(self.exchange_federation)
        self.exchange_federation.reconcile()
        self.queue_federation = QueueFederation(self.broker, local)
        self.federation_sources.append(self.queue_federation)
        self.queue_federation.start()

    async def _close_links(self) -> None:
        """Stop the shovels and federation links; what they had not handed over goes back
        to its queue (upstream queues of federated exchanges are kept)."""
        if self.links is not None:
            await self.links.aclose()
        if self.exchange_federation is not None:
            await self.exchange_federation.aclose()
        if self.queue_federation is not None:
            await self.queue_federation.aclose()

    async def _shovel_finished(self, vhost: str, name: str) -> None:
        """A shovel reached src-delete-after: its parameter goes, as in RabbitMQ."""
        request = {"component": "shovel", "vhost": vhost, "name": name}
        await self.admin_request({"group": "parameters", "command": "clear-parameter", **request})

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """The shovels' state, as RabbitMQ's /api/shovels lists it."""
        return [] if self.links is None else self.links.status(vhost)

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]:
        """Every federation link's status (exchange and queue links), of one vhost or all."""
        return [
            item
            for source in self.federation_sources
            for item in source.federation_status()
            if vhost is None or item.vhost == vhost
        ]

    def _bind_http(self) -> dict[str, socket.socket]:
        """Bind the HTTP listeners that are on (so a port in use fails before serving)."""
        config = self.config
        sockets: dict[str, socket.socket] = {}
        try:
            port, host = config.management_port, config.management_host or config.host
            if port is not None:
                with naming("the management API", "--management-port", host, port):
                    sockets["http"] = bind(host, port)
            port, host = config.prometheus_port, config.prometheus_host or config.host
            if port is not None:
                with naming("Prometheus", "--prometheus-port", host, port):
                    sockets["http/prometheus"] = bind(host, port)
        except BaseException:
            for sock in sockets.values():
                sock.close()
            raise
        return sockets

    async def _serve_http(
        self, group: anyio.abc.TaskGroup, sockets: dict[str, socket.socket]
    ) -> None:
        """Start the management API and the Prometheus endpoint on their bound sockets."""
        for protocol, sock in sockets.items():
            host, port = sock.getsockname()[:2]
            if protocol == "http":
                self.management_port = await group.start(
                    serve_http, management.create_app(self), sock
                )
                self._add_listener(protocol, self.management_port, host)
            else:
                self.prometheus_port = await group.start(serve_http, metrics.create_app(self), sock)
                self._add_listener(protocol, self.prometheus_port, host)
            log.info("listening for %s on %s:%d", protocol, host, port)

    def _add_listener(self, protocol: str, port: int, host: str | None = None) -> None:
        self.listeners.append(
            {
                "node": self.broker.statistics.node,
                "protocol": protocol,
                "ip_address": host or self.config.host,
                "port": port,
                "socket_opts": {},
            }
        )

    async def _sample_rates(self) -> None:
        """Turn the counters into rates every SAMPLE_INTERVAL seconds (amqpd/engine/rates.py)."""
        while True:
            try:
                self.rates.sample(time.time())
            except Exception:  # statistics must never take the broker down
                log.exception("sampling statistics failed")
            await anyio.sleep(SAMPLE_INTERVAL)

    def after_core(self) -> None:
        """Act on what the core reported after it was handed input: wake the writer of
        every connection with output (or closing), resume readers the engine unpaused, and
        wake the group committer if the journal has work (the one place that does)."""
        outbox = self._outbox
        peers = self._peers
        while outbox.output:  # a direct write's write_finished may resume deliveries
            for conn in outbox.take_output():
                peer = peers.get(conn)
                if peer is not None:
                    self._flush(peer)
        if outbox.resume:
            for conn in outbox.take_resume():
                peer = peers.get(conn)
                if peer is not None:
                    peer.resume.set()
        committer = self._committer
        if committer is not None and self._journal is not None and self._journal.pending:
            committer.wake()
        federation = self.exchange_federation
        if federation is not None and federation.topology_changed():
            federation.reconcile()  # exchanges, bindings or policies changed
        if self._federated.dirty and self.queue_federation is not None:
            self.queue_federation.follow(self._federated.take())  # demand flips
        if self._clock.wake_at < self._ticker_until:  # the core has an earlier deadline
            self._ticker_until = math.inf
            if self._ticker_wake is not None:
                self._ticker_wake.set()

    @staticmethod
    def _flush(peer: _Peer) -> None:
        """Write the peer's output now if its transport is idle (`direct_write`), else wake
        its writer task."""
        transport = peer.transport
        conn = peer.conn
        if transport is None or peer.writing or peer.backlog or conn.should_close:
            peer.wake.set()
            return
        done = write_now(conn, transport)
        if not done:
            peer.backlog = done is False
            peer.wake.set()

    def _batch_committed(self, batch: Batch) -> None:
        self.broker.batch_committed(batch.id)
        self._unmeasured += batch.size
        if self._unmeasured >= DISK_CHECK_BYTES:  # the free-space check keeps pace with writes
            self._check_disk()
        self.after_core()

    def _batch_failed(self, batch: Batch, error: StoreError) -> None:
        self.broker.batch_failed(batch.id, error, batch.inserted_queues())
        self._check_disk()  # a full disk: the alarm says so at once
        self.after_core()

    def _check_disk(self) -> None:
        """Measure the data directory's free space for the disk alarm (a statvfs call)."""
        self._unmeasured = 0
        data_dir = self.config.data_dir
        if self.broker.alarms.disk_free_limit is None or data_dir is None:
            return
        try:
            self.broker.disk_free(self.config.disk_probe(data_dir))
        except OSError as exc:
            log.warning("cannot measure free disk space: %s", exc)

    async def _lock_lost(self, reason: str) -> None:
        self.lost = LockLost(reason)
        await self.shutdown(reason)

    async def _open_store(self) -> StoreBackend | None:
        journal = self._journal
        if journal is None or (self.config.data_dir is None and not self._role.shared):
            return None
        store = await self._role.open()  # PostgreSQL: once this node is the active one
        started = time.perf_counter()
        try:
            io = self.broker.statistics.store_io  # counted: amqpd/shell/store_io.py
            self._body_reader = CountingBodyReader(store.body_reader(), io)
            self.broker.set_body_loader(self._body_reader)
            access_state = await store.load_access()
            if ensure_cluster_id(access_state):  # RabbitMQ makes it at the first boot
                await store.save_access(access_state)
            if store.created and self.config.default_user is not None:
                access_state = await self._first_user(store, access_state)
            self.broker.load_access(access_state)
            state = await store.load(body_window=HOT_WINDOW, keys_only=STORE_PREFIX)
            queues, messages = self.broker.recover(state)
            del state
        except BaseException:
            await store.close()
            raise
        log.info(
            "recovered %d durable queues and %d persistent messages from %s in %.2f s",
            queues,
            messages,
            store.description,
            time.perf_counter() - started,
        )
        self._committer = GroupCommitter(
            CountingStore(store, self.broker.statistics.store_io),
            journal,
            self._batch_committed,
            self._batch_failed,
            idle=store.reclaim,
            before_apply=self.streams.sync,
        )
        self._store = store
        return store

    async def _first_user(self, store: StoreBackend, state: AccessState) -> AccessState:
        """A new data directory: RabbitMQ's default_user / default_pass replace guest."""
        assert self.config.default_user is not None
        name, password = self.config.default_user
        state.users.pop("guest", None)
        state.permissions.pop(("guest", "/"), None)
        state.users[name] = User(name, hash_password(password), DEFAULT_HASHING, ("administrator",))
        state.permissions[(name, "/")] = Permission()
        await store.save_access(state)
        log.info("created the data directory's first user %r (default_user)", name)
        return state

    async def admin_request(self, request: dict[str, Any]) -> AdminReply:
        """An ``amqpd users|vhosts|definitions`` command from the admin socket: carried out
        on the live broker, then persisted after everything it journaled (a deleted vhost's
        queues) has been committed."""
        if self._role.role != "active" and self._role.shared:
            if request.get("group") == "ctl" and request.get("command") in ("status", "ping"):
                return AdminReply(
                    True, json.dumps(ctl_commands.execute(self.broker, request, self.node_sample()))
                )
            return AdminReply(False, f"this node is {self._role.role}: ask the active node")
        if request.get("command") == "list-shovels":
            return AdminReply(
                True, json.dumps(shovel_table(self.shovel_status(), self.broker.statistics.node))
            )
        if request.get("command") == "list-federation-links":
            node = self.broker.statistics.node
            return AdminReply(True, json.dumps(federation_table(self.federation_status(), node)))
        if request.get("group") == "ctl":  # amqpd ctl: listings, status, close-connection
            try:
                answer = ctl_commands.execute(self.broker, request, self.node_sample())
            except AdminError as exc:
                return AdminReply(False, str(exc))
            finally:
                self.after_core()  # a closed connection's Connection.Close
            return AdminReply(True, json.dumps(answer))
        try:
            outcome = execute(self.broker, request)
        except AdminError as exc:
            return AdminReply(False, str(exc))
        finally:
            self.after_core()  # closed connections, journaled deletions
            if self.links is not None:
                self.links.reconcile()  # shovel parameters may have changed
            if self.exchange_federation is not None:
                self.exchange_federation.reconcile()  # federation: policies, parameters
            if self.queue_federation is not None:
                self.queue_federation.reconcile()  # upstreams, policies may have changed
        log.info("admin: %s %s", request.get("group"), request.get("command"))
        if outcome.changed:
            try:
                await self.save_access()
            except StoreError as exc:
                log.error("admin: could not save access control: %s", exc)
                return AdminReply(
                    False,
                    f"the change is in effect but could not be saved ({exc}); it will be "
                    "lost when the broker restarts unless it is made again",
                )
        if outcome.problems:  # partly applied (and saved): the command still fails
            return AdminReply(False, problems_text(outcome))
        return AdminReply(True, outcome.output)

    async def save_access(self) -> None:
        """Persist the broker's definitions tables (users, vhosts, permissions, policies,
        global parameters) after everything journaled so far has been committed; call it
        after changing them on the live broker (e.g. amqpd/model/policy_admin.py). A
        memory-only broker has nothing to save.

        Raises:
            StoreError: the store failed (the change stays in effect until a restart).
        """
        store, committer = self._store, self._committer
        if store is None or committer is None:
            return
        broker = self.broker
        await committer.commit_then(lambda: store.save_access(broker.access.state))

    async def _import_definitions(self, store: StoreBackend | None) -> None:
        """Import the definitions file (``--definitions``) and persist its access part."""
        path = self.config.definitions
        if path is None:
            return
        try:
            data: Any = bounded_json.loads(await anyio.Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise DefinitionsError(f"cannot read definitions file {path}: {exc}") from exc
        problems: list[str] = []
        counts = import_definitions(self.broker, data, problems)
        for problem in problems:
            log.error("definitions file %s: not applied: %s", path, problem)
        if store is not None:
            await store.save_access(self.broker.access.state)
            if self._committer is not None:
                await self._committer.drain()  # the durable exchanges, queues, bindings
        log.info(
            "imported definitions from %s: %s",
            path,
            ", ".join(f"{count} {section}" for section, count in counts.items()),
        )

    async def _close_store(self, store: StoreBackend) -> None:
        committer = self._committer
        journal = self._journal
        try:
            if committer is not None and self.lost is None:
                await committer.drain()
        finally:
            if self._body_reader is not None:
                self._body_reader.close()
            await store.close()
        if journal is not None:
            stats = journal.stats
            log.info(
                "store closed: %d batches, %d inserts, %d deletes, %d writes saved by acks "
                "that arrived before their insert was committed",
                stats.batches,
                stats.inserts,
                stats.deletes,
                stats.saved_writes,
            )

    async def shutdown(self, reason: str = "shutdown") -> None:
        """Close every connection with 320 CONNECTION_FORCED, then stop serving."""
        if self._stopping:
            return
        self._stopping = True
        await self._close_links()  # first: what they did not hand over goes back
        peers = list(self._peers.values())
        for peer in peers:
            peer.conn.close_forced(reason)
        self.after_core()
        with anyio.move_on_after(SHUTDOWN_GRACE):
            for peer in peers:
                await peer.done.wait()
        if self._scope is not None:
            self._scope.cancel()

    async def _ticker(self) -> None:
        """Run the core's timers when a deadline is due and at least every
        ``tick_interval``: queue deadlines (a head's TTL, x-expires) come from the clock
        (`Clock.wake_at`), each connection's (heartbeats, timeouts) from its
        ``next_deadline``; a due deadline ticks the broker and the due connections, the
        periodic tick everything. `after_core` wakes it when input brings an earlier
        deadline; deadline ticks are at least TIMER_RESOLUTION apart."""
        clock = self.broker.clock
        interval = self.config.tick_interval
        periodic = time.time() + interval
        last = -math.inf
        while True:
            now = time.time()
            due = min(clock.wake_at, min((c.next_deadline for c in self._peers), default=math.inf))
            until = min(max(due, last + TIMER_RESOLUTION) + TIMER_SLACK, periodic)
            if until > now:
                self._ticker_wake = wake = anyio.Event()
                self._ticker_until = until
                with anyio.move_on_after(until - now):
                    await wake.wait()
                self._ticker_until = math.inf
                if wake.is_set():
                    continue  # an earlier deadline came in: plan again
                now = time.time()
            else:
                await anyio.sleep(0)
            last = now
            everything = now >= periodic
            if everything:
                periodic = now + interval
            clock.wake_at = math.inf  # the broker's tick announces what is still pending
            try:
                self.broker.tick(now)
                for conn in list(self._peers):
                    if everything or conn.next_deadline <= now:
                        conn.tick(now)
            except Exception:  # a bug in a timer must not take the broker down
                log.exception("timers failed")
            self.after_core()

    async def _resource_monitor(self) -> None:
        """Measure memory (every memory_check_interval) and the data directory's free space
        (every second, and after every DISK_CHECK_BYTES written) for the resource alarms
        (amqpd/model/alarms.py); while the store is failing, offer it an empty batch every
        second (its commit ends the alarm once there is free space again)."""
        broker = self.broker
        alarms = broker.alarms
        config = self.config
        next_disk = next_trim = 0.0
        while True:
            now = anyio.current_time()
            if alarms.memory_limit is not None:
                broker.memory_used(config.memory_probe())
                self.after_core()  # connection.unblocked, readers resumed
                if "memory" in alarms.active and now >= next_trim:
                    next_trim = now + 1.0
                    resources.release_free_memory()  # so the RSS can fall below the mark
            if now >= next_disk:
                next_disk = now + 1.0
                self._check_disk()
                if alarms.store_failing and self._journal is not None:
                    self._journal.barrier()  # the store's next write decides
                self.after_core()
            await anyio.sleep(config.memory_check_interval)

    async def _handle(self, stream: anyio.abc.SocketStream, tls: bool = False) -> None:
        try:
            address = stream.extra(SocketAttribute.remote_address)
            peer_name = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        except Exception:
            peer_name = "?"
        byte_stream: anyio.abc.ByteStream = stream
        cert_user = None
        if tls:
            tls_stream = await self._tls_handshake(stream, peer_name)
            if tls_stream is None:
                return
            byte_stream = tls_stream
            if self.config.tls is not None:
                cert = tls_stream.extra(TLSAttribute.peer_certificate, None)
                cert_user = certificate_identity(cert, self.config.tls.cert_login_from)
        conn = Connection(self.broker, time.time(), peer_name, self._outbox)
        conn.peer_cert_user = cert_user
        with suppress(Exception):
            local = stream.extra(SocketAttribute.local_address)
            if isinstance(local, tuple):
                conn.stats.host, conn.stats.port = str(local[0]), int(local[1])
        conn.stats.ssl = tls
        peer = _Peer(conn, byte_stream)
        self._peers[conn] = peer
        log.info("accepting AMQP connection %s", conn.audit_label())
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_loop, peer)
                await self._read_loop(peer)
                peer.kick()
        except Exception:  # a bug in one connection must not take the broker down
            log.exception("connection from %s failed; dropping it", peer_name)
        finally:
            try:
                conn.connection_lost()  # may requeue to other connections' consumers
            except Exception:
                log.exception("releasing connection from %s failed", peer_name)
            del self._peers[conn]
            self.after_core()
            with suppress(Exception):
                await peer.stream.aclose()
            peer.done.set()
            opened = f", vhost: '{conn.vhost.name}', user: '{conn.user}'" if conn.user else ""
            log.info(
                "closing AMQP connection %s%s: %s",
                conn.audit_label()[:-1],
                opened + ")",
                conn.close_reason or "client unexpectedly closed TCP connection",
            )

    async def _tls_handshake(
        self, stream: anyio.abc.SocketStream, peer_name: str
    ) -> TLSStream | None:
        """The TLS server handshake, bounded by the AMQP handshake timeout (None: failed)."""
        assert self._tls_context is not None
        try:
            with anyio.fail_after(self.broker.config.handshake_timeout):
                return await TLSStream.wrap(
                    stream,
                    server_side=True,
                    ssl_context=self._tls_context,
                    standard_compatible=False,
                )
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:  # ssl, timeout
            log.info("TLS handshake with %s failed: %s", peer_name, tls_failure_reason(exc))
            with suppress(Exception):
                await stream.aclose()
            return None

    async def _read_loop(self, peer: _Peer) -> None:
        conn = peer.conn
        stream = peer.stream
        try:
            while not conn.should_close:
                delay = conn.read_delay(time.time())
                if delay == math.inf:  # blocked by a resource alarm: data stays in the kernel
                    await peer.resume.wait()
                    peer.resume = anyio.Event()
                    continue
                if delay is not None:  # a flooding publisher: its queues catch up first
                    await anyio.sleep(delay)
                    continue
                data = await stream.receive(READ_SIZE)
                conn.receive_data(data, time.time())
                self.after_core()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.connection_lost()

    async def _write_loop(self, peer: _Peer) -> None:
        conn = peer.conn
        stream = peer.stream
        try:
            while True:
                await peer.wake.wait()
                peer.wake = anyio.Event()
                data = conn.data_to_send()
                if data or peer.backlog:  # b"": wait for a direct write's backlog to drain
                    conn.write_started(len(data))
                    peer.writing = True
                    try:
                        await stream.send(data)
                    finally:
                        peer.writing = False
                    peer.backlog = False
                    conn.write_finished()  # may dispatch again (write-ahead limit)
                    self.after_core()
                if conn.should_close and not conn.output_pending:
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.connection_lost()
        # closing the write side ends the read loop too
        peer.unpause()
        with suppress(Exception):
            await stream.aclose()


async def run(broker_config: BrokerConfig, server_config: ServerConfig) -> None:
    """Serve until SIGINT / SIGTERM, then close every connection with 320."""
    server = Server(_make_broker(broker_config, server_config), server_config)
    async with anyio.create_task_group() as group:

        async def watch_signals() -> None:
            hangups = 0
            with anyio.open_signal_receiver(
                signal.SIGINT, signal.SIGTERM, signal.SIGHUP
            ) as signals:
                async for signum in signals:
                    if signum == signal.SIGHUP:  # RabbitMQ ignores it; we reopen the log file
                        reopen = server_config.reopen_logs
                        if reopen is not None and reopen():
                            log.info("received SIGHUP; reopened the log file")
                        elif hangups == 0:
                            log.info("received SIGHUP; ignored (and from now on silently)")
                        hangups += 1
                        continue
                    log.info("received %s; shutting down", signal.Signals(signum).name)
                    await server.shutdown()
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch_signals)
        await server.serve()
        group.cancel_scope.cancel()


def _make_broker(broker_config: BrokerConfig | None, server_config: ServerConfig) -> Broker:
    stored = server_config.data_dir is not None or server_config.store is not None
    journal = Journal() if stored else None
    broker = Broker(broker_config, journal, time.time())
    ensure_cluster_id(broker.access.state)  # a stored one replaces it (_open_store)
    return broker


@contextmanager
def background_server(
    broker_config: BrokerConfig | None = None, server_config: ServerConfig | None = None
) -> Iterator[Server]:
    """Run a server in a background thread (for tests and embedding); yields it with
    ``.port`` set. Leaving the block shuts it down (connections get 320)."""
    config = server_config or ServerConfig(port=0)
    server = Server(_make_broker(broker_config, config), config)
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as portal:
        future, _port = portal.start_task(server.serve)
        try:
            yield server
        finally:
            portal.call(server.shutdown)
            with suppress(BaseException):
                future.result(timeout=5)
