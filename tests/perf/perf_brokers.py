"""Broker processes for tests/perf/compare.py: amqpd and a private RabbitMQ node.

Each broker gets its own port and directory and is stopped by what started it: amqpd with
SIGTERM to its own pid, RabbitMQ with ``rabbitmqctl stop -n NODE``. The pid each exposes
is the process whose /proc figures are the broker's (amqpd's python, RabbitMQ's beam.smp).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STOP_TIMEOUT = 30.0


def wait_for_port(port: int, timeout: float) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port} after {timeout:g} s") from None
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


class Amqpd:
    """``python -m amqpd`` as a subprocess."""

    def __init__(
        self,
        port: int,
        data_dir: Path,
        sync: str = "full",
        source: Path | None = None,
        name: str = "amqpd",
        workers: int = 1,
    ) -> None:
        self.workers = workers  # --workers
        self.port = port
        self.data_dir = data_dir
        self.sync = sync
        self.source = source  # a directory holding the amqpd packages to run, if not ours
        self.name = name
        self.env: dict[str, str] = {}  # more settings (AMQPD_*) for the next start
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The broker's amqp:// URL."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        """The broker process."""
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Start on a fresh data directory and wait for the port."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        log = (self.data_dir.parent / "amqpd.log").open("ab")
        # the HTTP listeners (management, Prometheus) stay on, as a user runs it, on free ports;
        # with several workers each vhost lives on one unless the run spreads them (env)
        env = {
            **os.environ,
            "AMQPD_MANAGEMENT_PORT": "0",
            "AMQPD_PROMETHEUS_PORT": "0",
            "AMQPD_SPREAD_VHOSTS": "",
            **self.env,
        }
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqpd",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                "--log-level",
                "warning",
                "--sync",
                self.sync,
                "--workers",
                str(self.workers),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.source,
            env=env,
        )
        try:
            wait_for_port(self.port, 30)
        except TimeoutError:
            self.stop()
            raise

    def add_vhosts(self, names: list[str]) -> None:
        """Create vhosts with every permission for guest (through the admin socket)."""
        env = dict(os.environ)
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        for name in names:
            for args in (
                ("vhosts", "add", name),
                ("users", "set-permissions", "guest", "--vhost", name, ".*", ".*", ".*"),
            ):
                done = subprocess.run(
                    [sys.executable, "-m", "amqpd", *args, "--data-dir", str(self.data_dir)],
                    capture_output=True,
                    text=True,
                    cwd=self.source,
                    env=env,
                )
                if done.returncode != 0 and "already exists" not in done.stderr:
                    raise RuntimeError(f"amqpd {' '.join(args)}: {done.stderr.strip()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


class RabbitMQ:
    """A private ``rabbitmq-server`` node run as the rabbitmq user.

    The open-files limit is raised to the hard limit first (su leaves the soft limit at
    1024, which caps RabbitMQ at 832 sockets; Debian's systemd unit sets 65536).
    """

    name = "RabbitMQ"

    def __init__(
        self,
        port: int,
        dist_port: int,
        base: Path,
        node: str = "cmp@localhost",
        plugins: tuple[str, ...] = (),
    ) -> None:
        self.plugins = plugins  # e.g. rabbitmq_shovel (tests/perf/shovel_throughput.py)
        self.port = port
        self.dist_port = dist_port
        self.base = base
        self.node = node
        self._pid: int | None = None
        self._server: subprocess.Popen[bytes] | None = None  # su -> rabbitmq-server

    @staticmethod
    def installed() -> bool:
        """Whether rabbitmq-server, rabbitmqctl and the rabbitmq user exist here."""
        if not (shutil.which("rabbitmq-server") and shutil.which("rabbitmqctl")):
            return False
        try:
            import pwd

            pwd.getpwnam("rabbitmq")
        except KeyError:
            return False
        return True

    @staticmethod
    def version() -> str:
        """The installed package version (Debian), or 'unknown'."""
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                ["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip()
        return "unknown"

    @property
    def url(self) -> str:
        """The broker's amqp:// URL."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        """The beam.smp process."""
        assert self._pid is not None
        return self._pid

    def add_vhosts(self, names: list[str]) -> None:
        """Create vhosts with every permission for guest."""
        for name in names:
            self.ctl("add_vhost", name)
            self.ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS`` as the rabbitmq user."""
        import shlex

        command = shlex.join(["rabbitmqctl", "-n", self.node, *args])
        return self._as_rabbitmq(command, timeout=120)

    def _as_rabbitmq(self, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["su", "rabbitmq", "-s", "/bin/bash", "-c", command],
            text=True,
            capture_output=True,
            timeout=timeout,
        )

    def start(self) -> None:
        """Start the node on fresh directories and wait until its applications run."""
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        (self.base / "enabled_plugins").write_text(f"[{','.join(self.plugins)}].\n")
        shutil.chown(self.base, "rabbitmq", "rabbitmq")
        shutil.chown(self.base / "enabled_plugins", "rabbitmq", "rabbitmq")
        pid_file = self.base / "rabbit.pid"
        env = (
            f"RABBITMQ_NODE_PORT={self.port} RABBITMQ_DIST_PORT={self.dist_port} "
            f"RABBITMQ_NODENAME={self.node} RABBITMQ_MNESIA_BASE={self.base}/mnesia "
            f"RABBITMQ_LOG_BASE={self.base}/log "
            f"RABBITMQ_ENABLED_PLUGINS_FILE={self.base}/enabled_plugins "
            f"RABBITMQ_PID_FILE={pid_file}"
        )
        self._server = subprocess.Popen(
            [
                "su",
                "rabbitmq",
                "-s",
                "/bin/bash",
                "-c",
                f"cd {self.base} && ulimit -n $(ulimit -Hn) && {env} exec rabbitmq-server "
                f">{self.base}/server.log 2>&1",
            ],
            start_new_session=True,
        )
        done = self._as_rabbitmq(
            f"rabbitmqctl -n {self.node} wait {pid_file} --timeout 90", timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"RabbitMQ did not start: {done.stdout}{done.stderr}")
        self._pid = int(pid_file.read_text().strip())
        comm = Path(f"/proc/{self._pid}/comm").read_text().strip()
        if comm != "beam.smp":
            raise RuntimeError(f"pid file names {comm}, not beam.smp")
        wait_for_port(self.port, 30)

    def stop(self) -> None:
        """``rabbitmqctl stop`` and wait for beam.smp to exit."""
        if self._pid is None:
            return
        self._as_rabbitmq(f"rabbitmqctl -n {self.node} stop", timeout=60)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _alive(self._pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(self._pid):
            os.kill(self._pid, signal.SIGKILL)
        self._pid = None
        if self._server is not None:  # reap su now, so its CPU is not billed to a later run
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._server.wait(STOP_TIMEOUT)
            self._server = None


class GarageMQ:
    """Debian's ``garagemq`` (Go) with its shipped /etc/garagemq/config.yaml, changed only
    in ``tcp.nodelay: true``, its own AMQP and admin ports and its own data directory."""

    SHIPPED_CONFIG = Path("/etc/garagemq/config.yaml")

    def __init__(
        self,
        port: int,
        admin_port: int,
        base: Path,
        gomaxprocs: int | None = None,
        cpus: str | None = None,
    ) -> None:
        self.port = port
        self.admin_port = admin_port
        self.base = base
        # GOMAXPROCS=1 limits the threads running Go code at once, not the process: GC, I/O
        # and syscall threads still add cores. ``cpus`` (taskset -c LIST) confines all of it,
        # and Go then sizes GOMAXPROCS to the CPUs it may use.
        self.gomaxprocs = gomaxprocs
        self.cpus = cpus
        self.name = "GarageMQ"
        if gomaxprocs is not None:
            self.name += f" GOMAXPROCS={gomaxprocs}"
        if cpus is not None:
            self.name += f" on CPU {cpus}"
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def installed(cls) -> bool:
        """Whether the garagemq binary and its shipped config exist here."""
        return shutil.which("garagemq") is not None and cls.SHIPPED_CONFIG.exists()

    @staticmethod
    def version() -> str:
        """The installed package version (Debian), or 'unknown'."""
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                ["dpkg-query", "-W", "-f", "${Version}", "garagemq"],
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip()
        return "unknown"

    def config(self) -> str:
        """The shipped config with our ports, data directory and ``nodelay: true``."""
        section = ""
        lines = []
        for line in self.SHIPPED_CONFIG.read_text().splitlines():
            if line and not line[0].isspace():
                section = line.split(":", 1)[0]
            key = line.strip().split(":", 1)[0]
            indent = line[: len(line) - len(line.lstrip())]
            if section == "tcp" and key == "port":
                line = f"{indent}port: {self.port}"
            elif section == "tcp" and key == "nodelay":
                line = f"{indent}nodelay: true"
            elif section == "admin" and key == "port":
                line = f"{indent}port: {self.admin_port}"
            elif section == "db" and key == "defaultPath":
                line = f"{indent}defaultPath: {self.base / 'db'}"
            lines.append(line)
        return "\n".join(lines) + "\n"

    @property
    def url(self) -> str:
        """The broker's amqp:// URL."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        """The garagemq process."""
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Start on a fresh data directory and wait for the port."""
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        config = self.base / "config.yaml"
        config.write_text(self.config())
        log = (self.base / "garagemq.log").open("ab")
        env = dict(os.environ)
        if self.gomaxprocs is not None:
            env["GOMAXPROCS"] = str(self.gomaxprocs)
        pin = [] if self.cpus is None else ["taskset", "-c", self.cpus]
        self.process = subprocess.Popen(
            [*pin, "garagemq", "--config", str(config), "--log-level", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.base,
            env=env,
        )
        try:
            wait_for_port(self.port, 30)
        except TimeoutError:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
