"""A private RabbitMQ node for tests (Debian's rabbitmq-server, started as the ``rabbitmq``
user on spare ports with its own node name and directories; optional plugins)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pika
import pytest

RABBIT_START_TIMEOUT = 90.0
RESTART_ATTEMPTS = 3


def _rabbit_unavailable_reason() -> str | None:
    if shutil.which("rabbitmq-server") is None or shutil.which("rabbitmqctl") is None:
        return "rabbitmq-server is not installed"
    if os.geteuid() != 0:
        return "RabbitMQ can only be started as the rabbitmq user from root (not root here)"
    return None


RABBIT_REASON = _rabbit_unavailable_reason()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RabbitNode:
    """A private RabbitMQ node for this test session."""

    def __init__(self, prefix: str = "jms", plugins: tuple[str, ...] = ()) -> None:
        self.port = _free_port()
        self.dist_port = _free_port()
        self.node = f"{prefix}{os.getpid()}@localhost"
        self.base = Path(tempfile.mkdtemp(prefix=f"{prefix}-rabbit-"))
        shutil.chown(self.base, "rabbitmq")
        if plugins:  # e.g. rabbitmq_shovel (it ships with Debian's rabbitmq-server)
            enabled = self.base / "enabled_plugins"
            enabled.write_text(f"[{','.join(plugins)}].\n")
            shutil.chown(enabled, "rabbitmq")
        self.log_path = self.base / "server.out"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self._launch()

    def _launch(self) -> None:
        env = (
            f"RABBITMQ_NODE_PORT={self.port} RABBITMQ_DIST_PORT={self.dist_port} "
            f"RABBITMQ_NODENAME={self.node} RABBITMQ_MNESIA_BASE={self.base}/mnesia "
            f"RABBITMQ_LOG_BASE={self.base}/log "
            f"RABBITMQ_ENABLED_PLUGINS_FILE={self.base}/enabled_plugins"
        )
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                ["su", "rabbitmq", "-s", "/bin/bash", "-c", f"{env} exec rabbitmq-server"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.ready = threading.Event()
        self.error: str | None = None
        self.version = "?"
        threading.Thread(target=self._wait_ready, name="rabbit-wait", daemon=True).start()

    def kill_and_restart(self) -> None:
        """SIGKILL every process of the node (a crash), then boot it again on the same
        ports and data, and wait until it serves (`wait` then reports how it went).

        A node booted right after the kill sometimes exits at once (exit status 0, seen on
        a loaded machine: the killed node's name is still registered for a moment), so
        such a boot is tried again, up to RESTART_ATTEMPTS times."""
        self._kill_leftovers(spare_epmd=True)
        self.proc.wait()
        for _attempt in range(RESTART_ATTEMPTS):
            self._launch()
            self.ready.wait(RABBIT_START_TIMEOUT + 5)
            if self.error is None or not self.error.startswith("rabbitmq-server exited"):
                return
            self._kill_leftovers(spare_epmd=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + RABBIT_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.error = f"rabbitmq-server exited ({self.proc.returncode}): {self.tail()}"
                break
            try:
                conn = pika.BlockingConnection(
                    pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
                )
            except pika.exceptions.AMQPError:
                time.sleep(0.2)  # no event to wait for: the node opens its port when ready
                continue
            self.version = conn._impl.server_properties.get("version", b"?")
            if isinstance(self.version, bytes):
                self.version = self.version.decode()
            conn.close()
            break
        else:
            self.error = f"RabbitMQ did not open port {self.port} within {RABBIT_START_TIMEOUT}s"
        self.ready.set()

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def wait(self) -> None:
        self.ready.wait(RABBIT_START_TIMEOUT + 5)
        if self.error or not self.ready.is_set():
            pytest.fail(f"RabbitMQ node did not start: {self.error}")

    def stop(self) -> None:
        """Stop the node (after it finished booting), then make sure nothing is left."""
        self.ready.wait(RABBIT_START_TIMEOUT)
        if self.error is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    ["rabbitmqctl", "-n", self.node, "stop"],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        self._kill_leftovers()
        shutil.rmtree(self.base, ignore_errors=True)

    def _kill_leftovers(self, spare_epmd: bool = False) -> None:
        """SIGKILL any process of *this* node (found by its RABBITMQ_NODENAME); the Erlang
        port mapper it may have started is spared if asked (other nodes use it)."""
        marker = f"RABBITMQ_NODENAME={self.node}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if spare_epmd and _command(entry) == "epmd":
                continue
            if marker in environ.split(b"\0"):
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_rabbit: RabbitNode | None = None
_rabbit_lock = threading.Lock()


def rabbit_node() -> RabbitNode:
    """The session's RabbitMQ node, started on first use (stopped at interpreter exit)."""
    global _rabbit
    with _rabbit_lock:
        if _rabbit is None:
            _rabbit = RabbitNode()
            atexit.register(_rabbit.stop)
        return _rabbit


def _command(entry: Path) -> str:
    try:
        return (entry / "comm").read_text().strip()
    except OSError:
        return ""
