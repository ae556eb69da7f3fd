"""JMS API details: receive on a closed consumer, the session's message factories,
``Connection.abort()``. Against amqpd and, when installed, RabbitMQ."""

from __future__ import annotations

import threading
import time

import pytest

from interop.jms import (
    AckMode,
    BytesMessage,
    IllegalStateException,
    MapMessage,
    Message,
    TextMessage,
)
from tests.integration.test_jms_brokers import BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]


def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_receive_on_a_closed_consumer_raises(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    consumer = session.create_consumer(session.queue(broker.name("closed")))
    consumer.close()
    with pytest.raises(IllegalStateException, match="The Consumer is closed"):
        consumer.receive(1)
    with pytest.raises(IllegalStateException, match="The Consumer is closed"):
        consumer.receive_no_wait()
    assert list(consumer) == []  # iteration just ends


def test_receive_after_the_session_closed_raises(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    consumer = session.create_consumer(session.queue(broker.name("closed.session")))
    session.close()
    with pytest.raises(IllegalStateException):
        consumer.receive(1)


def test_blocked_receive_returns_none_when_the_consumer_closes(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    consumer = session.create_consumer(session.queue(broker.name("blocked")))
    results: list[object] = []
    receiver = threading.Thread(target=lambda: results.append(consumer.receive(60)), daemon=True)
    receiver.start()
    _until(lambda: session._receivers == 1)
    consumer.close()
    receiver.join(30)
    assert not receiver.is_alive()
    assert results == [None]


def test_iteration_ends_when_the_consumer_closes(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("iterate"))
    session.create_producer(queue).send("one")
    consumer = session.create_consumer(queue)
    seen: list[str] = []

    def loop() -> None:
        for message in consumer:
            seen.append(message.body)

    reader = threading.Thread(target=loop, daemon=True)
    reader.start()
    _until(lambda: seen == ["one"] and session._receivers == 1)
    consumer.close()
    reader.join(30)
    assert not reader.is_alive()


def test_message_factories(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("factories"))
    producer = session.create_producer(queue)
    plain = session.create_message()
    plain.properties["kind"] = "plain"
    text = session.create_text_message("hello")
    data = session.create_bytes_message(b"\x00\x01")
    mapping = session.create_map_message({"a": 1, "b": "two"})
    assert type(plain) is Message
    for message in (plain, text, data, mapping):
        producer.send(message)
    consumer = session.create_consumer(queue)
    got = [consumer.receive(5) for _ in range(4)]
    assert got[0] is not None and got[0].properties["kind"] == "plain"
    assert isinstance(got[1], TextMessage) and got[1].body == "hello"
    assert isinstance(got[2], BytesMessage) and got[2].body == b"\x00\x01"
    assert isinstance(got[3], MapMessage) and got[3].body == {"a": 1, "b": "two"}
    empty = session.create_text_message()
    assert empty.body is None
    session.close()
    with pytest.raises(IllegalStateException):
        session.create_text_message("too late")


def test_abort_drops_the_connection_and_the_broker_requeues(broker: BrokerHandle) -> None:
    queue_name = broker.name("abort")
    connection = broker.connect()
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = session.queue(queue_name)
    session.create_producer(queue).send("held")
    consumer = session.create_consumer(queue)
    held = consumer.receive(5)
    assert held is not None and held.body == "held"  # delivered, never acknowledged

    blocked: list[object] = []
    other = connection.create_session()
    waiting = other.create_consumer(other.queue(broker.name("abort.idle")))
    receiver = threading.Thread(target=lambda: blocked.append(waiting.receive(60)), daemon=True)
    receiver.start()
    _until(lambda: other._receivers == 1)

    connection.abort()
    receiver.join(30)
    assert blocked == [None]
    assert connection.closed and session.closed
    with pytest.raises(IllegalStateException):
        consumer.receive(1)
    with pytest.raises(IllegalStateException):
        connection.create_session()
    connection.abort()  # idempotent
    connection.close()  # and close after abort is a no-op

    again = broker.connect().create_session()
    redelivered = again.create_consumer(again.queue(queue_name)).receive(10)
    assert redelivered is not None and redelivered.body == "held"
    assert redelivered.redelivered
