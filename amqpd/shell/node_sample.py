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
