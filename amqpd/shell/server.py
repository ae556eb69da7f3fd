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

Collaborators: the sockets' reader and writer tasks are amqpd/shell/peers.py, the store's
open / commit / close amqpd/shell/store_lifecycle.py, the shovels and federation links
amqpd/shell/links/node_links.py.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
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

from amqpd.engine.connection import Connection
from amqpd.engine.outbox import Outbox
from amqpd.engine.rates import SAMPLE_INTERVAL, RateSampler
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.definitions import import_definitions
from amqpd.model.global_parameters import ensure_cluster_id
from amqpd.model.statistics import NodeSample
from amqpd.shell import admin_requests, management, metrics, node_sample, resources
from amqpd.shell.admin_socket import AdminReply, serve_admin
from amqpd.shell.hangup import Hangups
from amqpd.shell.http_listener import bind, bind_unix, serve_http
from amqpd.shell.links.federation_status import (
    FederationLinkStatus,
)
from amqpd.shell.links.node_links import NodeLinks
from amqpd.shell.listen_errors import naming
from amqpd.shell.peers import Peers, flush
from amqpd.shell.store_lifecycle import StoreLifecycle
from amqpd.shell.store_role import LockLost, StoreRole
from amqpd.shell.streams import StreamFiles
from amqpd.shell.tls import TLSOptions, server_context
from amqpd.shell.workers.node import WorkerNode, stored_placement
from amqpd.shell.workers.role import WorkerRole
from amqpd.shell.workers.supervisor import report_ready
from persistence.backend import StoreBackend
from persistence.journal import Journal

log = logging.getLogger(__name__)

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
    worker: WorkerRole | None = None  # one of several workers (``data_dir`` is its own)
    spread_vhosts: tuple[str, ...] = ()  # vhosts on every worker ("*": all; workers/spread.py)


async def _serve_listener(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    handle: Callable[[anyio.abc.SocketStream], Any],
    group: anyio.abc.TaskGroup,
) -> None:
    async with listener:
        await listener.serve(handle, group)


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
        self._outbox: Outbox[Connection] = Outbox()
        self.sockets = Peers(broker, self._outbox, self.after_core)  # amqpd/shell/peers.py
        self._peers = self.sockets.by_conn
        self._journal = _journal_of(broker)
        self._stopping = False
        config = self.config
        self._role = StoreRole(config.store, config.data_dir, config.synchronous, config.worker)
        self._scope: anyio.CancelScope | None = None
        self.lost: LockLost | None = None  # set when this node stopped being the active one
        self.started = time.time()
        self.rates = RateSampler(broker)  # message rates, sampled (amqpd/engine/rates.py)
        self.listeners: list[dict[str, Any]] = []  # RabbitMQ's overview/nodes "listeners"
        self.links = NodeLinks(broker)  # shovels, federation (amqpd/shell/links/node_links.py)
        self._clock = broker.clock
        self._federated = broker.federated_queues  # (amqpd/model/federated_queues.py)
        self._ticker_wake: anyio.Event | None = None  # set to re-plan the ticker's sleep
        self._ticker_until = math.inf  # when the sleeping ticker wakes (inf: it is not asleep)
        broker.statistics.node = node_sample.node_name()
        self.streams = StreamFiles(broker, self.config.data_dir)  # amqpd/shell/streams.py
        role = self.config.worker
        # one of several workers (amqpd/shell/workers/node.py); None: the only process
        self.node = (
            WorkerNode(
                role, broker, self.config.data_dir, self._role.shared, self.config.spread_vhosts
            )
            if role is not None and role.count > 1
            else None
        )
        broker.set_stream_logs(self.streams)
        self.store = StoreLifecycle(  # amqpd/shell/store_lifecycle.py
            broker,
            self._journal,
            self._role,
            self.streams,
            config.data_dir,
            config.default_user,
            config.disk_probe,
            self.after_core,
        )
        node = self.node  # PostgreSQL: the placement is in the database (workers/node.py)
        self.store.before_load = (
            node.load_placement if node else partial(stored_placement, workers=1)
        )

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
        return node_sample.of_node(sample, self.config.worker)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Recover the store (if any), listen and serve until cancelled or `shutdown` is
        called. Reports the bound port."""
        resources.raise_open_file_limit()
        if self.config.tls is not None:
            self.sockets.tls_context = server_context(self.config.tls)
            self.sockets.tls_options = self.config.tls
        with anyio.CancelScope() as self._scope:
            try:
                async with anyio.create_task_group() as outer:
                    await self._role.prepare()  # PostgreSQL: data dir lock, connection
                    if self._role.shared and self.config.data_dir is not None:
                        # a standby answers `amqpd ctl status` too
                        await outer.start(serve_admin, self.config.data_dir, self.admin_request)
                    await self._serve_store(await self.store.open(), task_status)
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
            if self.node is not None:
                self.node.store_opened()
            split = None if self.node is None else self.node.split_definitions
            await self.store.import_definitions(self.config.definitions, store, split)
            back = self.node is not None and not self.node.role.front
            host = self.config.host
            listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
            if not back:
                with naming("AMQP", "--port", host, self.config.port):
                    listener = await anyio.create_tcp_listener(
                        local_host=host, local_port=self.config.port, reuse_port=False
                    )
                self.port = listener.extra(SocketAttribute.local_port)
                if self.sockets.tls_context is not None and self.config.tls_port is not None:
                    with naming("AMQPS", "--tls-port", host, self.config.tls_port):
                        tls_listener = await anyio.create_tcp_listener(
                            local_host=host, local_port=self.config.tls_port, reuse_port=False
                        )
                    self.tls_port = tls_listener.extra(SocketAttribute.local_port)
                http_sockets = self._bind_http()
                self._add_listener("amqp", self.port)
                if tls_listener is not None:
                    self._add_listener("amqp/ssl", self.tls_port)
            async with anyio.create_task_group() as group:
                group.start_soon(self._ticker)
                group.start_soon(self._resource_monitor)
                group.start_soon(self._sample_rates)
                if self.store.committer is not None:
                    group.start_soon(self.store.committer.run)
                    group.start_soon(self.store.committer.run_idle)
                if store is not None and self._role.shared:
                    group.start_soon(self._role.guard, store, self._lock_lost)
                if self.node is not None and not back:
                    await self._start_worker(group)
                    if self.node.front is not None:  # every worker has the state first
                        await self.node.front.wait_for_workers()
                if listener is not None:
                    group.start_soon(_serve_listener, listener, self.sockets.handle, group)
                if tls_listener is not None:
                    group.start_soon(
                        tls_listener.serve, partial(self.sockets.handle, tls=True), group
                    )
                    log.info("listening for AMQPS on %s:%d", self.config.host, self.tls_port)
                if store is not None and self.config.data_dir is not None and not self._role.shared:
                    await group.start(serve_admin, self.config.data_dir, self.admin_request)
                await self._serve_http(group, http_sockets)
                if back:  # last: worker 0 waits for this worker's answer before listening
                    await self._start_worker(group)
                if not back:  # a back worker starts its links once worker 0 tells it where
                    self.links.start(self.config.host, self.port, self._shovel_finished)
                    if self.node is not None and self.node.front is not None:
                        secret = self.broker.access.internal_secret
                        where = {"host": host, "port": self.port, "secret": secret}
                        self.node.front.announce(where)
                if back:
                    task_status.started(0)
                    await anyio.sleep(math.inf)
                log.info("listening on %s:%d", self.config.host, self.port)
                task_status.started(self.port)
                await anyio.sleep(math.inf)
        finally:
            with anyio.CancelScope(shield=True):
                await self.links.aclose()
                if self.node is not None:
                    await self.node.aclose()
            for sock in http_sockets.values():
                sock.close()  # closed by serve_http already unless serving never started
            if tls_listener is not None:
                with anyio.CancelScope(shield=True):
                    await tls_listener.aclose()
            if store is not None:
                with anyio.CancelScope(shield=True):
                    await self.store.close(store, lost=self.lost is not None)
            self.streams.close()

    async def _start_worker(self, group: anyio.abc.TaskGroup) -> None:
        """One of several workers: worker 0 gates connections and replicates the access
        state; worker K takes hand-overs and the state (amqpd/shell/workers/node.py)."""
        node = self.node
        assert node is not None
        handle, timeout = self.sockets.handle_arrival, self.broker.config.handshake_timeout
        # a spread vhost's connections move between workers (moves.py): their links
        self.sockets.mover = await node.start_forward_inbox(group, self.after_core, timeout)
        if node.role.front:
            self.sockets.front = await node.start_front(group, timeout, handle)
            return

        async def adopt(message: dict[str, Any]) -> None:
            self.broker.replace_access(message["access"])
            if message["definitions"]:  # worker 0's definitions file, for this worker's vhosts
                problems: list[str] = []
                import_definitions(self.broker, message["definitions"], problems)
                for problem in problems:
                    log.error("definitions file: not applied: %s", problem)
            self.after_core()
            await self.store.save_access()  # after what was journaled is committed
            front = message["front"]
            if front and self.links.shovels is None:  # links reach the node through worker 0
                finished = self._shovel_finished
                self.links.start(front["host"], front["port"], finished, front["secret"])
            self.links.reconcile()

        await node.start_back(group, handle, adopt)

    async def _shovel_finished(self, vhost: str, name: str) -> None:
        """A shovel reached src-delete-after: its parameter goes, as in RabbitMQ (on worker
        0, which owns the parameters, when this is another worker)."""
        request = {"component": "shovel", "vhost": vhost, "name": name}
        request = {"group": "parameters", "command": "clear-parameter", **request}
        local = self.admin_request
        await (local(request) if self.node is None else self.node.on_front(request, local))

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """The shovels' state, as RabbitMQ's /api/shovels lists it."""
        return self.links.shovel_status(vhost)

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]:
        """Every federation link's status (exchange and queue links), of one vhost or all."""
        return self.links.federation_status(vhost)

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
        """Start the management API and the Prometheus endpoint on their bound sockets (a
        back worker: on its Unix sockets, for worker 0's gateway)."""
        node = self.node
        if node is not None and not node.role.front:
            index = node.role.index
            for path, app in (
                (node.role.management_socket(index), management.create_app(self)),
                (node.role.prometheus_socket(index), metrics.create_app(self)),
            ):
                await group.start(serve_http, app, bind_unix(path))
            return
        for protocol, sock in sockets.items():
            host, port = sock.getsockname()[:2]
            if protocol == "http":
                app = management.create_app(self)
                app = app if self.node is None else self.node.management_gateway(app)
                self.management_port = await group.start(serve_http, app, sock)
                self._add_listener(protocol, self.management_port, host)
            else:
                app = metrics.create_app(self)
                app = app if self.node is None else self.node.metrics_gateway(app)
                self.prometheus_port = await group.start(serve_http, app, sock)
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
                    flush(peer)
        if outbox.resume:
            for conn in outbox.take_resume():
                peer = peers.get(conn)
                if peer is not None:
                    peer.unpause()
        committer = self.store.committer
        if committer is not None and self._journal is not None and self._journal.pending:
            committer.wake()
        if self.node is not None:
            self.node.after_core()  # the links between workers
        links = self.links
        federation = links.exchange_federation
        if federation is not None and federation.topology_changed():
            federation.reconcile()  # exchanges, bindings or policies changed
        if self._federated.dirty and links.queue_federation is not None:
            links.queue_federation.follow(self._federated.take())  # demand flips
        if self._clock.wake_at < self._ticker_until:  # the core has an earlier deadline
            self._ticker_until = math.inf
            if self._ticker_wake is not None:
                self._ticker_wake.set()

    async def _lock_lost(self, reason: str) -> None:
        self.lost = LockLost(reason)
        await self.shutdown(reason)

    @property
    def shared_store(self) -> bool:
        """Whether the store is shared (PostgreSQL, active/standby)."""
        return self._role.shared

    async def admin_request(self, request: dict[str, Any]) -> AdminReply:
        """A request from the admin socket (amqpd/shell/admin_requests.py)."""
        return await admin_requests.answer(self, request)

    async def save_access(self) -> None:
        """Persist the broker's definitions tables (users, vhosts, permissions, policies,
        global parameters) after everything journaled so far has been committed; call it
        after changing them on the live broker (e.g. amqpd/model/policy_admin.py). A
        memory-only broker has nothing to save.

        Raises:
            StoreError: the store failed (the change stays in effect until a restart).
        """
        await self.store.save_access()
        if self.node is not None:
            await self.node.access_saved()  # worker 0: every worker applies it

    async def shutdown(self, reason: str = "shutdown") -> None:
        """Close every connection with 320 CONNECTION_FORCED, then stop serving."""
        if self._stopping:
            return
        self._stopping = True
        await self.links.aclose()  # first: what they did not hand over goes back
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
                self.store.check_disk()
                if alarms.store_failing and self._journal is not None:
                    self._journal.barrier()  # the store's next write decides
                self.after_core()
            await anyio.sleep(config.memory_check_interval)


async def run(broker_config: BrokerConfig, server_config: ServerConfig) -> None:
    """Serve until SIGINT / SIGTERM, then close every connection with 320."""
    server = Server(_make_broker(broker_config, server_config), server_config)
    async with anyio.create_task_group() as group:

        async def watch_signals() -> None:
            # a worker's supervisor logs SIGHUP for the node (amqpd/shell/hangup.py)
            hangup = Hangups(server_config.reopen_logs, quiet=server_config.worker is not None)
            with anyio.open_signal_receiver(
                signal.SIGINT, signal.SIGTERM, signal.SIGHUP
            ) as signals:
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        hangup()
                        continue
                    log.info("received %s; shutting down", signal.Signals(signum).name)
                    await server.shutdown()
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch_signals)
        async with anyio.create_task_group() as serving:
            await serving.start(server.serve)
            report_ready(  # one of several workers: the supervisor waits for this
                {
                    "--port": server.port,
                    "--tls-port": server.tls_port,
                    "--management-port": server.management_port,
                    "--prometheus-port": server.prometheus_port,
                }
            )
        group.cancel_scope.cancel()


def _make_broker(broker_config: BrokerConfig | None, server_config: ServerConfig) -> Broker:
    stored = server_config.data_dir is not None or server_config.store is not None
    journal = Journal() if stored else None
    broker = Broker(broker_config, journal, time.time())
    ensure_cluster_id(broker.access.state)  # a stored one replaces it (StoreLifecycle.open)
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
