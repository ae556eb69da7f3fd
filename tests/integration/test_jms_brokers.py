"""Brokers for the interop.jms scenario tests: amqpd (always) and RabbitMQ 3.x (when installed).

The other ``test_jms_*`` modules import the ``broker`` fixture from here. It is parametrised
only with the brokers that are available, so nothing is ever reported as skipped; which
brokers run (and why RabbitMQ does not) is printed once per session.

- amqpd: a fresh server per test (tests/conftest.py ``node_under_test``): in-process, or
  under ``AMQPD_TEST_WORKERS=N`` a ``--workers N`` node whose connections are all handed
  over to another worker (scripts/test-all runs the JMS files that way once more, against
  amqpd only).
- RabbitMQ: one node for the whole session, started as the ``rabbitmq`` user on spare ports
  with its own node name and directories. It starts in the background when this module is
  imported (collection time), so its ~8 s boot overlaps collection and the amqpd runs; it is
  stopped at exit with ``rabbitmqctl stop``. Tests use unique names (``handle.name()``), so
  they do not see each other's queues.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from interop.jms import Connection, ConnectionFactory, Session
from tests.conftest import node_under_test
from tests.integration.rabbit_node import RABBIT_REASON, rabbit_node

# the --workers pass (scripts/test-all, AMQPD_TEST_WORKERS=N) runs these against amqpd only:
# RabbitMQ's side was run in the main pass, and is the same node either way
WORKERS_PASS = int(os.environ.get("AMQPD_TEST_WORKERS") or 1) > 1
if WORKERS_PASS:
    RABBIT_REASON = f"the --workers {os.environ['AMQPD_TEST_WORKERS']} pass runs amqpd only"
BROKERS = ["amqpd"] if RABBIT_REASON else ["amqpd", "rabbitmq"]


_announced = False


if not RABBIT_REASON:
    rabbit_node()  # start now: the node boots (~8 s) while collection and other tests run


def _announce(request: pytest.FixtureRequest) -> None:
    global _announced
    if _announced:
        return
    _announced = True
    if RABBIT_REASON:
        line = f"interop.jms integration tests: amqpd only ({RABBIT_REASON})"
    else:
        line = "interop.jms integration tests: amqpd and RabbitMQ (private node)"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    else:  # pragma: no cover - plugins disabled
        print(line)


@dataclass
class BrokerHandle:
    """A broker a test talks to.

    Attributes:
        kind: ``amqpd`` or ``rabbitmq``.
        port: AMQP port on 127.0.0.1.
        prefix: Unique name prefix for this test's queues and topics.
    """

    kind: str
    port: int
    prefix: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:8]}")
    _connections: list[Connection] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The amqp:// URL."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def name(self, suffix: str) -> str:
        """A name unique to this test."""
        return f"{self.prefix}.{suffix}"

    def factory(self, **options: Any) -> ConnectionFactory:
        """A ConnectionFactory for this broker (fast redelivery unless told otherwise)."""
        return ConnectionFactory(self.url, **options)

    def connect(self, *, start: bool = True, **options: Any) -> Connection:
        """An open (started) connection, closed at the end of the test."""
        connection = self.factory(**options).create_connection()
        self._connections.append(connection)
        if start:
            connection.start()
        return connection

    def connect_url(self, query: str) -> Connection:
        """An open (started) connection from ``ConnectionFactory.from_url(url?query)``."""
        connection = ConnectionFactory.from_url(f"{self.url}?{query}").create_connection()
        self._connections.append(connection)
        connection.start()
        return connection

    def close_all(self) -> None:
        for connection in self._connections:
            connection.close()

    # -- plain AMQP views of the broker -----------------------------------------------------------
    def pika(self) -> pika.BlockingConnection:
        """A plain pika connection (close it)."""
        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))

    def depth(self, queue: str) -> int:
        """Ready messages in ``queue`` (passive declare)."""
        conn = self.pika()
        try:
            ok = conn.channel().queue_declare(queue, passive=True)
            return int(ok.method.message_count)
        finally:
            conn.close()

    def drain(self, queue: str) -> list[tuple[Any, bytes]]:
        """Take every ready message out of ``queue``: (properties, body) pairs."""
        conn = self.pika()
        try:
            channel = conn.channel()
            out: list[tuple[Any, bytes]] = []
            while True:
                method, properties, body = channel.basic_get(queue)
                if method is None:
                    return out
                channel.basic_ack(method.delivery_tag)
                out.append((properties, body))
        finally:
            conn.close()

    def dead_letters(self, dlq: str, from_queue: str) -> list[tuple[Any, bytes]]:
        """Messages in ``dlq`` that died in ``from_queue`` (others are drained too)."""
        return [
            (props, body)
            for props, body in self.drain(dlq)
            if (props.headers or {}).get("x-first-death-queue") == from_queue
        ]

    def wait_dead_letters(
        self, dlq: str, from_queue: str, timeout: float = 5.0
    ) -> list[tuple[Any, bytes]]:
        """Wait until ``dlq`` holds messages that died in ``from_queue``; returns them."""
        found: list[tuple[Any, bytes]] = []

        def arrived() -> bool:
            found.extend(self.dead_letters(dlq, from_queue))
            return bool(found)

        self.eventually(arrived, timeout)
        return found

    def eventually(self, check: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll broker state (no event exists for it) until ``check()`` holds."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.02)


@pytest.fixture(scope="module", params=BROKERS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    """Which broker (module scope, so pytest runs a module's amqpd tests first, then its
    RabbitMQ tests, while the node finishes starting)."""
    _announce(request)
    if request.param == "rabbitmq":
        rabbit_node().wait()
    return str(request.param)


@pytest.fixture
def broker(broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    """amqpd (a fresh server per test: `node_under_test`, so a ``--workers`` node whose
    connections are all handed over in the workers pass) or the session's RabbitMQ node."""
    if broker_kind == "amqpd":
        with node_under_test(tmp_path_factory) as server:
            handle = BrokerHandle("amqpd", server.port)
            try:
                yield handle
            finally:
                handle.close_all()
        return
    handle = BrokerHandle("rabbitmq", rabbit_node().port)
    try:
        yield handle
    finally:
        handle.close_all()


@pytest.fixture
def amqpd_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerHandle]:
    """amqpd only (for the amqpd extensions: x-delivery-count across connections)."""
    _announce(request)
    with node_under_test(tmp_path_factory) as server:
        handle = BrokerHandle("amqpd", server.port)
        try:
            yield handle
        finally:
            handle.close_all()


class AckSpy:
    """Records the basic.ack / basic.reject frames a session sends (wraps its pika channel)."""

    def __init__(self, session: Session) -> None:
        self.acks: list[tuple[int, bool]] = []
        self.rejects: list[tuple[int, bool]] = []
        self._cond = threading.Condition()
        channel = session._link.channel
        ack, reject = channel.basic_ack, channel.basic_reject

        def spy_ack(delivery_tag: int = 0, multiple: bool = False) -> None:
            with self._cond:
                self.acks.append((delivery_tag, multiple))
                self._cond.notify_all()
            ack(delivery_tag, multiple)

        def spy_reject(delivery_tag: int, requeue: bool = True) -> None:
            with self._cond:
                self.rejects.append((delivery_tag, requeue))
                self._cond.notify_all()
            reject(delivery_tag, requeue)

        channel.basic_ack = spy_ack
        channel.basic_reject = spy_reject

    def wait_acks(self, count: int, timeout: float = 5.0) -> list[tuple[int, bool]]:
        """Wait until at least ``count`` ack frames were sent; returns them."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.acks) >= count, timeout), self.acks
            return list(self.acks)

    def settle(self, session: Session) -> None:
        """Wait until every ack/reject queued so far has gone through the I/O thread."""
        session._connection.transport.call(lambda: None, "flush")


def test_brokers_answer(broker: BrokerHandle) -> None:
    """Each parametrised broker accepts a JMS connection and a plain AMQP one."""
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("hello"))
    session.create_producer(queue).send("hi")
    assert broker.depth(queue.name) == 1
    assert [body for _props, body in broker.drain(queue.name)] == [b"hi"]
