"""Asynchronous sends: JMS 2.0 completion listeners, useAsyncSend, producerWindowSize.

The confirm/nack cases run against amqpd and, when installed, RabbitMQ; the cases that need
a broker that stops answering use an amqpd subprocess paused with SIGSTOP.
"""

from __future__ import annotations

import threading
from pathlib import Path

from interop.jms import ConnectionFactory, JMSException, Message
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_jms_brokers import BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]

WAIT = 30.0


class Outcomes:
    """A completion listener recording (event, body, exception) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Exception | None]] = []
        self.threads: set[str] = set()
        self.cond = threading.Condition()

    def on_completion(self, message: Message) -> None:
        self._record("completed", message, None)

    def on_exception(self, message: Message, exception: Exception) -> None:
        self._record("failed", message, exception)

    def _record(self, event: str, message: Message, error: Exception | None) -> None:
        with self.cond:
            self.events.append((event, str(message.body), error))
            self.threads.add(threading.current_thread().name)
            self.cond.notify_all()

    def wait(self, count: int) -> list[tuple[str, str, Exception | None]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= count, WAIT), self.events
            return list(self.events)


def test_completion_listener_hears_every_confirm_in_order(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("async"))
    producer = session.create_producer(queue)
    outcomes = Outcomes()
    bodies = [f"m{n}" for n in range(200)]
    for body in bodies:
        producer.send(body, completion_listener=outcomes)
    events = outcomes.wait(len(bodies))
    assert [(event, body) for event, body, _ in events] == [("completed", b) for b in bodies]
    assert outcomes.threads == {"jms-completion"}
    consumer = session.create_consumer(queue)
    assert [consumer.receive(WAIT).body for _ in bodies] == bodies  # type: ignore[union-attr]


def test_a_nack_reaches_on_exception(broker: BrokerHandle) -> None:
    name = broker.name("full")
    plain = broker.pika()
    try:  # a queue that refuses what does not fit: the broker nacks the publish
        plain.channel().queue_declare(
            name, durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
    finally:
        plain.close()
    session = broker.connect().create_session()
    producer = session.create_producer(session.queue(name))
    outcomes = Outcomes()
    producer.send("fits", completion_listener=outcomes)
    producer.send("refused", completion_listener=outcomes)
    events = outcomes.wait(2)
    assert [(event, body) for event, body, _ in events] == [
        ("completed", "fits"),
        ("failed", "refused"),
    ]
    error = events[1][2]
    assert isinstance(error, JMSException) and "basic.nack" in str(error)


def test_use_async_send_and_a_lost_connection(tmp_path: Path) -> None:
    """useAsyncSend: persistent sends return while the broker cannot confirm; the ones
    given a completion listener hear about the lost connection."""
    amqpd = BrokerProcess(tmp_path)
    try:
        factory = ConnectionFactory.from_url(f"{amqpd.url}?jms.useAsyncSend=true")
        connection = factory.create_connection()
        session = connection.create_session()
        producer = session.create_producer(session.queue("paused"))
        outcomes = Outcomes()
        producer.send("warm-up")  # declares the queue while the broker still answers
        amqpd.pause()  # no confirm can come now
        producer.send("not waited for")  # a synchronous persistent send would block here
        producer.send("watched", completion_listener=outcomes)
        assert outcomes.events == []
        amqpd.kill()
        events = outcomes.wait(1)
        assert events[0][:2] == ("failed", "watched")
        assert isinstance(events[0][2], JMSException)
        connection.close()
    finally:
        if amqpd.proc.poll() is None:
            amqpd.stop()


def test_producer_window_blocks_until_confirms_free_room(tmp_path: Path) -> None:
    amqpd = BrokerProcess(tmp_path)
    try:
        factory = ConnectionFactory(amqpd.url, use_async_send=True, producer_window_size=100)
        with factory.create_connection() as connection:
            session = connection.create_session()
            queue = session.queue("window")
            producer = session.create_producer(queue)
            producer.send(b"x" * 80)  # warm up: the queue is declared
            assert producer._window.wait_empty(WAIT)
            session_two = connection.create_session()
            amqpd.pause()
            producer.send(b"a" * 80)  # fits: the window was empty
            second = threading.Thread(target=lambda: producer.send(b"b" * 80), daemon=True)
            second.start()
            second.join(0.5)
            assert second.is_alive()  # 160 bytes would pass the 100-byte window
            assert producer._window.outstanding == 80
            amqpd.resume()
            second.join(WAIT)
            assert not second.is_alive()
            consumer = session_two.create_consumer(queue)
            connection.start()
            got = [consumer.receive(WAIT) for _ in range(3)]
            assert [m.body for m in got if m is not None] == [b"x" * 80, b"a" * 80, b"b" * 80]
    finally:
        amqpd.resume()
        amqpd.stop()
