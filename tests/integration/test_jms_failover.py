"""Failover (``failover:(amqp://a,amqp://b)?…``) against amqpd brokers that really die.

Brokers run as subprocesses (`BrokerProcess`) so they can be SIGKILLed and restarted on the
same port and data directory; each test starts and stops its own. A `Events` transport
listener tells the tests when a failover began and ended (no sleeps as synchronisation).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interop.jms import (
    AckMode,
    Connection,
    ConnectionFactory,
    JMSException,
    Message,
    TransactionRolledBackException,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_jms_brokers import BROKERS, rabbit_node
from tests.ports import spare_port

FAST = "initialReconnectDelay=20&maxReconnectDelay=200"
WAIT = 60.0


def _amqp(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


class Events:
    """A transport listener that records failovers."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.cond = threading.Condition()

    def transport_interrupted(self) -> None:
        with self.cond:
            self.seen.append("interrupted")
            self.cond.notify_all()

    def transport_resumed(self) -> None:
        with self.cond:
            self.seen.append("resumed")
            self.cond.notify_all()

    def wait(self, event: str, count: int = 1, timeout: float = WAIT) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.seen.count(event) >= count, timeout), self.seen


class Collector:
    """A message listener that records bodies (and redelivered flags)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, message: Message) -> None:
        with self.cond:
            self.bodies.append(str(message.body))
            self.cond.notify_all()

    def wait_for(self, check: Callable[[list[str]], bool], timeout: float = WAIT) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: check(self.bodies), timeout), self.bodies


@contextlib.contextmanager
def _brokers(tmp_path: Path, count: int) -> Iterator[list[BrokerProcess]]:
    started = [BrokerProcess(tmp_path / f"b{n}") for n in range(count)]
    try:
        yield started
    finally:
        for broker in started:
            if broker.proc.poll() is None:
                broker.stop()


def _restart(broker: BrokerProcess, data_dir: Path) -> BrokerProcess:
    broker.kill()
    return BrokerProcess(data_dir, broker.port)


@contextlib.contextmanager
def _connect(url: str, **options: object) -> Iterator[tuple[Connection, Events]]:
    connection = ConnectionFactory(url, **options).create_connection()  # type: ignore[arg-type]
    events = Events()
    connection.add_transport_listener(events)
    try:
        yield connection, events
    finally:
        connection.close()


def test_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    """A producer sends persistent messages and a listener consumes them while amqpd is
    SIGKILLed and restarted: every confirmed send arrives, the listener is restored."""
    total = 300
    (tmp_path / "b0").mkdir()
    with _brokers(tmp_path, 1) as brokers:
        url = f"failover:({_amqp(brokers[0].port)})?{FAST}"
        with _connect(url) as (consumer_conn, events), _connect(url) as (producer_conn, _):
            session = consumer_conn.create_session()
            collector = Collector()
            session.create_consumer(session.queue("load")).message_listener = collector
            consumer_conn.start()
            confirmed: list[str] = []
            errors: list[BaseException] = []

            def produce() -> None:
                try:
                    producer_session = producer_conn.create_session()
                    producer = producer_session.create_producer(producer_session.queue("load"))
                    for n in range(total):
                        producer.send(f"m{n:04d}")
                        confirmed.append(f"m{n:04d}")
                except BaseException as exc:
                    errors.append(exc)

            producer_thread = threading.Thread(target=produce, daemon=True)
            producer_thread.start()
            collector.wait_for(lambda bodies: len(bodies) >= total // 3)
            brokers[0] = _restart(brokers[0], tmp_path / "b0")
            events.wait("resumed")
            producer_thread.join(WAIT)
            assert not producer_thread.is_alive() and not errors, errors
            assert len(confirmed) == total
            collector.wait_for(lambda bodies: set(confirmed) <= set(bodies))
            assert set(collector.bodies) == set(confirmed)  # nothing lost, nothing invented
            assert consumer_conn.broker_url.endswith(f":{brokers[0].port}/%2F")


@pytest.mark.parametrize("second_kind", BROKERS)
def test_fail_over_between_two_brokers(tmp_path: Path, second_kind: str) -> None:
    """randomize=false: the first broker (amqpd), then the second (another amqpd, or the
    private RabbitMQ node when installed) when the first dies; the queue listener, a durable
    subscriber and the producer work on the second without any call."""
    tag = uuid.uuid4().hex[:8]
    work, topic = f"work.{tag}", f"news{tag}"
    with _brokers(tmp_path, 2 if second_kind == "amqpd" else 1) as started:
        first = started[0]
        if second_kind == "amqpd":
            second_port = started[1].port
        else:
            node = rabbit_node()
            node.wait()
            second_port = node.port
        url = f"failover:({_amqp(first.port)},{_amqp(second_port)})?randomize=false&{FAST}"
        with _connect(url, client_id=f"fo-{tag}") as (connection, events):
            assert connection.broker_url == f"amqp://127.0.0.1:{first.port}/%2F"
            session = connection.create_session()
            queue_listener = Collector()
            session.create_consumer(session.queue(work)).message_listener = queue_listener
            other = connection.create_session()
            durable = other.create_durable_subscriber(other.topic(f"{topic}.>"), "watcher")
            producer = connection.create_session().create_producer()
            connection.start()
            producer.send("before", destination=session.queue(work))
            queue_listener.wait_for(lambda bodies: bodies == ["before"])

            first.kill()
            events.wait("resumed")
            assert events.seen[:2] == ["interrupted", "resumed"]
            assert connection.broker_url == f"amqp://127.0.0.1:{second_port}/%2F"
            producer.send("after", destination=session.queue(work))
            producer.send("headline", destination=session.topic(f"{topic}.eu"))
            queue_listener.wait_for(lambda bodies: bodies == ["before", "after"])
            got = durable.receive(WAIT)
            assert got is not None and got.body == "headline"
            durable.close()
            other.unsubscribe("watcher")


def test_unacknowledged_messages_are_redelivered_after_failover(tmp_path: Path) -> None:
    """CLIENT_ACKNOWLEDGE: what was delivered but not acknowledged comes again (flagged
    redelivered) after the restart; acknowledging the old copies is a no-op."""
    (tmp_path / "b0").mkdir()
    with _brokers(tmp_path, 1) as brokers:
        url = f"failover:({_amqp(brokers[0].port)})?{FAST}"
        with _connect(url) as (connection, events):
            session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
            queue = session.queue("held")
            producer = session.create_producer(queue)
            for body in ("a", "b", "c"):
                producer.send(body)
            consumer = session.create_consumer(queue)
            connection.start()
            first = [consumer.receive(WAIT) for _ in range(3)]
            assert [m.body for m in first if m is not None] == ["a", "b", "c"]

            brokers[0] = _restart(brokers[0], tmp_path / "b0")
            events.wait("resumed")
            first[0].acknowledge()  # type: ignore[union-attr]  # void: its channel died
            again = [consumer.receive(WAIT) for _ in range(3)]
            assert [m.body for m in again if m is not None] == ["a", "b", "c"]
            assert all(m is not None and m.redelivered for m in again)
            session.acknowledge()
            assert consumer.receive(0.5) is None
        with _connect(f"failover:({_amqp(brokers[0].port)})") as (check, _):
            check_session = check.create_session()
            check.start()
            assert check_session.create_consumer(check_session.queue("held")).receive(1) is None


def test_transaction_in_flight_fails_its_commit(tmp_path: Path) -> None:
    (tmp_path / "b0").mkdir()
    with _brokers(tmp_path, 1) as brokers:
        url = f"failover:({_amqp(brokers[0].port)})?{FAST}"
        with _connect(url) as (connection, events):
            session = connection.create_session(transacted=True)
            queue = session.queue("tx")
            producer = session.create_producer(queue)
            producer.send("lost with the transaction")
            brokers[0] = _restart(brokers[0], tmp_path / "b0")
            events.wait("resumed")
            with pytest.raises(TransactionRolledBackException, match="in doubt due to failover"):
                session.commit()
            producer.send("second try")
            session.commit()
            consumer = session.create_consumer(queue)
            connection.start()
            got = consumer.receive(WAIT)
            assert got is not None and got.body == "second try"
            session.commit()
            assert consumer.receive(0.5) is None


def test_send_during_the_outage_fails_after_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "b0").mkdir()
    with _brokers(tmp_path, 1) as brokers:
        port = brokers[0].port
        url = f"failover:({_amqp(port)})?timeout=300&{FAST}"
        with _connect(url) as (connection, events):
            session = connection.create_session()
            producer = session.create_producer(session.queue("outage"))
            brokers[0].kill()
            events.wait("interrupted")
            connection.stop()  # need no broker: neither waits for the failover
            connection.start()
            with pytest.raises(JMSException, match="Failover timeout of 300 ms reached"):
                producer.send("nobody listens")
            brokers[0] = BrokerProcess(tmp_path / "b0", port)
            events.wait("resumed")
            producer.send("back")
            consumer = session.create_consumer(session.queue("outage"))
            connection.start()
            got = consumer.receive(WAIT)
            assert got is not None and got.body == "back"


def test_gives_up_after_max_reconnect_attempts(tmp_path: Path) -> None:
    with _brokers(tmp_path, 1) as brokers:
        url = f"failover:({_amqp(brokers[0].port)})?maxReconnectAttempts=2&{FAST}"
        with _connect(url) as (connection, events):
            failures: list[JMSException] = []
            failed = threading.Event()

            def on_exception(error: JMSException) -> None:
                failures.append(error)
                failed.set()

            connection.exception_listener = on_exception
            session = connection.create_session()
            consumer = session.create_consumer(session.queue("gone"))
            connection.start()
            brokers[0].kill()
            assert failed.wait(WAIT)
            assert "no broker reachable after 2 attempt(s)" in str(failures[0])
            assert events.seen == ["interrupted"]
            with pytest.raises(JMSException, match="no broker reachable"):
                consumer.receive(1)


def test_startup_max_reconnect_attempts() -> None:
    url = f"failover:({_amqp(spare_port())})?startupMaxReconnectAttempts=2&initialReconnectDelay=10"
    with pytest.raises(JMSException, match="no broker reachable after 2 attempt"):
        ConnectionFactory(url).create_connection()


def test_priority_backup_moves_back_to_the_primary(tmp_path: Path) -> None:
    primary_port = spare_port()
    (tmp_path / "primary").mkdir()
    with _brokers(tmp_path, 1) as (backup,):
        url = f"failover:({_amqp(primary_port)},{_amqp(backup.port)})?priorityBackup=true&{FAST}"
        with _connect(url) as (connection, events):
            assert connection.broker_url.endswith(f":{backup.port}/%2F")
            session = connection.create_session()
            collector = Collector()
            session.create_consumer(session.queue("prio")).message_listener = collector
            connection.start()
            primary = BrokerProcess(tmp_path / "primary", primary_port)
            try:
                events.wait("resumed")
                assert connection.broker_url.endswith(f":{primary_port}/%2F")
                session.create_producer(session.queue("prio")).send("on the primary")
                collector.wait_for(lambda bodies: bodies == ["on the primary"])
            finally:
                connection.close()
                primary.stop()


def test_a_plain_url_still_fails_fast(tmp_path: Path) -> None:
    """Without failover a lost connection fails the session at once (unchanged)."""
    with _brokers(tmp_path, 1) as brokers:
        connection = ConnectionFactory(_amqp(brokers[0].port)).create_connection()
        try:
            assert not connection.failover
            session = connection.create_session()
            consumer = session.create_consumer(session.queue("plain"))
            connection.start()
            brokers[0].kill()
            deadline = time.monotonic() + WAIT
            with pytest.raises(JMSException):
                while time.monotonic() < deadline:
                    consumer.receive(0.1)
        finally:
            connection.close()
