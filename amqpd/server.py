"""The I/O shell: an anyio TCP listener driving the sans-IO protocol engine.

Each accepted socket gets two tasks: a reader that feeds every received chunk (up to 64 KiB)
to its `Connection`, and a writer that sleeps until the engine reports output and then sends
everything pending in one write. Because the reader processes a whole chunk before it next
awaits, all frames produced for any connection during that chunk go out in one write per
connection. One ticker task drives every connection's timers once a second.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from amqpd.broker import Broker, BrokerConfig
from amqpd.connection import Connection

log = logging.getLogger(__name__)

READ_SIZE = 65536
SHUTDOWN_GRACE = 2.0


@dataclass(slots=True)
class ServerConfig:
    """Where to listen and how often to tick."""

    host: str = "127.0.0.1"
    port: int = 5672
    tick_interval: float = 1.0


class _Peer:
    """Shell-side state of one socket."""

    __slots__ = ("conn", "done", "stream", "wake")

    def __init__(self, conn: Connection, stream: anyio.abc.SocketStream) -> None:
        self.conn = conn
        self.stream = stream
        self.wake = anyio.Event()
        self.done = anyio.Event()

    def kick(self) -> None:
        self.wake.set()


class Server:
    """Owns the listener, the peers and the ticker for one `Broker`."""

    def __init__(self, broker: Broker, config: ServerConfig | None = None) -> None:
        self.broker = broker
        self.config = config or ServerConfig()
        self.port = 0
        self._peers: set[_Peer] = set()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stopping = False

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen and serve until cancelled or `shutdown` is called. Reports the bound port."""
        listener = await anyio.create_tcp_listener(
            local_host=self.config.host, local_port=self.config.port, reuse_port=False
        )
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as group:
            self._task_group = group
            group.start_soon(self._ticker)
            group.start_soon(listener.serve, self._handle, group)
            log.info("listening on %s:%d", self.config.host, self.port)
            task_status.started(self.port)
            await anyio.sleep(math.inf)

    async def shutdown(self, reason: str = "shutdown") -> None:
        """Close every connection with 320 CONNECTION_FORCED, then stop serving."""
        if self._stopping:
            return
        self._stopping = True
        peers = list(self._peers)
        for peer in peers:
            peer.conn.close_forced(reason)
            peer.kick()
        with anyio.move_on_after(SHUTDOWN_GRACE):
            for peer in peers:
                await peer.done.wait()
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()

    async def _ticker(self) -> None:
        while True:
            await anyio.sleep(self.config.tick_interval)
            now = anyio.current_time()
            for peer in list(self._peers):
                peer.conn.tick(now)
                if peer.conn.should_close or peer.conn.output_pending:
                    peer.kick()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        try:
            address = stream.extra(SocketAttribute.remote_address)
            peer_name = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        except Exception:
            peer_name = "?"
        conn = Connection(self.broker, anyio.current_time(), peer_name)
        peer = _Peer(conn, stream)
        conn.on_output = peer.kick
        self._peers.add(peer)
        log.debug("accepted connection from %s", peer_name)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_loop, peer)
                await self._read_loop(peer)
                peer.kick()
        finally:
            conn.connection_lost()
            self._peers.discard(peer)
            with suppress(Exception):
                await stream.aclose()
            peer.done.set()
            log.debug("connection from %s closed", peer_name)

    async def _read_loop(self, peer: _Peer) -> None:
        conn = peer.conn
        stream = peer.stream
        try:
            while not conn.should_close:
                data = await stream.receive(READ_SIZE)
                conn.receive_data(data)
                if conn.should_close:
                    peer.kick()
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
                if data:
                    await stream.send(data)
                if conn.should_close and not conn.output_pending:
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.connection_lost()
        # closing the write side ends the read loop too
        with suppress(Exception):
            await stream.aclose()


async def run(broker_config: BrokerConfig, server_config: ServerConfig) -> None:
    """Serve until SIGINT / SIGTERM, then close every connection with 320."""
    server = Server(Broker(broker_config), server_config)
    async with anyio.create_task_group() as group:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("received %s; shutting down", signal.Signals(signum).name)
                    await server.shutdown()
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch_signals)
        await server.serve()
        group.cancel_scope.cancel()


@contextmanager
def background_server(
    broker_config: BrokerConfig | None = None, server_config: ServerConfig | None = None
) -> Iterator[Server]:
    """Run a server in a background thread (for tests and embedding); yields it with
    ``.port`` set. Leaving the block shuts it down (connections get 320)."""
    config = server_config or ServerConfig(port=0)
    server = Server(Broker(broker_config), config)
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as portal:
        future, _port = portal.start_task(server.serve)
        try:
            yield server
        finally:
            portal.call(server.shutdown)
            with suppress(BaseException):
                future.result(timeout=5)
