"""Worker K's links (amqpd/shell/workers/inbox.py): no hand-over before the first state."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from amqpd.shell.workers.front import encode_state
from amqpd.shell.workers.handover import Arrival, send_connection
from amqpd.shell.workers.inbox import serve_links
from amqpd.shell.workers.moves import connect_handover
from amqpd.shell.workers.placement import Placement
from amqpd.shell.workers.role import WorkerRole


def test_a_worker_takes_hand_overs_only_once_it_adopted_the_first_state(tmp_path: Path) -> None:
    """A client handed over the moment the node listens must find its vhost: worker K opens
    its hand-over socket only after it adopted worker 0's first state, and before it says
    so (worker 0 opens the node's listeners on that answer)."""
    role = WorkerRole(1, 2, tmp_path)
    adopted: list[Any] = []
    arrivals: list[Arrival] = []
    arrival = Arrival("10.0.0.1:5555", "127.0.0.1", 5672, False, None, 0, b"AMQP")

    async def adopt(message: dict[str, Any], placement: Placement) -> None:
        adopted.append((message["access"], placement.owner("v1")))

    async def main() -> None:
        took = anyio.Event()

        async def handle(stream: anyio.abc.SocketStream, came: Arrival) -> None:
            arrivals.append(came)
            await stream.aclose()
            took.set()

        async with anyio.create_task_group() as group:
            await group.start(serve_links, role, handle, adopt)
            with pytest.raises(OSError):  # not before the state
                connect_handover(role.handover_socket(1))
            control = await anyio.connect_unix(role.control_socket(1))
            placement = Placement(2, {"v1": 1})
            await control.send(encode_state("access-1", placement, {}, {}))
            assert await control.receive(2) == b"ok"
            link = connect_handover(role.handover_socket(1))  # listening before the "ok"
            client, server = socket.socketpair()
            with link, client, server:
                send_connection(link, server.fileno(), arrival)
                with anyio.fail_after(10):
                    await took.wait()
            await control.aclose()
            group.cancel_scope.cancel()

    anyio.run(main)
    assert adopted == [("access-1", 1)]
    assert arrivals == [arrival]
