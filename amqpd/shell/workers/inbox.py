"""Worker K (>= 1) of several: takes the connections worker 0 hands over, and the access
state and placement it replicates.

Theory of operation. Two Unix sockets in the runtime directory (amqpd/shell/workers/
role.py). The hand-over socket (SOCK_SEQPACKET) carries one message per connection: an
`Arrival` and the socket's descriptor (amqpd/shell/workers/handover.py); each becomes a
connection served by `Peers.handle` like an accepted one, which first replays the
handshake. The control socket carries, from worker 0, the whole access state and the
placement whenever they change (amqpd/shell/workers/front.py): the worker adopts them
(`Broker.replace_access`: new vhosts it owns are created, deleted ones deleted with their
queues, permissions change on open channels), stores them, and answers ``ok``.

Start-up: the worker opens its control socket last (after its admin socket and HTTP
apps), and its hand-over socket once it adopted the first state, before answering ``ok``;
worker 0 opens the node's listeners once every worker answered (front.py
`wait_for_workers`). So a client connecting the moment the node listens finds the vhosts
and the definitions file's topology on their worker, and ``amqpd ctl status`` finds every
worker. A restarted worker takes no hand-over before it has the current state either;
worker 0 retries meanwhile, as for any restarting worker (up to the handshake timeout).
"""

from __future__ import annotations

import logging
import pickle
import socket
import struct
from collections.abc import Callable, Coroutine
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from amqpd.shell.workers.handover import Arrival, receive_connection
from amqpd.shell.workers.placement import Placement
from amqpd.shell.workers.role import WorkerRole

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
Handle = Callable[[anyio.abc.SocketStream, Arrival], Coroutine[Any, Any, None]]
Adopt = Callable[[dict[str, Any], Placement], Coroutine[Any, Any, None]]


async def serve_links(
    role: WorkerRole,
    handle: Handle,
    adopt: Adopt,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Adopt each state worker 0 sends, and take hand-overs once the first is adopted (the
    hand-over socket listens before that state's ``ok`` is sent); until cancelled.
    ``started`` once the control socket listens."""
    listener: socket.socket | None = None
    adopted = anyio.Event()

    async def adopt_then_take(message: dict[str, Any], placement: Placement) -> None:
        nonlocal listener
        await adopt(message, placement)
        if listener is None:
            listener = listen_unix(role.handover_socket(role.index), socket.SOCK_SEQPACKET)
            adopted.set()

    try:
        async with anyio.create_task_group() as group:
            await group.start(serve_control, role, adopt_then_take)
            task_status.started()
            await adopted.wait()
            assert listener is not None
            await take_handovers(listener, handle)
    finally:
        if listener is not None:
            listener.close()
            with suppress(OSError):
                role.handover_socket(role.index).unlink()


async def take_handovers(listener: socket.socket, handle: Handle) -> None:
    """Take handed-over connections until cancelled."""
    async with anyio.create_task_group() as group:
        while True:
            await anyio.wait_readable(listener)
            try:
                link, _ = listener.accept()
            except BlockingIOError:
                continue
            link.setblocking(False)
            group.start_soon(_receive, link, handle, group)


async def _receive(link: socket.socket, handle: Handle, group: anyio.abc.TaskGroup) -> None:
    try:
        while True:
            await anyio.wait_readable(link)
            try:
                received = receive_connection(link)
            except BlockingIOError:
                continue
            except OSError as exc:
                log.error("bad hand-over message: %s", exc)
                continue
            if received is None:
                return
            arrival, fd = received
            try:
                sock = socket.socket(fileno=fd)
                stream = await anyio.abc.SocketStream.from_socket(sock)
            except OSError as exc:
                log.error("cannot take the connection of %s: %s", arrival.peer, exc)
                continue
            group.start_soon(handle, stream, arrival)
    finally:
        link.close()


async def serve_control(
    role: WorkerRole,
    adopt: Adopt,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Adopt each state worker 0 sends until cancelled."""
    path = role.control_socket(role.index)
    with suppress(FileNotFoundError):
        path.unlink()
    listener = await anyio.create_unix_listener(path, mode=0o600)
    task_status.started()
    async with listener:
        await listener.serve(lambda stream: _control(stream, adopt, role.count))


async def _control(stream: anyio.abc.SocketStream, adopt: Adopt, workers: int) -> None:
    buffered = b""
    async with stream:
        try:
            while True:
                while len(buffered) < 4:
                    buffered += await stream.receive()
                (size,) = _LENGTH.unpack_from(buffered)
                while len(buffered) < 4 + size:
                    buffered += await stream.receive()
                message = pickle.loads(buffered[4 : 4 + size])
                buffered = buffered[4 + size :]
                placement = Placement.from_json(message["placement"], workers)
                await adopt(message, placement)
                await stream.send(b"ok")
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return


def listen_unix(path: Path, kind: int) -> socket.socket:
    with suppress(FileNotFoundError):
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, kind)
    listener.bind(str(path))
    path.chmod(0o600)
    listener.listen(128)
    listener.setblocking(False)
    return listener
