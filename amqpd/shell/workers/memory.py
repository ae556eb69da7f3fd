"""The node's memory, for the memory alarm of a node of several workers.

RabbitMQ's memory alarm is node-wide: when the node uses more than its high watermark,
every publisher on every connection is blocked. With workers, the node is the supervisor
and its workers, so each worker measures all of them (`NodeMemory`): every worker writes
its pid to ``wK.pid`` in the runtime directory when it starts, and the probe sums the
resident sets of those processes and the supervisor's from /proc. Each worker compares
the same total with the same watermark, so the alarm rises and clears on all of them
together (within one measurement interval) and each blocks its own publishers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from amqpd.shell.workers.role import WorkerRole

PID_REFRESH = 1.0  # seconds between re-reads of the pid files (a restarted worker's new pid)
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def pid_file(role: WorkerRole, index: int) -> Path:
    return role.runtime / f"w{index}.pid"


def write_pid(role: WorkerRole) -> None:
    """Announce this worker's pid (written aside and renamed)."""
    path = pid_file(role, role.index)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(str(os.getpid()))
    scratch.replace(path)


class NodeMemory:
    """A memory probe: resident bytes of the supervisor and every worker."""

    def __init__(self, role: WorkerRole) -> None:
        self.role = role
        self._pids: list[int] = []
        self._read_at = -PID_REFRESH

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self._read_at >= PID_REFRESH:
            self._read_at = now
            self._pids = [os.getppid(), *self._worker_pids()]
        return sum(resident_bytes(pid) for pid in self._pids)

    def _worker_pids(self) -> list[int]:
        pids = []
        for index in range(self.role.count):
            try:
                pids.append(int(pid_file(self.role, index).read_text()))
            except (OSError, ValueError):
                continue  # starting, or restarting
        return pids


def resident_bytes(pid: int) -> int:
    """Process ``pid``'s resident set now (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0  # gone (a worker restarting)
