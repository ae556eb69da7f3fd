"""Shared fixtures: a real amqpd server on 127.0.0.1 (port 0) in a background thread."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import Server, ServerConfig, background_server
from tests.pg_cluster import PgCluster

# Brokers that tests start as subprocesses (`python -m amqpd`) serve the management API and
# Prometheus metrics by default on RabbitMQ's fixed ports; tests run beside other tests, so
# they take free ports instead (a test that needs a known port passes it explicitly).
os.environ.setdefault("AMQPD_MANAGEMENT_PORT", "0")
os.environ.setdefault("AMQPD_PROMETHEUS_PORT", "0")


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


@pytest.fixture
def server() -> Iterator[Server]:
    """A fresh broker for one test."""
    with running_server() as srv:
        yield srv


@pytest.fixture
def start_server() -> Callable[..., AbstractContextManager[Server]]:
    """Factory for a server with non-default BrokerConfig options (e.g. heartbeat=1)."""
    return running_server


@pytest.fixture
def amqp_url(server: Server) -> str:
    """amqp:// URL of the fresh broker."""
    return f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"


@pytest.fixture
def connection(server: Server) -> Iterator[pika.BlockingConnection]:
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
