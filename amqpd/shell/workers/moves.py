"""Handing a connection's socket to another worker: the links to the workers' hand-over
sockets, and moving a connection of a spread vhost to the worker of the queue it uses.

Theory of operation. `HandoverLinks` keeps one SOCK_SEQPACKET link per worker to its
``wK.handover`` socket (amqpd/shell/workers/role.py) and sends one message per connection:
the socket's descriptor and an `Arrival` (handover.py). Worker 0's gate uses it to hand a
new connection to its vhost's worker (front.py); every worker uses it to move a connection
of a spread vhost (amqpd/model/replica.py) whose declare, consume, get, purge or delete
names a queue another worker owns, or whose first publish goes to such queues only
(engine/topology.py `MoveConnection`, engine/moving.py: only while everything the
connection did can be done again there). A worker that is restarting is waited for up
to the handshake timeout.

A move (`move_connection`), once the engine stopped at the frame that asks for it and the
connection's output is written: the `Arrival` carries every byte the client sent (the
engine's ``recording``, and what the reader had not fed yet) and where that frame starts
(``open_at``); the receiving worker replays the bytes before it with the replies thrown
away (the client has them: amqpd/shell/peers.py `_replay`) and goes on from the frame, so
the client gets its consume-ok from there. This worker then closes its copy of the
descriptor without a FIN: the TCP connection lives on in the other worker. A connection
relayed for TLS by worker 0 moves the same way (its relay's end of the socket pair);
a TLS connection that worker 0 terminates itself cannot move.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from amqpd.engine.connection import Connection
from amqpd.shell.workers.handover import Arrival, send_connection
from amqpd.shell.workers.role import WorkerRole

log = logging.getLogger(__name__)

RECONNECT_INTERVAL = 0.1  # seconds between tries to reach a starting worker


class HandoverLinks:
    """This worker's links to the other workers' hand-over sockets."""

    def __init__(self, role: WorkerRole, timeout: float) -> None:
        self.role = role
        self.timeout = timeout  # how long a restarting worker is waited for
        self._links: dict[int, socket.socket] = {}
        # one sender per link at a time: a full link is waited on by one task (anyio allows
        # no more), the others queue behind it in order (a thousand clients at once)
        self._sending: dict[int, anyio.Lock] = {}

    async def send(self, owner: int, fd: int, arrival: Arrival) -> bool:
        """Hand ``fd`` to worker ``owner``, waiting while its link is full and for a
        restarting worker up to the timeout; False if it could not be reached."""
        lock = self._sending.get(owner)
        if lock is None:
            lock = self._sending[owner] = anyio.Lock()
        async with lock:
            return await self._send(owner, fd, arrival)

    async def _send(self, owner: int, fd: int, arrival: Arrival) -> bool:
        deadline = time.monotonic() + self.timeout
        while True:
            link = self._links.get(owner)
            try:
                if link is None:
                    path = self.role.handover_socket(owner)
                    link = self._links[owner] = connect_handover(path)
                send_connection(link, fd, arrival)
                return True
            except BlockingIOError:
                await anyio.wait_writable(link)  # type: ignore[arg-type]
                continue
            except OSError:
                dropped = self._links.pop(owner, None)
                if dropped is not None:
                    dropped.close()
            if time.monotonic() >= deadline:
                log.error("worker %d did not take a connection within %.0f s", owner, self.timeout)
                return False
            await anyio.sleep(RECONNECT_INTERVAL)

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


def connect_handover(path: Any) -> socket.socket:
    """A non-blocking link to a worker's hand-over socket (OSError: none listens)."""
    link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        link.connect(str(path))
    except OSError:
        link.close()
        raise
    link.setblocking(False)
    return link


def arrival_of(
    conn: Connection, raw: anyio.abc.SocketStream, open_at: int, replay: bytes
) -> Arrival:
    """The hand-over message of ``conn`` (accepted on ``raw``)."""
    local = raw.extra(SocketAttribute.local_address)
    local_host, local_port = (str(local[0]), int(local[1])) if isinstance(local, tuple) else ("", 0)
    return Arrival(
        conn.peer, local_host, local_port, conn.stats.ssl, conn.peer_cert_user, open_at, replay
    )


def forget(raw: anyio.abc.SocketStream) -> None:
    """Close this worker's copy of the descriptor, no FIN: another worker has the socket."""
    transport = getattr(raw, "_transport", None)
    if transport is not None:
        transport.abort()


async def move_connection(
    links: HandoverLinks, conn: Connection, raw: anyio.abc.SocketStream, unread: bytes
) -> bool:
    """Hand ``conn`` (stopped at the frame that moves it, its output written) to the worker
    it moves to; False if that worker could not be reached."""
    assert conn.move_to is not None and conn.recording is not None
    replay = bytes(conn.recording) + unread
    arrival = replace(arrival_of(conn, raw, conn.move_at, replay), moves=conn.moves + 1)
    sock = raw.extra(SocketAttribute.raw_socket)
    if not await links.send(conn.move_to, sock.fileno(), arrival):
        return False
    forget(raw)
    log.debug("connection %s moved to worker %d", conn.peer, conn.move_to)
    return True
