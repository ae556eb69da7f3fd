"""Reading a plain TCP connection in the event loop's own callback, without a reader task.

anyio's ``SocketStream.receive`` costs a task wake-up, an event and a checkpoint per chunk:
with the core compiled, that is a large share of the broker's CPU per message at moderate
rates and on every round trip (issue 30). So for a plain TCP socket the shell keeps anyio's
listener and `SocketStream` (its writer task, ``send``, ``aclose`` and extra attributes stay
as they are) but replaces the protocol under the stream's asyncio transport with a
`FeedProtocol`: the transport hands each chunk to ``data_received``, which feeds it to the
connection (``receive_data``) and runs the server's ``after_core`` right there.

Theory of operation. `attach` swaps the protocol (``transport.set_protocol``) and points the
stream at it; `FeedProtocol` subclasses anyio's ``StreamProtocol`` so ``send`` keeps working
(its write events, pause_writing/resume_writing, the error it reports). Whatever anyio read
before the swap is fed first. After every chunk (and whenever it is asked to look again) the
protocol applies what today's engine asks of a reader (`_check`):

* ``conn.should_close``: stop for good (`_finish`): reading stays paused, what the peer
  sends next stays unread, and ``finished`` is set so `Peers.handle` lets the writer end.
* ``conn.read_delay(now)`` infinite (a resource alarm blocked the connection, even in the
  middle of a message): ``transport.pause_reading()`` -- the rest stays in the kernel --
  until the server's ``after_core`` calls `unpause` (the engine listed the connection under
  the outbox's ``resume``); `unpause` looks again in a loop callback of its own.
* a finite delay (a flooding publisher, its queues far behind): pause reading and look
  again after that long (``loop.call_later``).
* None: read (``resume_reading``).

End of stream and transport errors (``eof_received``, ``connection_lost``) tell the
connection (``conn.connection_lost()``) and finish. Nothing escapes a callback: an exception
(a bug) finishes the reader with it in ``failure``; `Peers.handle` raises it in the
connection's task, which logs it and drops that connection only. A chunk over READ_SIZE
(uvloop reads up to 256 KiB) is cut into READ_SIZE pieces and held; reading pauses and the
pieces are fed one per loop iteration, with the check between them, as anyio's
``receive(READ_SIZE)`` did: fed all at once, a saturating publisher's chunks outran its
consumers' writer tasks, whose output then sat at the write-ahead limit (4 MiB, +35 MiB of
RSS in the WL benchmark). Chunks a transport still delivers while reading is paused (it
should not) are held too, and fed in order when reading resumes. `close` (from
`Peers.handle` when the connection's task ends, e.g. cancelled at shutdown) detaches the
protocol from the connection: later callbacks do nothing.

TLS sockets keep the read loop in amqpd/shell/peers.py (``TLSStream`` decrypts in user
space). Another anyio backend or version without these internals also falls back to it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

import anyio
from anyio._backends._asyncio import StreamProtocol

from amqpd.engine.connection import Connection

# The most fed to the connection at once: a larger chunk (uvloop reads up to 256 KiB) is fed
# in pieces, looking at `read_delay` between them, as anyio's ``receive(READ_SIZE)`` did.
READ_SIZE = 65536


class Transport(Protocol):
    """What this module uses of an asyncio transport (asyncio's, or uvloop's)."""

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def is_closing(self) -> bool: ...


_METHODS = ("set_protocol", "pause_reading", "resume_reading", "is_closing")


class FeedProtocol(StreamProtocol):
    """The asyncio protocol of one plain TCP connection: feeds the engine as data arrives."""

    def __init__(
        self, conn: Connection, transport: Transport, after_core: Callable[[], None]
    ) -> None:
        # anyio's state (for its send on the stream): `attach` hands over the stream's
        self.read_queue = deque()
        self.read_event = asyncio.Event()
        self.write_event = asyncio.Event()
        self.write_event.set()
        self.conn = conn
        self.transport = transport
        self.after_core = after_core
        self.finished = anyio.Event()  # reading is over (closed, lost, or failed)
        self.failure: Exception | None = None  # what a callback raised (a bug)
        self._done = False
        self._blocked = False  # paused by a resource alarm until `unpause`
        self._timer: asyncio.Handle | None = None  # paused: a flow delay, or unpaused
        self._feeding = False
        self._eof = False  # the peer closed its side (seen before the swap)
        self._held: list[bytes] = []  # received while paused: fed on resume

    # -- asyncio callbacks ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._done:
            if self.conn.move_to is not None:
                self._held.append(bytes(data))  # goes along to the worker it moves to
            return
        if self._blocked or self._timer is not None or self._feeding:
            self._held.append(bytes(data))
            return
        if len(data) > READ_SIZE:
            self._held.extend(data[i : i + READ_SIZE] for i in range(0, len(data), READ_SIZE))
            self._look()
            return
        try:
            self._feed(data)
        except Exception as exc:  # a bug in one connection must not take the broker down
            self._fail(exc)

    def eof_received(self) -> bool | None:
        super().eof_received()
        if not self._done:
            if self._blocked or self._timer is not None or self._held:
                self._eof = True  # held data first
            else:
                self._lost()
        return True  # half-open: the writer may still flush, `Peers.handle` closes

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._done:
            self._lost()

    # -- the shell's calls ---------------------------------------------------------------
    def start(self, pending: list[bytes], eof: bool) -> None:
        """Begin reading: feed what anyio read before the swap, then read on."""
        self._held.extend(pending)
        self._eof = eof
        self._look()

    def unpause(self) -> None:
        """The engine unpaused the connection (an alarm cleared): look again, from the loop
        (this is called inside the server's ``after_core``, which feeding held data would
        run again)."""
        if self._blocked and not self._done:
            self._blocked = False
            self._timer = asyncio.get_running_loop().call_soon(self._look)

    def close(self) -> None:
        """The connection's task ended: no callback touches the connection any more."""
        self._stop()

    def unread(self) -> bytes:
        """What was received and never fed: a connection moving to another worker
        (``conn.move_to``) takes it along (amqpd/shell/workers/moves.py)."""
        return b"".join(self._held)

    # -- internals -----------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        conn = self.conn
        if conn.should_close:
            if conn.move_to is not None:
                self._held.append(bytes(data))  # goes along to the worker it moves to
            self._finish()
            return
        self._deliver(data)
        if conn.should_close or self._held or conn.read_delay(time.time()) is not None:
            self._check()  # the common case (read on, reading already) skips it

    def _look(self) -> None:
        """`_check`, from a timer or the shell: never raises."""
        self._timer = None
        try:
            self._check()
        except Exception as exc:
            self._fail(exc)

    def _check(self) -> None:
        """Read on, pause, or finish, as the connection asks (see the module's docstring)."""
        conn = self.conn
        while not self._done:
            if conn.should_close:
                self._finish()
                return
            delay = conn.read_delay(time.time())
            if delay == math.inf:
                self._blocked = True
                self.transport.pause_reading()
                return
            if delay is not None:
                self.transport.pause_reading()
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(delay, self._look)
                return
            if self._held:
                self._feed_held()
                if self._held:  # one piece per loop iteration: the writers drain meanwhile
                    self.transport.pause_reading()
                    self._timer = asyncio.get_running_loop().call_soon(self._look)
                    return
                continue
            if self._eof or self.transport.is_closing():
                self._lost()
                return
            self.transport.resume_reading()
            return

    def _feed_held(self) -> None:
        self._deliver(self._held.pop(0))

    def _deliver(self, data: bytes) -> None:
        """One chunk to the connection, then the server's ``after_core``."""
        self._feeding = True
        try:
            self.conn.receive_data(data, time.time())
            self.after_core()
        finally:
            self._feeding = False

    def _lost(self) -> None:
        try:
            self.conn.connection_lost()  # may requeue: `Peers.handle` runs after_core
        except Exception as exc:
            self._fail(exc)
            return
        self._finish()

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        self._finish()

    def _finish(self) -> None:
        self._stop()
        self.finished.set()

    def _stop(self) -> None:
        self._done = True
        if self.conn.move_to is None:
            self._held.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport.pause_reading()  # what the peer sends next stays unread


def attach(stream: object, conn: Connection, after_core: Callable[[], None]) -> FeedProtocol | None:
    """Put a `FeedProtocol` under anyio's asyncio ``SocketStream`` and start reading; None
    where the stream is not that (TLS, another backend): the read loop serves it."""
    old = getattr(stream, "_protocol", None)
    transport = getattr(stream, "_transport", None)
    if type(old) is not StreamProtocol:  # TLS, another backend, or attached already
        return None
    if not all(callable(getattr(transport, name, None)) for name in _METHODS):
        return None
    protocol = FeedProtocol(conn, cast(Transport, transport), after_core)
    # anyio's state, for its send (and aclose) on this stream
    protocol.read_queue = old.read_queue
    protocol.read_event = old.read_event
    protocol.write_event = old.write_event
    protocol.exception = old.exception
    protocol.is_at_eof = old.is_at_eof
    pending = list(old.read_queue)
    old.read_queue.clear()
    cast(Transport, transport).set_protocol(protocol)
    stream._protocol = protocol  # type: ignore[attr-defined]
    protocol.start(pending, old.is_at_eof)
    return protocol
