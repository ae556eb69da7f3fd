"""amqpd as a subprocess on 127.0.0.1 (port 0) for tests that kill, stop or restart it."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
# the other listeners (--management-port, --prometheus-port, --tls-port) log theirs before
# the AMQP one
OTHER_LISTENING = re.compile(r"listening for (http|http/prometheus|AMQPS) on 127\.0\.0\.1:(\d+)")


class BrokerProcess:
    """``python -m amqpd --port PORT --data-dir DIR`` (PORT 0: a free one); ``port`` and
    ``url`` are set once it listens. Its stderr is drained in the background so it never
    blocks on a full pipe. ``restart()`` starts it again on the same port and data directory
    (after ``kill()``: a crash and recovery)."""

    def __init__(self, data_dir: Path, port: int = 0, extra: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        # more command-line options; AMQPD_TEST_WORKERS=N runs every such broker with
        # --workers N (CI runs these tests once more with 2) unless the test chose
        workers = os.environ.get("AMQPD_TEST_WORKERS")
        if workers and "--workers" not in extra:
            extra = ("--workers", workers, *extra)
        self.extra = extra
        # "http" (management), "http/prometheus", "AMQPS": the other listeners' ports
        self.other_ports: dict[str, int] = {}
        self._start(port)

    def _start(self, port: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "amqpd", "--port", str(port), "--data-dir", str(self.data_dir)),
                *self.extra,
            ],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: `pause` stops every worker too
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            other = OTHER_LISTENING.search(line)
            if other:
                self.other_ports[other.group(1)] = int(other.group(2))
                continue
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                break
        else:
            raise AssertionError(f"amqpd exited with {self.proc.wait()} before listening")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self._drain = threading.Thread(target=self.proc.stderr.read, daemon=True)
        self._drain.start()

    def restart(self) -> None:
        """Start the broker again on the same port and data directory; returns once it
        listens (its recovery is done)."""
        self._start(self.port)

    def pause(self) -> None:
        """SIGSTOP to the broker's processes (the supervisor and its workers, if any)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT to the broker's processes (if still there)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL (a crash). With workers, the supervisor is killed and its workers die with
        it (PR_SET_PDEATHSIG); this returns once every process of the node is gone, so a
        broker started next on the same port and data directory never meets a dying one."""
        members = _group_members(self.proc.pid)
        self.proc.send_signal(signal.SIGKILL)
        self.reap(timeout=10)
        _wait_exited(members, timeout=10)

    def reap(self, timeout: float | None = None) -> int:
        """Wait until the process exits (killed by someone else, say) and return its status."""
        status = self.proc.wait(timeout=timeout)
        self._close_pipe()
        return status

    def stop(self) -> None:
        """A clean stop (SIGCONT first, in case a test paused it); asserts exit status 0."""
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0
        self._close_pipe()

    def _close_pipe(self) -> None:
        self._drain.join(timeout=10)
        # closing a pipe another thread still reads would block for good
        assert not self._drain.is_alive(), "a process of the broker still holds its stderr"
        assert self.proc.stderr is not None
        self.proc.stderr.close()


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat_file:
                stat = stat_file.read()
        except OSError:  # gone meanwhile
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def _wait_exited(pids: list[int], timeout: float) -> None:
    """Wait until each of ``pids`` has exited (a pidfd turns readable when it does)."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"process {pid} of the killed broker still runs after {timeout} s"
        finally:
            os.close(pidfd)
