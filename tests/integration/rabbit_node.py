"""A private RabbitMQ node for tests (Debian's rabbitmq-server, started as the ``rabbitmq``
user on spare ports with its own node name and directories; optional plugins)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pika
import pytest

from tests.ports import spare_port

RABBIT_START_TIMEOUT = 90.0
BOOT_ATTEMPTS = 3


def _rabbit_unavailable_reason() -> str | None:
    if shutil.which("rabbitmq-server") is None or shutil.which("rabbitmqctl") is None:
        return "rabbitmq-server is not installed"
    if os.geteuid() != 0:
        return "RabbitMQ can only be started as the rabbitmq user from root (not root here)"
    return None


RABBIT_REASON = _rabbit_unavailable_reason()


class RabbitNode:
    """A private RabbitMQ node for this test session."""

    def __init__(self, prefix: str = "jms", plugins: tuple[str, ...] = ()) -> None:
        self.port = spare_port()
        self.node = f"{prefix}{os.getpid()}@localhost"
        self.base = Path(tempfile.mkdtemp(prefix=f"{prefix}-rabbit-"))
        shutil.chown(self.base, "rabbitmq")
        if plugins:  # e.g. rabbitmq_shovel (it ships with Debian's rabbitmq-server)
            enabled = self.base / "enabled_plugins"
            enabled.write_text(f"[{','.join(plugins)}].\n")
            shutil.chown(enabled, "rabbitmq")
        self.log_path = self.base / "server.out"
        self._boot(keep_port=False)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _boot(self, keep_port: bool) -> None:
        """Boot the node in the background (`wait` waits for it). A node that exits at once
        (status 0 and nothing in its log: its distribution port was taken, or its name was
        still registered after a kill) is booted again, up to BOOT_ATTEMPTS times, on a new
        distribution port and, unless keep_port, a new AMQP port."""
        self.ready = threading.Event()
        self.error: str | None = None
        self.version = "?"
        threading.Thread(
            target=self._boot_attempts, args=(keep_port,), name="rabbit-boot", daemon=True
        ).start()

    def _boot_attempts(self, keep_port: bool) -> None:
        for attempt in range(BOOT_ATTEMPTS):
            if attempt and not keep_port:
                self.port = spare_port()
            self.dist_port = spare_port()
            self._launch()
            self.error = self._wait_ready()
            if self.error is None or not self.error.startswith("rabbitmq-server exited"):
                break
            self._kill_leftovers(spare_epmd=True)
        self.ready.set()

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

    def kill_and_restart(self) -> None:
        """SIGKILL every process of the node (a crash), then boot it again on the same AMQP
        port and data, and wait until it serves (`wait` then reports how it went)."""
        self._kill_leftovers(spare_epmd=True)
        self.proc.wait()
        self._boot(keep_port=True)
        self.ready.wait(RABBIT_START_TIMEOUT * BOOT_ATTEMPTS)

    def _wait_ready(self) -> str | None:
        """None once the node accepts an AMQP connection, else why it did not."""
        deadline = time.monotonic() + RABBIT_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"rabbitmq-server exited ({self.proc.returncode}): {self.tail()}"
            try:
                conn = pika.BlockingConnection(
                    pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
                )
            except pika.exceptions.AMQPError:
                time.sleep(0.2)  # no event to wait for: the node opens its port when ready
                continue
            version = conn._impl.server_properties.get("version", b"?")
            self.version = version.decode() if isinstance(version, bytes) else str(version)
            conn.close()
            return None
        return f"RabbitMQ did not open port {self.port} within {RABBIT_START_TIMEOUT}s"

    def tail(self) -> str:
        """The end of what the node printed and logged (Debian's wrapper sends its console
        output to /var/log/rabbitmq/startup_log, so the node's own log is read too)."""
        parts = []
        for path in (self.log_path, self.base / "log" / f"{self.node}.log"):
            with contextlib.suppress(OSError):
                parts.append(path.read_text(errors="replace")[-1000:])
        return "\n".join(part for part in parts if part)

    def wait(self) -> None:
        self.ready.wait(RABBIT_START_TIMEOUT * BOOT_ATTEMPTS)
        if self.error or not self.ready.is_set():
            pytest.fail(f"RabbitMQ node did not start: {self.error}")

    def stop(self) -> None:
        """Stop the node (after it finished booting), then make sure nothing is left."""
        self.ready.wait(RABBIT_START_TIMEOUT * BOOT_ATTEMPTS)
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
