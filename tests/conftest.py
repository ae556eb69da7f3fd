"""Shared fixtures: a real amqpd server on 127.0.0.1 (port 0) in a background thread."""

from __future__ import annotations

import faulthandler
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

from amqpd.model.broker import BrokerConfig
from amqpd.shell.admin_socket import send_request
from amqpd.shell.server import Server, ServerConfig, background_server
from amqpd.shell.workers.placement import FILENAME as PLACEMENT_FILE
from tests.integration.broker_process import BrokerProcess
from tests.pg_cluster import PgCluster

# Brokers that tests start as subprocesses (`python -m amqpd`) serve the management API and
# Prometheus metrics by default on RabbitMQ's fixed ports; tests run beside other tests, so
# they take free ports instead (a test that needs a known port passes it explicitly).
os.environ.setdefault("AMQPD_MANAGEMENT_PORT", "0")
os.environ.setdefault("AMQPD_PROMETHEUS_PORT", "0")
# AMQPD_TEST_WORKERS=N (scripts/test-all's workers passes): every amqpd that a test starts as
# a subprocess without choosing runs with N workers (the broker's own AMQPD_WORKERS), each
# vhost wholly on one (AMQPD_SPREAD_VHOSTS empty), or under AMQPD_TEST_SPREAD=1 with every
# vhost spread over them, the default: the CLI's start-up, signals and logs, the crash,
# shovel and federation tests' own nodes, as an operator who sets them in the service's
# environment gets them. Without AMQPD_TEST_WORKERS (the main run) they run as one process,
# whatever the machine's CPUs (amqpd's default is --workers auto), and a test that chooses
# --workers N gets whole vhosts unless it spreads them itself.
if os.environ.get("AMQPD_TEST_WORKERS"):
    os.environ.setdefault("AMQPD_WORKERS", os.environ["AMQPD_TEST_WORKERS"])
    if not os.environ.get("AMQPD_TEST_SPREAD"):
        os.environ.setdefault("AMQPD_SPREAD_VHOSTS", "")
else:
    os.environ.setdefault("AMQPD_WORKERS", "1")
    os.environ.setdefault("AMQPD_SPREAD_VHOSTS", "")


@pytest.fixture
def whole_vhosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``--workers N`` nodes of a test that places vhosts on workers itself serve each
    vhost wholly on one worker (``AMQPD_SPREAD_VHOSTS`` empty), whichever pass runs it:
    amqpd's default spreads every vhost, and so does the spread pass's environment."""
    monkeypatch.setenv("AMQPD_SPREAD_VHOSTS", "")


@contextmanager
def running_server(
    tick_interval: float = 1.0,
    data_dir: Path | None = None,
    port: int = 0,
    **broker_options: Any,
) -> Iterator[Server]:
    """Start a broker on 127.0.0.1 (memory only unless ``data_dir``); stopped when the block
    ends. Pass the previous ``port`` to restart on the same one."""
    config = ServerConfig(port=port, tick_interval=tick_interval, data_dir=data_dir)
    with background_server(BrokerConfig(**broker_options), config) as server:
        yield server


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A private PostgreSQL server on 127.0.0.1 for the whole session (tests/pg_cluster.py);
    each test creates its own database on it."""
    cluster = PgCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """The URL of a new, empty database for this test."""
    return pg_cluster.create_database(pg_cluster.new_name())


@dataclass
class NodeUnderTest:
    """`server` under ``AMQPD_TEST_WORKERS=N``: ``amqpd --workers N`` as a subprocess."""

    port: int
    management_port: int = 0  # 0: not listening (as `Server`'s)
    prometheus_port: int = 0
    tls_port: int = 0


@contextmanager
def node_under_test(
    tmp_path_factory: pytest.TempPathFactory,
    tick_interval: float = 1.0,
    http: bool = False,
    data_dir: Path | None = None,
    definitions: Path | None = None,
) -> Iterator[Server | NodeUnderTest]:
    """A fresh broker: in this process (`running_server`); or, under
    ``AMQPD_TEST_WORKERS=N`` (scripts/test-all runs the files that use it once more so), a
    ``--workers N`` node whose default vhost "/" lives on its last worker (a new store), so
    that every connection the test opens is handed over by worker 0 (docs/multicore.md); with
    ``AMQPD_TEST_SPREAD=1`` too, a node whose vhosts are spread over every worker (the
    default, ``--spread-vhosts '*'``): connections go to the workers in turn, queues live where
    they were declared, consumers move to their queue's worker.
    ``tick_interval`` is the in-process broker's; the node's timers run on their deadlines
    (amqpd/shell/server.py `_ticker`) with the default periodic tick.
    ``http``: the management API and Prometheus listen too (on free ports:
    ``management_port``, ``prometheus_port``; under workers, the node's one API).
    ``data_dir``: its data (a test may have prepared it with the CLI); else memory only,
    or a fresh directory for a node. ``definitions``: a file it imports at startup."""
    workers = int(os.environ.get("AMQPD_TEST_WORKERS") or 1)
    if workers == 1:
        ports = {"management_port": 0, "prometheus_port": 0} if http else {}
        config = ServerConfig(
            port=0, tick_interval=tick_interval, data_dir=data_dir, definitions=definitions, **ports
        )
        with background_server(BrokerConfig(), config) as srv:
            yield srv
        return
    data = data_dir or tmp_path_factory.mktemp("node") / "data"
    options = () if definitions is None else ("--definitions", str(definitions))
    with node_process(data, workers, options) as node:
        yield node


@contextmanager
def node_process(
    data: Path, workers: int, options: tuple[str, ...] = ()
) -> Iterator[NodeUnderTest]:
    """`node_under_test`'s ``--workers N`` node on ``data`` with more command-line
    ``options`` (a test that configures what `running_server` takes as settings, such as
    TLS, starts this one itself under AMQPD_TEST_WORKERS)."""
    data.mkdir(exist_ok=True)
    spread = bool(os.environ.get("AMQPD_TEST_SPREAD"))
    # a store made before (the CLI on a stopped broker, a previous start) keeps its vhosts
    # where they are, as a node started on it does: on worker 0 if it has no placement yet
    placed = not spread and not (data / "amqpd.sqlite3").exists()
    if placed:
        placement = {"workers": workers, "vhosts": {"/": workers - 1}}
        (data / PLACEMENT_FILE).write_text(json.dumps(placement))
    spreading = () if spread else ("--spread-vhosts", "")  # spread: the default, every vhost
    node = BrokerProcess(data, extra=("--workers", str(workers), *spreading, *options))
    try:
        status = send_request(data, {"group": "ctl", "command": "status"})  # amqpd ctl status
        assert status is not None and status.ok, status
        if placed:
            assert json.loads(status.text)["workers"][-1]["vhosts"] == ["/"]
        ports = node.other_ports
        yield NodeUnderTest(
            node.port, ports.get("http", 0), ports.get("http/prometheus", 0), ports.get("AMQPS", 0)
        )
        node.stop()
    finally:
        if node.proc.poll() is None:
            node.kill()


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | NodeUnderTest]:
    """A fresh broker for one test (`node_under_test`)."""
    with node_under_test(tmp_path_factory) as srv:
        yield srv


@pytest.fixture
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | NodeUnderTest]:
    """A fresh broker whose management API and Prometheus listen too (`node_under_test`)."""
    with node_under_test(tmp_path_factory, http=True) as srv:
        yield srv


# BrokerConfig fields that the amqpd command takes as options (`start_server` under workers)
NODE_OPTIONS = {
    "heartbeat": "--heartbeat",
    "frame_max": "--frame-max",
    "channel_max": "--channel-max",
    "max_message_size": "--max-message-size",
    "connection_max": "--connection-max",
}


@pytest.fixture
def start_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., AbstractContextManager[Server | NodeUnderTest]]:
    """Factory for a fresh broker with non-default BrokerConfig options (e.g. heartbeat=1):
    in this process; under ``AMQPD_TEST_WORKERS=N`` a ``--workers N`` node given them as
    command-line options (`node_process`) when amqpd has one for each (``tick_interval``
    aside: a node's timers run on their deadlines), else in this process too."""

    def start(
        tick_interval: float = 1.0, **options: Any
    ) -> AbstractContextManager[Server | NodeUnderTest]:
        workers = int(os.environ.get("AMQPD_TEST_WORKERS") or 1)
        if workers == 1 or not set(options) <= NODE_OPTIONS.keys():
            return running_server(tick_interval, **options)
        flags = tuple(
            item for key, value in options.items() for item in (NODE_OPTIONS[key], str(value))
        )
        return node_process(tmp_path_factory.mktemp("node") / "data", workers, flags)

    return start


@pytest.fixture
def amqp_url(server: Server | NodeUnderTest) -> str:
    """amqp:// URL of the fresh broker."""
    return f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"


@pytest.fixture
def connection(server: Server | NodeUnderTest) -> Iterator[pika.BlockingConnection]:
    """A pika BlockingConnection to the fresh broker."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> Any:
    """A channel on ``connection``."""
    return connection.channel()


EXIT_GRACE = 300.0  # seconds the interpreter may take to exit after the session


def pytest_unconfigure(config: pytest.Config) -> None:
    """Exiting waits for every thread that is not a daemon (and the atexit handlers: the
    private RabbitMQ node's stop); one that never ends would keep CI waiting with no summary
    printed. A watchdog (faulthandler's, in C: it fires whatever Python is blocked in)
    prints every thread's stack and exits with status 1 if the process is still here
    EXIT_GRACE seconds from now; a normal exit cancels it."""
    faulthandler.dump_traceback_later(EXIT_GRACE, exit=True)
