"""This process's place among the workers, and where the workers' sockets are.

The supervisor (amqpd/shell/workers/supervisor.py) starts each worker with the same command
line and three variables: ``AMQPD_WORKER_INDEX`` (0..N-1), ``AMQPD_WORKER_COUNT`` and
``AMQPD_WORKER_DIR`` (a private runtime directory for the Unix sockets between workers: a
short path, whatever the data directory's length); a fourth, ``AMQPD_WORKER_REJOINING``,
when it restarts one that died. Worker 0 is the front: the public
listeners (AMQP, AMQPS, management, Prometheus, the admin socket) and the data directory
itself; worker K >= 1 keeps its store in ``DATA/shard-K`` and is reached through its sockets
in the runtime directory only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

INDEX_VARIABLE = "AMQPD_WORKER_INDEX"
COUNT_VARIABLE = "AMQPD_WORKER_COUNT"
DIR_VARIABLE = "AMQPD_WORKER_DIR"
READY_FD_VARIABLE = "AMQPD_WORKER_READY_FD"
# set when the supervisor restarts a worker that died (the others kept serving)
REJOINING_VARIABLE = "AMQPD_WORKER_REJOINING"


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """Worker ``index`` of ``count``; ``runtime`` holds the sockets between them."""

    index: int
    count: int
    runtime: Path
    # restarted after it died while the others served: their topology is the node's
    # (amqpd/model/replica_apply.py "rejoining")
    rejoining: bool = False

    @property
    def front(self) -> bool:
        """Worker 0: the public listeners, the placement, the access state's authority."""
        return self.index == 0

    def handover_socket(self, index: int) -> Path:
        """Where worker ``index`` takes connections handed to it (SOCK_SEQPACKET, fds)."""
        return self.runtime / f"w{index}.handover"

    def control_socket(self, index: int) -> Path:
        """Where worker ``index`` takes the access state and placement from worker 0."""
        return self.runtime / f"w{index}.control"

    def management_socket(self, index: int) -> Path:
        """Where worker ``index`` (>= 1) serves its management API (HTTP over a Unix socket)."""
        return self.runtime / f"w{index}.management"

    def prometheus_socket(self, index: int) -> Path:
        """Where worker ``index`` (>= 1) serves its Prometheus endpoints."""
        return self.runtime / f"w{index}.prometheus"

    def forward_socket(self, index: int) -> Path:
        """Where worker ``index`` takes the publishes other workers forward to its queues
        (a Unix stream socket, amqpd/shell/workers/forward_links.py)."""
        return self.runtime / f"w{index}.forward"

    def with_index(self, index: int) -> WorkerRole:
        """Worker ``index`` of the same node."""
        return WorkerRole(index, self.count, self.runtime)  # (never rejoining: another's)

    def data_dir(self, data_dir: Path | None) -> Path | None:
        """This worker's data directory: the given one for worker 0, ``shard-K`` inside it
        for worker K."""
        if data_dir is None or self.index == 0:
            return data_dir
        return data_dir / f"shard-{self.index}"


def from_environment(environ: Mapping[str, str] | None = None) -> WorkerRole | None:
    """The role the supervisor gave this process (None: not a worker of several)."""
    env = os.environ if environ is None else environ
    if INDEX_VARIABLE not in env:
        return None
    return WorkerRole(
        int(env[INDEX_VARIABLE]),
        int(env[COUNT_VARIABLE]),
        Path(env[DIR_VARIABLE]),
        bool(env.get(REJOINING_VARIABLE)),
    )
