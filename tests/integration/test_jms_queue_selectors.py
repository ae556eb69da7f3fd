"""Queue selectors: evaluated by amqpd (``x-selector``), refused by brokers without them."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from interop.jms import AckMode, InvalidSelectorException, MessageConsumer, PrefetchPolicy
from tests.integration.test_jms_brokers import BrokerHandle, amqpd_broker, broker, broker_kind

__all__ = ["amqpd_broker", "broker", "broker_kind"]


def _bodies(consumer: MessageConsumer, count: int) -> list[str]:
    got = [consumer.receive(10) for _ in range(count)]
    return [str(message.body) for message in got if message is not None]


def test_queue_selectors_split_one_queue(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    queue = session.queue(broker.name("orders"))
    if broker.kind == "rabbitmq":
        with pytest.raises(InvalidSelectorException, match="not supported by this broker"):
            session.create_consumer(queue, selector="region = 'eu'")
        return
    eu = session.create_consumer(queue, selector="region = 'eu'")
    us = session.create_consumer(session.queue(f"{queue.name}?consumer.selector=region%3D'us'"))
    producer = session.create_producer(queue)
    for n in range(10):
        producer.send(f"o{n}", properties={"region": "eu" if n % 2 else "us"})
    assert _bodies(eu, 5) == ["o1", "o3", "o5", "o7", "o9"]
    assert _bodies(us, 5) == ["o0", "o2", "o4", "o6", "o8"]
    assert eu.receive(0.2) is None


def test_unmatched_messages_stay_for_other_consumers(amqpd_broker: BrokerHandle) -> None:
    broker = amqpd_broker
    connection = broker.connect(prefetch_policy=PrefetchPolicy(queue_prefetch=3))
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = session.queue(broker.name("mixed"))
    producer = session.create_producer(queue)
    for n in range(20):
        producer.send(f"m{n}", priority=9 if n % 5 == 0 else 4)
    urgent = session.create_consumer(queue, selector="JMSPriority > 6")
    assert _bodies(urgent, 4) == ["m0", "m5", "m10", "m15"]
    assert urgent.receive(0.2) is None
    assert broker.depth(queue.name) == 16  # the others were never delivered
    session.acknowledge()
    rest = session.create_consumer(queue)
    assert _bodies(rest, 16) == [f"m{n}" for n in range(20) if n % 5]


def test_recovered_messages_go_back_through_the_selector(amqpd_broker: BrokerHandle) -> None:
    broker = amqpd_broker
    connection = broker.connect()
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = session.queue(broker.name("again"))
    session.create_producer(queue).send("x", properties={"kind": "wanted"})
    retry_session = connection.create_session()
    retry = retry_session.create_consumer(
        queue, selector="kind = 'wanted' AND JMSRedelivered = TRUE"
    )
    first = session.create_consumer(queue, selector="kind = 'wanted'")
    assert _bodies(first, 1) == ["x"]
    assert retry.receive(0.2) is None  # not redelivered yet
    session.close()  # unacknowledged: back to the queue, flagged redelivered
    got = retry.receive(10)
    assert got is not None and got.body == "x" and got.redelivered


def test_a_pull_consumer_cannot_use_a_queue_selector(amqpd_broker: BrokerHandle) -> None:
    session = amqpd_broker.connect().create_session()
    queue = session.queue(amqpd_broker.name("pull") + "?consumer.prefetchSize=0")
    with pytest.raises(InvalidSelectorException, match="prefetch above 0"):
        session.create_consumer(queue, selector="a = 1")


@pytest.mark.parametrize(
    ("arguments", "auto_ack", "text"),
    [
        ({"x-selector": "a = "}, False, "invalid arg 'x-selector'"),
        ({"x-browse": True}, False, "'x-browse' needs no-ack"),
    ],
)
def test_the_broker_refuses_bad_consumer_arguments(
    amqpd_broker: BrokerHandle, arguments: dict[str, object], auto_ack: bool, text: str
) -> None:
    """What a plain AMQP client sees (406 closes the channel, as RabbitMQ does for bad
    consumer arguments)."""
    conn = amqpd_broker.pika()
    try:
        channel = conn.channel()
        channel.queue_declare("args")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_consume("args", lambda *_: None, auto_ack=auto_ack, arguments=arguments)
        assert closed.value.reply_code == 406 and text in closed.value.reply_text
    finally:
        conn.close()
