"""Worker 0 of several: runs each connection's handshake up to Connection.Open, then keeps
it or hands it to its vhost's worker; and replicates the access state to the workers.

Theory of operation. `Front.gate` reads a new connection (``stream.receive``, not the
fast callback reader, during the few handshake frames) and feeds the engine, writing its
replies, until `find_open` sees Connection.Open (amqpd/shell/workers/handover.py). The
vhost's owner (`Placement`) decides: worker 0 feeds Open itself and the connection goes on
as usual (`gate` answers True); worker K gets the socket and the bytes so far over its
hand-over link (`_Links`), worker 0 forgets the connection without a byte more (its copy
of the descriptor is closed, not shut down, so the client's TCP connection lives on in
worker K). A TLS connection is relayed instead (the TLS session cannot move; see
handover.py). While it gates a handshake it keeps the connection's timers (`_receive`): a
client that does not answer our Connection.Close is dropped after its 3 s, as on one
process, not at the handshake timeout. A worker that is restarting is waited for up to
the handshake timeout; then the client gets 541 "vhost … is down", as RabbitMQ answers
for a vhost whose supervisor is not running.

The access state (users, vhosts, permissions, policies, parameters, limits) changes only
on worker 0 (management API, ``amqpd ctl``, definitions): `replicate` sends it and the
placement to every worker over its control link and waits (up to REPLICATE_TIMEOUT) until
each applied and stored it, so a client told "created" can open the new vhost at once. A
worker that (re)starts is sent the current state as soon as its control socket answers.
"""

from __future__ import annotations

import enum
import logging
import pickle
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from pamqp import commands, frame

from amqpd.engine.connection import Connection
from amqpd.shell.workers.handover import Arrival, find_open
from amqpd.shell.workers.moves import HandoverLinks, arrival_of, forget
from amqpd.shell.workers.placement import Placement
from amqpd.shell.workers.role import WorkerRole

log = logging.getLogger(__name__)

READ_SIZE = 65536
RELAY_SIZE = 65536
REPLICATE_TIMEOUT = 5.0  # seconds an admin change waits for the workers to apply it
RECONNECT_INTERVAL = 0.1  # seconds between tries to reach a starting worker
PROGRESS_AFTER = 5.0  # seconds of waiting for the workers at start-up before saying so
_LENGTH = struct.Struct(">I")
TICK_SLACK = 0.01  # seconds past a connection's deadline before the gate ticks it


async def _receive(conn: Connection, stream: anyio.abc.ByteStream) -> bytes | None:
    """The next bytes of a gated handshake, or None once the connection's timers ended it
    (the 3 s a client has to answer our Connection.Close, the handshake timeout). The
    server's ticker ticks the connection too, but nothing would wake this read: so it
    ticks the connection (arming what the last chunk started, such as the Close-Ok
    deadline) and waits only until its next deadline."""
    while True:
        conn.tick(time.time())
        if conn.should_close:
            return None
        with anyio.move_on_after(max(conn.next_deadline - time.time(), 0.0) + TICK_SLACK):
            data: bytes = await stream.receive(READ_SIZE)
            return data


def encode_state(
    access: Any, placement: Placement, front: dict[str, Any], topology: dict[str, Any]
) -> bytes:
    """A control message: the access state, the placement, where worker 0 listens with the
    internal user's secret (the workers' shovels and federation links connect there) and
    the exchanges, queues and bindings of a definitions file for the worker's vhosts (empty
    once it has them); pickled: both ends are this program, on a socket only this user can
    open."""
    message = {
        "access": access,
        "placement": placement.to_json(),
        "front": front,
        "definitions": topology,
    }
    data = pickle.dumps(message)
    return _LENGTH.pack(len(data)) + data


class Gate(enum.Enum):
    """What became of a connection at worker 0's gate (`Front.gate`)."""

    STAY = "stay"  # its vhost is worker 0's: serve it here
    MOVED = "moved"  # handed to (or relayed for) its vhost's worker
    CLOSED = "closed"  # the handshake ended it here: close the socket


@dataclass(frozen=True, slots=True)
class _Move:
    """The handshake reached Open for a vhost of worker ``owner``."""

    owner: int
    vhost: str
    replay: bytes  # every byte the client sent so far
    open_at: int  # where Connection.Open starts in it


class Front:
    """Worker 0's side of the links to the other workers."""

    def __init__(
        self,
        role: WorkerRole,
        placement: Placement,
        handshake_timeout: float,
        state: Callable[[], Any],
    ) -> None:
        self.role = role
        self.placement = placement
        self.handshake_timeout = handshake_timeout
        self._state = state  # the current access state
        self.listening: dict[str, Any] = {}  # host, port, secret: set once serving
        # a definitions file's exchanges, queues and bindings for each worker's vhosts, until
        # that worker applied them (amqpd/shell/workers/node.py)
        self.topology: dict[int, dict[str, Any]] = {}
        # why one more connection of a user is refused, counted over every worker (set by
        # WorkerNode: the node and user connection limits hold for the node, not per worker)
        self.refusal: Callable[[str, str], Awaitable[str | None]] | None = None
        # whether a vhost is spread over every worker (its connections go to each in turn)
        self.spread: Callable[[str], bool] = lambda _name: False
        self._turn = 0
        self.links = HandoverLinks(role, handshake_timeout)
        self._connected: set[int] = set()  # workers with a control link
        self._changed = {index: anyio.Event() for index in range(1, role.count)}
        self._progress = anyio.Event()  # set (and replaced) when a worker applied a state
        self._version = 0
        self._applied = dict.fromkeys(range(1, role.count), -1)

    # -- the handshake gate ------------------------------------------------------------------
    def _next_worker(self) -> int:
        """Where the next connection to a spread vhost goes: each worker in turn."""
        worker = self._turn
        self._turn = (worker + 1) % self.role.count
        return worker

    async def gate(
        self,
        conn: Connection,
        stream: anyio.abc.ByteStream,
        raw: anyio.abc.SocketStream,
        after_core: Callable[[], None],
    ) -> Gate:
        """Serve ``conn``'s handshake until Connection.Open: STAY (everything read so far has
        been fed), MOVED (handed over or relayed to its end: nothing of it is left here), or
        CLOSED (the engine closed it, the client went, or the handshake timeout passed,
        as RabbitMQ's handshake_timeout: the caller closes the socket)."""
        outcome: Gate | _Move = Gate.CLOSED
        with anyio.move_on_after(self.handshake_timeout):  # the handshake only, not a relay
            outcome = await self._handshake(conn, stream, after_core)
        if isinstance(outcome, Gate):
            return outcome
        await self._move(conn, stream, raw, outcome)
        return Gate.MOVED

    async def _handshake(
        self,
        conn: Connection,
        stream: anyio.abc.ByteStream,
        after_core: Callable[[], None],
    ) -> Gate | _Move:
        replay = bytearray()
        while not conn.should_close:
            try:
                data = await _receive(conn, stream)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return Gate.CLOSED
            if data is None:
                break  # its timers ended it
            start = len(replay)
            replay += data
            found = find_open(replay)
            if found is None:
                await self._feed(conn, stream, data, after_core)
                continue
            at, vhost = found
            if at > start:
                await self._feed(conn, stream, bytes(replay[start:at]), after_core)
            if conn.should_close:
                break
            user = conn.user or ""
            refused = None if self.refusal is None else await self.refusal(user, vhost)
            if refused is not None:  # rabbit_reader: 530 on Connection.Open
                await _close(stream, 530, f"NOT_ALLOWED - {refused}")
                return Gate.CLOSED
            owner = self._next_worker() if self.spread(vhost) else self.placement.owner(vhost)
            if owner == self.role.index:
                await self._feed(conn, stream, bytes(replay[at:]), after_core)
                return Gate.STAY
            return _Move(owner, vhost, bytes(replay), at)
        with suppress(Exception):
            data = conn.data_to_send()
            if data:
                await stream.send(data)
        return Gate.CLOSED

    async def _feed(
        self,
        conn: Connection,
        stream: anyio.abc.ByteStream,
        data: bytes,
        after_core: Callable[[], None],
    ) -> None:
        conn.receive_data(data, time.time())
        out = conn.data_to_send()
        if out:
            await stream.send(out)
        after_core()

    async def _move(
        self,
        conn: Connection,
        stream: anyio.abc.ByteStream,
        raw: anyio.abc.SocketStream,
        move: _Move,
    ) -> None:
        owner, vhost = move.owner, move.vhost
        tls = stream is not raw
        arrival = arrival_of(conn, raw, move.open_at, move.replay)  # TLS: conn.stats.ssl
        conn.connection_lost()  # forgotten here: not a byte more from this worker
        if tls:
            await self._relay(stream, owner, vhost, arrival)
            return
        sock = raw.extra(SocketAttribute.raw_socket)
        if not await self.links.send(owner, sock.fileno(), arrival):
            await _refuse(stream, vhost, conn.user)
            return
        forget(raw)  # closes this copy of the descriptor; no FIN (worker K has it)

    async def _relay(
        self, stream: anyio.abc.ByteStream, owner: int, vhost: str, arrival: Arrival
    ) -> None:
        """Pump the TLS connection's plain bytes to and from worker ``owner``."""
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sent = await self.links.send(owner, there.fileno(), arrival)
        finally:
            there.close()
        if not sent:
            here.close()
            await _refuse(stream, vhost, None)
            return
        inner = await anyio.abc.SocketStream.from_socket(here)

        async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
            with suppress(
                anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
            ):
                while True:
                    await sink.send(await source.receive(RELAY_SIZE))
            group.cancel_scope.cancel()

        async with inner, anyio.create_task_group() as group:
            group.start_soon(pump, stream, inner)
            group.start_soon(pump, inner, stream)

    # -- replicating the access state ----------------------------------------------------------

    async def run_control(self) -> None:
        """Keep a control link to every worker and send it the state when it (re)connects
        or the state changed; runs until cancelled."""
        async with anyio.create_task_group() as group:
            for index in range(1, self.role.count):
                group.start_soon(self._control_loop, index)

    async def _control_loop(self, index: int) -> None:
        while True:
            try:
                stream = await anyio.connect_unix(self.role.control_socket(index))
            except OSError:
                await anyio.sleep(RECONNECT_INTERVAL)
                continue
            self._connected.add(index)
            try:
                async with stream:
                    while True:
                        version = self._version
                        topology = self.topology.get(index, {})
                        state = encode_state(
                            self._state(), self.placement, self.listening, topology
                        )
                        await stream.send(state)
                        if await stream.receive(2) != b"ok":
                            break
                        if self.topology.get(index) is topology:
                            self.topology.pop(index, None)
                        self._applied[index] = version
                        self._wake_replicators()
                        if self._version == version and not await self._changed_or_gone(
                            index, stream
                        ):
                            break
                        self._changed[index] = anyio.Event()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass
            finally:
                self._connected.discard(index)
                self._applied[index] = -1
                self._wake_replicators()

    async def _changed_or_gone(self, index: int, stream: anyio.abc.ByteStream) -> bool:
        """Wait until the state changes (True) or worker ``index`` closes its control link
        (False: it died; its successor is sent the state as soon as it listens, and takes
        no hand-over before, amqpd/shell/workers/inbox.py)."""
        gone = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal gone
                # the worker sends nothing unasked: this ends with its end of the link
                with suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    await stream.receive(1)
                gone = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            await self._changed[index].wait()
            group.cancel_scope.cancel()
        return not gone

    def _wake_replicators(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def wait_for_workers(self) -> None:
        """Until every worker applied a state (worker 0 opens the node's listeners then, as
        RabbitMQ starts its listeners once every vhost recovered). A worker that cannot
        start stops the node (the supervisor), so this does not wait for ever."""
        with anyio.move_on_after(PROGRESS_AFTER):
            await self._all_applied()
        waiting = [index for index, version in self._applied.items() if version < 0]
        if waiting:
            log.info("waiting for workers %s to recover before listening", waiting)
            await self._all_applied()

    async def _all_applied(self) -> None:
        while any(version < 0 for version in self._applied.values()):
            await self._progress.wait()

    def announce(self, listening: dict[str, Any]) -> None:
        """Worker 0 serves: tell every worker where (with the state, without waiting)."""
        self.listening = listening
        self._version += 1
        for event in self._changed.values():
            event.set()

    async def replicate(self) -> None:
        """The state changed: every connected worker applies it before this returns (or
        REPLICATE_TIMEOUT passes; a worker not reachable now gets it when it comes back)."""
        self._version += 1
        version = self._version
        for event in self._changed.values():
            event.set()
        with anyio.move_on_after(REPLICATE_TIMEOUT) as scope:
            while any(self._applied[i] < version for i in self._connected):
                await self._progress.wait()
        if scope.cancelled_caught:
            log.warning("a worker did not apply the access change within %.0f s", REPLICATE_TIMEOUT)

    def close(self) -> None:
        self.links.close()


async def _refuse(stream: anyio.abc.ByteStream, vhost: str, user: str | None) -> None:
    """541 for a vhost whose worker is down (RabbitMQ: "vhost … is down")."""
    text = f"INTERNAL_ERROR - access to vhost '{vhost}' refused: vhost '{vhost}' is down"
    await _close(stream, 541, text)


async def _close(stream: anyio.abc.ByteStream, code: int, text: str) -> None:
    """Connection.Close in answer to Connection.Open, and the socket closed."""
    close = commands.Connection.Close(code, text[:255], 10, 40)
    with suppress(Exception):
        await stream.send(bytes(frame.marshal(close, 0)))
        await stream.aclose()
