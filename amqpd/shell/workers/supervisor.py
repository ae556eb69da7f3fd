"""The supervisor of ``--workers N``: starts the workers, restarts one that dies, stops them.

Theory of operation. ``amqpd --workers N`` (N > 1) checks its settings, then becomes this
supervisor instead of a broker. It creates a private runtime directory (the workers' Unix
sockets; amqpd/shell/workers/role.py) and starts N workers, each ``python -m amqpd`` with
the same arguments plus the worker variables, and a pipe on which the worker writes one
byte once it serves. States::

    STARTING --every worker ready--> SERVING --SIGTERM/SIGINT--> STOPPING --all exited--> done
    STARTING --a worker exits with a status--> STOPPING (the node's exit status: a refused
                                           setting, a store that cannot open, a port in use;
                                           one killed by a signal is restarted, as below)
    SERVING --a worker exits--> SERVING (restarted at once; its store recovers every
                                         confirmed message; the others keep serving)
    SERVING --a worker died RESTART_LIMIT times within RESTART_WINDOW s--> STOPPING (exit 1)

As RabbitMQ restarts a crashed queue process while the node stays up, a worker killed with
kill -9 is restarted and recovers its store; its clients reconnect (their connection was on
it), the other workers' clients notice nothing. It is started *rejoining*
(``AMQPD_WORKER_REJOINING``): of a spread vhost's exchanges and bindings, the others' (which
kept serving) win over what its store recovered (amqpd/model/replica_apply.py), so what was
deleted while it was down stays deleted. Each worker's ready message names the ports
it bound; worker 0 restarted gets the same ones (``--port 0`` picks a port once per node).
The restart limit mirrors an OTP supervisor's intensity: a worker that cannot stay up
stops the node rather than loop.
SIGHUP is passed on (each worker reopens its log file, quietly); the supervisor reopens its
own and logs it once for the node (amqpd/shell/hangup.py). Everything waits on one selector:
the signals arrive through ``signal.set_wakeup_fd`` (SIGCHLD included), the ready bytes
through their pipes.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from amqpd.shell.hangup import Hangups
from amqpd.shell.workers import runtime_dir
from amqpd.shell.workers.role import (
    COUNT_VARIABLE,
    DIR_VARIABLE,
    INDEX_VARIABLE,
    READY_FD_VARIABLE,
    REJOINING_VARIABLE,
    from_environment,
)

log = logging.getLogger("amqpd.supervisor")

RESTART_LIMIT = 5  # restarts of one worker ...
RESTART_WINDOW = 60.0  # ... within this many seconds stop the node
PR_SET_PDEATHSIG = 1  # prctl(2)
STOP_GRACE = 30.0  # seconds a worker has to close its connections and store on SIGTERM


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    ready_fd: int  # read end of its ready pipe (-1 once ready or gone)
    ready: bool = False
    deaths: deque[float] = field(default_factory=deque)


class Supervisor:
    """Runs ``count`` workers of ``argv`` (the broker's own arguments)."""

    def __init__(
        self, argv: Sequence[str], count: int, reopen_logs: Callable[[], bool] | None = None
    ) -> None:
        self.argv = list(argv)
        self.hangup = Hangups(reopen_logs)  # SIGHUP: its own log file, said once for the node
        self.count = count
        self.runtime = runtime_dir.create()  # the workers' sockets; stale ones removed
        self.workers: dict[int, _Worker] = {}
        self.selector = selectors.DefaultSelector()
        self.stopping = False
        self.serving = False  # every worker was ready once: deaths are restarted from now
        self.front_ports: list[str] = []  # ["--port", "5672", ...]: worker 0's, once bound
        self.status = 0
        self.fatal = ""  # why a worker could not start (`report_fatal`)

    def run(self) -> int:
        """Serve until a signal stops the node; the exit status."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(wake_read, False)
        previous = signal.set_wakeup_fd(wake_write)
        handlers = {
            signum: signal.signal(signum, lambda *_: None)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        self.selector.register(wake_read, selectors.EVENT_READ, None)
        try:
            for index in range(self.count):
                self._start(index)
            while self.workers:
                for key, _ in self.selector.select():
                    if key.data is None:
                        self._signals(os.read(wake_read, 512))
                    else:
                        self._ready(key.data)
                self._reap()
        finally:
            signal.set_wakeup_fd(previous)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            self.selector.close()
            os.close(wake_read)
            os.close(wake_write)
            self._stop_all()
            if self.fatal:  # the reason, last: after the other workers' shutdown lines
                log.error("%s", self.fatal)
            shutil.rmtree(self.runtime, ignore_errors=True)
        return self.status

    def _start(self, index: int, rejoining: bool = False) -> None:
        ready_read, ready_write = os.pipe()
        env = dict(os.environ)
        env.update(
            {
                INDEX_VARIABLE: str(index),
                COUNT_VARIABLE: str(self.count),
                DIR_VARIABLE: str(self.runtime),
                READY_FD_VARIABLE: str(ready_write),
            }
        )
        if rejoining:  # the others served while it was down (amqpd/model/replica_apply.py)
            env[REJOINING_VARIABLE] = "1"
        again = self.front_ports if index == 0 else []  # the same ports as before
        process = subprocess.Popen(
            [sys.executable, "-m", "amqpd", *self.argv, *again],
            env=env,
            pass_fds=(ready_write,),
            preexec_fn=_killed_with(os.getpid()),  # the supervisor is single-threaded
        )
        os.close(ready_write)
        old = self.workers.get(index)
        worker = _Worker(index, process, ready_read)
        if old is not None:
            worker.deaths = old.deaths
        self.workers[index] = worker
        self.selector.register(ready_read, selectors.EVENT_READ, worker)

    def _ready(self, worker: _Worker) -> None:
        data = os.read(worker.ready_fd, 4096)
        self._close_ready(worker)
        if not data:
            return  # it exited before serving: `_reap` decides
        worker.ready = True
        if worker.index == 0 and not self.front_ports:
            with suppress(ValueError):
                bound = json.loads(data)
                self.front_ports = [
                    item for option, port in bound.items() if port for item in (option, str(port))
                ]
        if all(w.ready for w in self.workers.values()) and len(self.workers) == self.count:
            if not self.serving:
                log.info("serving with %d workers (pids %s)", self.count, self._pids())
            self.serving = True

    def _close_ready(self, worker: _Worker) -> None:
        if worker.ready_fd >= 0:
            self.selector.unregister(worker.ready_fd)
            os.close(worker.ready_fd)
            worker.ready_fd = -1

    def _signals(self, received: bytes) -> None:
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT) and not self.stopping:
                log.info("received %s; stopping the workers", signal.Signals(signum).name)
                self.stopping = True
                self._signal_all(signal.SIGTERM)
            elif signum == signal.SIGHUP:
                self._signal_all(signal.SIGHUP)  # each worker reopens its own, quietly
                self.hangup()

    def _signal_all(self, signum: int) -> None:
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signum)

    def _reap(self) -> None:
        """Act on every worker that exited: restart it, or stop the node."""
        for index, worker in list(self.workers.items()):
            code = worker.process.poll()
            if code is None:
                continue
            self._close_ready(worker)
            del self.workers[index]
            if self.stopping:
                continue
            if not self.serving and code > 0:  # it refused to start (a setting, the store)
                log.error("worker %d exited with status %s while starting; stopping", index, code)
                self.fatal = self.fatal or _reported(self.runtime, index)
                self._stop(code if code > 0 else 1)
                continue
            now = time.monotonic()
            worker.deaths.append(now)
            while worker.deaths and worker.deaths[0] < now - RESTART_WINDOW:
                worker.deaths.popleft()
            if len(worker.deaths) > RESTART_LIMIT:
                log.error(
                    "worker %d died %d times within %.0f s; stopping the node",
                    index,
                    len(worker.deaths),
                    RESTART_WINDOW,
                )
                self._stop(1)
                continue
            reason = _reported(self.runtime, index)  # a worker that served may report too
            because = f": {reason}" if reason else ""
            log.error("worker %d exited (%s%s); restarting it", index, _describe(code), because)
            self._start(index, rejoining=True)
            self.workers[index].deaths = worker.deaths

    def _stop(self, status: int) -> None:
        self.status = status
        self.stopping = True
        self._signal_all(signal.SIGTERM)

    def _stop_all(self) -> None:
        """SIGTERM to every worker still running; SIGKILL after STOP_GRACE."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for worker in list(self.workers.values()):
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(
                    "worker %d did not stop within %.0f s; killing it", worker.index, STOP_GRACE
                )
                worker.process.kill()
                worker.process.wait()
        self.workers.clear()

    def _pids(self) -> str:
        return ", ".join(str(self.workers[i].process.pid) for i in sorted(self.workers))


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"


FATAL_SUFFIX = ".fatal"  # wK.fatal in the runtime directory: why worker K could not start
LOG_VARIABLE = "AMQPD_SUPERVISOR_LOG"  # the logging settings, for the exec'd supervisor


def become_supervisor(argv: Sequence[str], count: int, log: dict[str, str | None]) -> NoReturn:
    """Replace this process (the ``amqpd`` command, with the whole broker imported) by a
    lean ``python -m amqpd.cli.supervise``: the node's main process then holds
    ~10 MB instead of ~50. Same pid, so a service manager and kill -9 see no difference."""
    os.environ[LOG_VARIABLE] = json.dumps(log)
    sys.stdout.flush()
    sys.stderr.flush()
    command = [sys.executable, "-m", "amqpd.cli.supervise", str(count), *argv]
    os.execv(sys.executable, command)


def _killed_with(supervisor: int) -> Callable[[], None]:
    """In the forked child before it execs the worker: SIGKILL when the supervisor dies
    (PR_SET_PDEATHSIG survives exec), set before the worker runs a line of Python, so a
    worker still starting (or stopped while starting) never outlives a killed node."""
    libc = ctypes.CDLL(None, use_errno=True)

    def set_death_signal() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor:  # died between the fork and the prctl
            os._exit(1)

    return set_death_signal


def die_with_supervisor() -> None:
    """In a worker (Linux): be killed when the supervisor dies, so kill -9 of the node's
    main process is kill -9 of the node (no orphan workers keeping the ports or stores).
    A worker that finds its supervisor already gone exits."""
    supervisor = os.getppid()
    with suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor or supervisor == 1:
        os._exit(1)


def report_fatal(message: str) -> bool:
    """In a worker of several: leave ``message``, why it cannot start, for the supervisor
    (True), which logs it once every worker stopped; False elsewhere (log it yourself)."""
    role = from_environment()
    if role is None or role.count <= 1:
        return False
    try:
        (role.runtime / f"w{role.index}{FATAL_SUFFIX}").write_text(message)
    except OSError:
        return False
    return True


def _reported(runtime: Path, index: int) -> str:
    """What worker ``index`` reported before it exited (`report_fatal`), if anything."""
    path = runtime / f"w{index}{FATAL_SUFFIX}"
    try:
        reason = path.read_text()
        path.unlink()  # read once: a later exit of its successor is its own
    except OSError:
        return ""
    return reason


def report_ready(ports: dict[str, int]) -> None:
    """In a worker: tell the supervisor this worker serves, and on which ports (once; no-op
    elsewhere). Worker 0 restarted is given the same ports (``--port 0`` picks a port once
    per node, not once per worker 0)."""
    fd = os.environ.pop(READY_FD_VARIABLE, None)
    if fd is None:
        return
    try:
        os.write(int(fd), json.dumps(ports).encode())
        os.close(int(fd))
    except OSError:
        pass
