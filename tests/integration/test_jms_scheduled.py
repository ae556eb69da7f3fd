"""ActiveMQ's scheduled delivery in interop.jms (issue 27): ``AMQ_SCHEDULED_DELAY`` goes
through amqpd's x-delayed-message exchanges, for queues and topics; repeated schedules are
refused; on RabbitMQ (no ``delayed_messages`` capability) a scheduled send is refused
before anything is sent and the connection serves on."""

from __future__ import annotations

import time
from typing import Any

import pytest

from interop.jms import JMSException, MessageFormatException
from tests.integration.test_jms_brokers import BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]
WAIT = 60.0  # seconds a receive waits at most (a busy machine)


def test_scheduled_delay_orders_deliveries_by_due_time(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("scheduled"))
    consumer = session.create_consumer(queue)
    producer = session.create_producer(queue)
    if broker.kind != "amqpd":  # RabbitMQ: no delayed_messages capability
        _refused_then_serves(producer, consumer)
        return
    sent = time.time()
    producer.send("late", properties={"AMQ_SCHEDULED_DELAY": 600})
    producer.send("early", properties={"AMQ_SCHEDULED_DELAY": "200"})  # ActiveMQ reads text
    producer.send("now", properties={"AMQ_SCHEDULED_DELAY": 0})
    producer.send("plain")
    received = []
    for _ in range(4):
        message = consumer.receive(WAIT)
        assert message is not None
        received.append((time.time() - sent, message.text))
    assert [text for _at, text in received] == ["now", "plain", "early", "late"]
    assert received[2][0] >= 0.2 and received[3][0] >= 0.6  # never before its time


def test_scheduled_delay_on_a_topic(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    topic = session.topic(broker.name("scheduled.topic"))
    subscriber = session.create_consumer(topic)
    producer = session.create_producer(topic)
    if broker.kind != "amqpd":
        _refused_then_serves(producer, subscriber)
        return
    producer.send("later", properties={"AMQ_SCHEDULED_DELAY": 100})
    message = subscriber.receive(WAIT)
    assert message is not None and message.text == "later"
    assert message.get_property("AMQ_SCHEDULED_DELAY") == 100


def _refused_then_serves(producer: Any, consumer: Any) -> None:
    """Without the capability a scheduled send is refused before anything is sent (an
    x-delayed-message declaration would close the connection with 503 on RabbitMQ
    without the plugin), and the connection serves on."""
    with pytest.raises(JMSException, match="delayed_messages"):
        producer.send("x", properties={"AMQ_SCHEDULED_DELAY": 100})
    producer.send("next")
    message = consumer.receive(WAIT)
    assert message is not None and message.text == "next"


@pytest.mark.parametrize(
    "properties",
    [
        {"AMQ_SCHEDULED_DELAY": 100, "AMQ_SCHEDULED_REPEAT": 3, "AMQ_SCHEDULED_PERIOD": 50},
        {"AMQ_SCHEDULED_CRON": "0 * * * *"},
    ],
)
def test_repeated_schedules_are_refused(
    broker: BrokerHandle, properties: dict[str, object]
) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("repeat"))
    producer = session.create_producer(queue)
    with pytest.raises(MessageFormatException, match="not supported"):
        producer.send("x", properties=properties)
    producer.send("next")  # nothing was sent; the session serves on
    message = session.create_consumer(queue).receive(WAIT)
    assert message is not None and message.text == "next"
