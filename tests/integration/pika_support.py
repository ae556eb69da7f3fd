"""Small helpers shared by the pika integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pytest

from amqpd.shell.server import Server

TIMEOUT = 5.0


def params(server: Server) -> pika.ConnectionParameters:
    """Connection parameters for a test server."""
    return pika.ConnectionParameters("127.0.0.1", server.port)


def login(port: int, user: str, password: str, vhost: str = "/") -> pika.BlockingConnection:
    """A blocking connection as ``user`` to ``vhost``."""
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, vhost, pika.PlainCredentials(user, password))
    )


def pump_until(
    conn: pika.BlockingConnection, done: Callable[[], bool], timeout: float = TIMEOUT
) -> None:
    """Process I/O on ``conn`` until ``done()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"condition not reached within {timeout} s")
        conn.process_data_events(time_limit=min(remaining, 0.05))
