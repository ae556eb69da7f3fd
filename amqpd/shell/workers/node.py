"""What a `Server` does differently as one worker of several (``--workers N``, N > 1).

Worker 0 (the front) places vhosts, gates every new connection (amqpd/shell/workers/
front.py) and replicates the access state after each change; worker K >= 1 listens on
its Unix sockets only: hand-overs and the control link (amqpd/shell/workers/inbox.py),
its management API and Prometheus endpoints for worker 0's gateway, and its admin socket
in its own data directory (``amqpd ctl --data-dir DATA/shard-K`` reaches it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from amqpd.model.broker import Broker
from amqpd.shell.workers import placement as placements
from amqpd.shell.workers.front import Front
from amqpd.shell.workers.handover import Arrival
from amqpd.shell.workers.inbox import serve_control, serve_handover
from amqpd.shell.workers.placement import Placement
from amqpd.shell.workers.role import WorkerRole

log = logging.getLogger(__name__)

Handle = Callable[[anyio.abc.SocketStream, Arrival], Coroutine[Any, Any, None]]


class WorkerNode:
    """One worker's part in the node: its role, the placement, the links."""

    def __init__(self, role: WorkerRole, broker: Broker, data_dir: Path | None) -> None:
        self.role = role
        self.broker = broker
        self.data_dir = data_dir  # this worker's own (DATA or DATA/shard-K)
        self.placement = placements.load(data_dir, role.count)
        self.front: Front | None = None
        if role.front:
            # until the store is open, the vhosts seen are those in worker 0's store (some
            # perhaps created while it ran as one process): they stay on worker 0
            self.placement.fresh = True
            broker.hosts = lambda name: self.placement.place(name) == 0
        else:
            broker.hosts = lambda name: self.placement.owner(name) == role.index

    async def start_front(self, group: anyio.abc.TaskGroup, handshake_timeout: float) -> Front:
        """Worker 0, once its store is open: record the placement, link to the workers."""
        self.placement.fresh = False  # vhosts from now on are new ones
        self._forget_deleted()
        placements.save(self.data_dir, self.placement)
        self.front = Front(
            self.role, self.placement, handshake_timeout, lambda: self.broker.access.state
        )
        group.start_soon(self.front.run_control)
        return self.front

    async def start_back(
        self,
        group: anyio.abc.TaskGroup,
        handle: Handle,
        adopt: Callable[[Any], Awaitable[None]],
    ) -> None:
        """Worker K: take hand-overs and the state from worker 0."""

        async def adopt_state(access: Any, placement: Placement) -> None:
            self.placement = placement
            placements.save(self.data_dir, placement)
            await adopt(access)

        await group.start(serve_control, self.role, adopt_state)
        await group.start(serve_handover, self.role, handle)

    async def access_saved(self) -> None:
        """Worker 0: the access state changed and is stored; record the placement and
        have every worker apply both."""
        if self.front is None:
            return
        self._forget_deleted()
        for name in self.broker.access.state.vhosts:
            self.placement.place(name)
        placements.save(self.data_dir, self.placement)
        await self.front.replicate()

    def _forget_deleted(self) -> None:
        self.placement.keep_only(self.broker.access.state.vhosts)

    def close(self) -> None:
        if self.front is not None:
            self.front.close()
