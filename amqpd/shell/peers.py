"""The AMQP sockets: one `Connection` per accepted socket, fed as data arrives and drained by
a writer task.

Theory of operation. `Peers.handle` runs once per accepted socket (TCP, or TLS after a
handshake bounded by the AMQP handshake timeout). It creates the socket's `Connection` and a
`Peer` (the shell-side state), then serves it until the socket closes. A plain TCP socket is
read in the event loop's callback (amqpd/shell/socket_protocol.py: each chunk goes to the
connection, then ``after_core``, with no task hop); a TLS socket (or a backend without
asyncio transports) by a reader task that feeds every received chunk (up to READ_SIZE) to
the connection and then calls ``after_core``. The writer task sleeps on ``Peer.wake`` and
sends everything pending in one write. `flush` (called by the server's ``after_core`` for
every connection with output) writes straight into an idle transport
(amqpd/shell/direct_write.py) and wakes the writer only when that cannot be done or left a
backlog. A connection blocked by a resource alarm (``read_delay`` is infinite) reads nothing
until `Peer.unpause`, which the server calls when the engine unpauses the connection. When
the socket goes, the connection is told (``connection_lost``: its unacked messages are
requeued), the peer leaves `Peers.by_conn` and ``after_core`` runs once more.
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from collections.abc import Callable
from contextlib import suppress

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from amqpd.engine.connection import Connection
from amqpd.engine.outbox import Outbox
from amqpd.model.broker import Broker
from amqpd.shell.direct_write import transport_of, write_now
from amqpd.shell.socket_protocol import READ_SIZE, FeedProtocol, attach
from amqpd.shell.tls import TLSOptions, certificate_identity, tls_failure_reason
from amqpd.shell.workers.front import Front, Gate
from amqpd.shell.workers.handover import Arrival
from amqpd.shell.workers.moves import HandoverLinks, move_connection

log = logging.getLogger(__name__)


class Peer:
    """Shell-side state of one socket."""

    __slots__ = (
        "backlog",
        "conn",
        "done",
        "reader",
        "resume",
        "stream",
        "transport",
        "wake",
        "writing",
    )

    def __init__(self, conn: Connection, stream: anyio.abc.ByteStream) -> None:
        self.conn = conn
        self.stream = stream
        self.transport = transport_of(stream)  # None: always write through the writer task
        self.writing = False  # the writer task is inside stream.send
        self.backlog = False  # a direct write left bytes in the transport: writer drains
        self.wake = anyio.Event()
        self.done = anyio.Event()
        self.resume = anyio.Event()  # set when a connection blocked by an alarm may read
        self.reader: FeedProtocol | None = None  # None: the read loop reads (TLS)

    def kick(self) -> None:
        self.wake.set()

    def unpause(self) -> None:
        """The engine unpaused the connection (or the writer ended): read again."""
        self.resume.set()
        if self.reader is not None:
            self.reader.unpause()


def flush(peer: Peer) -> None:
    """Write the peer's output now if its transport is idle (`direct_write`), else wake its
    writer task."""
    transport = peer.transport
    conn = peer.conn
    if transport is None or peer.writing or peer.backlog or conn.should_close:
        peer.wake.set()
        return
    done = write_now(conn, transport)
    if not done:
        peer.backlog = done is False
        peer.wake.set()


class Peers:
    """The open sockets of one server, by connection, and the tasks that serve them."""

    def __init__(
        self, broker: Broker, outbox: Outbox[Connection], after_core: Callable[[], None]
    ) -> None:
        self.broker = broker
        self.by_conn: dict[Connection, Peer] = {}
        self._outbox = outbox
        self._after_core = after_core
        self.tls_context: ssl.SSLContext | None = None  # set when serving AMQPS
        self.front: Front | None = None  # worker 0 of several: the hand-over gate
        self.mover: HandoverLinks | None = None  # a spread vhost's connections move (moves.py)
        self.tls_options: TLSOptions | None = None

    async def handle(
        self, stream: anyio.abc.SocketStream, tls: bool = False, arrival: Arrival | None = None
    ) -> None:
        """Serve one accepted socket until it closes (``arrival``: a connection another
        worker handed over, amqpd/shell/workers/handover.py)."""
        try:
            address = stream.extra(SocketAttribute.remote_address)
            peer_name = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        except Exception:
            peer_name = "?"
        if arrival is not None:
            peer_name = arrival.peer
        byte_stream: anyio.abc.ByteStream = stream
        cert_user = None
        if tls:
            tls_stream = await self._tls_handshake(stream, peer_name)
            if tls_stream is None:
                return
            byte_stream = tls_stream
            if self.tls_options is not None:
                cert = tls_stream.extra(TLSAttribute.peer_certificate, None)
                cert_user = certificate_identity(cert, self.tls_options.cert_login_from)
        conn = Connection(self.broker, time.time(), peer_name, self._outbox)
        conn.peer_cert_user = cert_user
        with suppress(Exception):
            local = stream.extra(SocketAttribute.local_address)
            if isinstance(local, tuple):
                conn.stats.host, conn.stats.port = str(local[0]), int(local[1])
        conn.stats.ssl = tls
        conn.can_move = not tls and self.mover is not None  # a TLS session cannot move
        if not conn.can_move:
            conn.recording = None  # nothing to record it for (engine/moving.py)
        if arrival is not None:
            _replay(conn, arrival)
        peer = Peer(conn, byte_stream)
        self.by_conn[conn] = peer
        if arrival is None:
            log.info("accepting AMQP connection %s", conn.audit_label())
        try:
            gate = self.front if arrival is None else None
            outcome = Gate.STAY
            if gate is not None:
                outcome = await gate.gate(conn, byte_stream, stream, self._after_core)
            if outcome is Gate.MOVED:
                peer.stream = _Forgotten()  # another worker has it: nothing to close here
                return
            if outcome is Gate.CLOSED:
                return
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_loop, peer)
                reader = peer.reader = None if tls else attach(stream, conn, self._after_core)
                if reader is None:
                    await self._read_loop(peer)
                else:
                    await reader.finished.wait()
                    if reader.failure is not None:
                        raise reader.failure
                peer.kick()
            if conn.move_to is not None and await self._move(peer, stream):
                return  # another worker has the socket
        except Exception:  # a bug in one connection must not take the broker down
            log.exception("connection from %s failed; dropping it", peer_name)
        finally:
            if peer.reader is not None:
                peer.reader.close()
            try:
                conn.connection_lost()  # may requeue to other connections' consumers
            except Exception:
                log.exception("releasing connection from %s failed", peer_name)
            del self.by_conn[conn]
            self._after_core()
            with suppress(Exception):
                await peer.stream.aclose()
            peer.done.set()
            if not isinstance(peer.stream, _Forgotten):
                opened = f", vhost: '{conn.vhost.name}', user: '{conn.user}'" if conn.user else ""
                log.info(
                    "closing AMQP connection %s%s: %s",
                    conn.audit_label()[:-1],
                    opened + ")",
                    conn.close_reason or "client unexpectedly closed TCP connection",
                )

    async def handle_arrival(self, stream: anyio.abc.SocketStream, arrival: Arrival) -> None:
        """Serve a connection another worker handed over (`handle`)."""
        await self.handle(stream, arrival=arrival)

    async def _move(self, peer: Peer, raw: anyio.abc.SocketStream) -> bool:
        """Hand a connection that asked to move (its output written) to its new worker."""
        assert self.mover is not None
        unread = b"" if peer.reader is None else peer.reader.unread()
        if not await move_connection(self.mover, peer.conn, raw, unread):
            return False
        peer.stream = _Forgotten()
        return True

    async def _tls_handshake(
        self, stream: anyio.abc.SocketStream, peer_name: str
    ) -> TLSStream | None:
        """The TLS server handshake, bounded by the AMQP handshake timeout (None: failed)."""
        assert self.tls_context is not None
        try:
            with anyio.fail_after(self.broker.config.handshake_timeout):
                return await TLSStream.wrap(
                    stream,
                    server_side=True,
                    ssl_context=self.tls_context,
                    standard_compatible=False,
                )
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:  # ssl, timeout
            log.info("TLS handshake with %s failed: %s", peer_name, tls_failure_reason(exc))
            with suppress(Exception):
                await stream.aclose()
            return None

    async def _read_loop(self, peer: Peer) -> None:
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
                self._after_core()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.connection_lost()

    async def _write_loop(self, peer: Peer) -> None:
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
                    self._after_core()
                if conn.should_close and not conn.output_pending:
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.connection_lost()
        # closing the write side ends the read loop too (not for a connection that moves:
        # another worker goes on with the socket)
        peer.unpause()
        if conn.move_to is None:
            with suppress(Exception):
                await stream.aclose()


def _replay(conn: Connection, arrival: Arrival) -> None:
    """Run a handed-over connection's bytes again up to ``open_at`` (Connection.Open, or
    the frame that moved it here from another worker), its replies thrown away (the client
    has them), then feed that frame and what followed."""
    conn.peer_cert_user = arrival.cert_user
    conn.stats.ssl = arrival.tls
    if arrival.local_port:
        conn.stats.host, conn.stats.port = arrival.local_host, arrival.local_port
    now = time.time()
    conn.moves = arrival.moves
    conn.replaying = True  # nothing is held for other workers: every reply is dropped
    conn.receive_data(arrival.replay[: arrival.open_at], now)
    conn.replaying = False
    conn.data_to_send()
    conn.receive_data(arrival.replay[arrival.open_at :], now)


class _Forgotten(anyio.abc.ByteStream):
    """The stream of a connection handed to another worker: closing it does nothing."""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        raise anyio.ClosedResourceError

    async def send_eof(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
