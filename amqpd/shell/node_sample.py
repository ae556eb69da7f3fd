"""What the shell measures about the broker process for the statistics (`NodeSample`).

Part of the I/O shell: it reads /proc, the resource limits, the file system and the clock,
which the core never does. The management API, the Prometheus exporter and ``amqpd ctl
status`` take a fresh sample when asked (a few system calls, well under a millisecond).
"""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path
from typing import Any

from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from amqpd.shell import resources
from amqpd.shell.workers.memory import resident_bytes
from amqpd.shell.workers.role import WorkerRole


def node_name() -> str:
    """RabbitMQ-style node name: ``amqpd@<short host name>``."""
    return f"amqpd@{socket.gethostname().split('.')[0] or 'localhost'}"


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _fd_limit() -> int:
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _store_bytes(data_dir: Path | None) -> int:
    """Bytes of the files in the data directory (the SQLite store, its WAL)."""
    if data_dir is None:
        return 0
    total = 0
    try:
        for entry in os.scandir(data_dir):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


def sample(
    broker: Broker,
    started: float,
    data_dir: Path | None,
    sockets: int,
    listeners: list[dict[str, Any]],
) -> NodeSample:
    """Measure the process now. ``started``: unix time the broker started; ``sockets``:
    client sockets open; ``listeners``: RabbitMQ's ``listeners`` items."""
    alarms = broker.alarms
    disk_free = 0
    if data_dir is not None:
        try:
            disk_free = resources.disk_free(data_dir)
        except OSError:
            disk_free = 0
    fd_total = _fd_limit()
    return NodeSample(
        name=broker.statistics.node,
        uptime=int((time.time() - started) * 1000),
        mem_used=resources.rss_bytes(),
        mem_limit=alarms.memory_limit or 0,
        disk_free=disk_free,
        disk_free_limit=alarms.disk_free_limit or 0,
        fd_used=_open_fds(),
        fd_total=fd_total,
        sockets_used=sockets,
        sockets_total=fd_total,
        proc_used=1,
        proc_total=1,
        processors=os.cpu_count() or 1,
        run_queue=0,
        os_pid=str(os.getpid()),
        store_bytes=_store_bytes(data_dir),
        listeners=list(listeners),
    )


def of_node(sample: NodeSample, worker: WorkerRole | None) -> NodeSample:
    """``sample`` as this process's share of its node's figures. With several workers
    they are summed for the node (the management gateway, ``amqpd ctl status``: amqpd/
    shell/workers/gateway_merge.py, node.py), and worker 0 speaks for the supervisor too:
    its pid is the node's OS pid and its memory counts with worker 0's, so the node's
    memory is what the memory alarm compares (amqpd/shell/workers/memory.py)."""
    if worker is not None and worker.count > 1 and worker.front:
        supervisor = os.getppid()
        sample.os_pid = str(supervisor)
        sample.mem_used += resident_bytes(supervisor)
    return sample
