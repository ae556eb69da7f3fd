"""QueueBrowser: amqpd browses on the broker (copies, nothing changes); RabbitMQ gets the
client's basic.get-and-give-back fallback (messages come back flagged redelivered)."""

from __future__ import annotations

import pytest

from interop.jms import (
    IllegalStateException,
    InvalidDestinationException,
    InvalidSelectorException,
)
from tests.integration.test_jms_brokers import BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]


def test_browse_leaves_the_queue_as_it_was(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("browse"))
    producer = session.create_producer(queue)
    for n in range(5):
        producer.send(f"m{n}", properties={"n": n})
    with session.create_browser(queue) as browser:
        assert [m.body for m in browser] == [f"m{n}" for n in range(5)]
        assert [m.body for m in browser.get_enumeration()] == [f"m{n}" for n in range(5)]
        snapshot = browser.get_enumeration()
    snapshot[0].acknowledge()  # a snapshot: nothing to acknowledge
    assert broker.depth(queue.name) == 5
    consumer = session.create_consumer(queue)
    received = [consumer.receive(10) for _ in range(5)]
    assert [m.body for m in received if m is not None] == [f"m{n}" for n in range(5)]
    if broker.kind == "amqpd":  # browsing changed nothing a consumer sees
        assert all(m is not None and not m.redelivered for m in received)
        assert all(m is not None and m.delivery_count == 1 for m in received)


def test_browse_with_a_selector(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("browse.sel"))
    producer = session.create_producer(queue)
    for n in range(6):
        producer.send(f"m{n}", properties={"n": n})
    browser = session.create_browser(queue, selector="n >= 3")
    assert browser.message_selector == "n >= 3"
    assert [m.body for m in browser] == ["m3", "m4", "m5"]
    assert broker.depth(queue.name) == 6
    with pytest.raises(InvalidSelectorException):
        session.create_browser(queue, selector="n >=")


def test_browse_shows_ready_messages_only(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("browse.held"))
    producer = session.create_producer(queue)
    for body in ("held", "ready"):
        producer.send(body)
    plain = broker.pika()
    try:
        method, _props, body = plain.channel().basic_get(queue.name)  # held, not acked
        assert method is not None and body == b"held"
        assert [m.body for m in session.create_browser(queue)] == ["ready"]
    finally:
        plain.close()


def test_browser_errors(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    assert list(session.create_browser(session.queue(broker.name("never.declared")))) == []
    with pytest.raises(InvalidDestinationException):
        session.create_browser(session.topic("t"))  # type: ignore[arg-type]
    browser = session.create_browser(session.queue(broker.name("closed")))
    browser.close()
    with pytest.raises(IllegalStateException, match="closed"):
        browser.get_enumeration()
