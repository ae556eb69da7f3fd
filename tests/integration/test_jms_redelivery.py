"""Redelivery policy and dead-letter strategies against a real broker.

Delays are real delays (kept small). The crash tests use amqpd only: they rely on its
persisted ``x-delivery-count`` on every redelivery (RabbitMQ classic queues only set the
``redelivered`` flag, so there the count restarts at 2).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from interop.jms import (
    AckMode,
    DeliveryMode,
    IndividualDeadLetterStrategy,
    Message,
    PrefetchPolicy,
    RedeliveryPolicy,
    Session,
)
from tests.integration.test_jms_brokers import BrokerHandle, amqpd_broker, broker, broker_kind

__all__ = ["amqpd_broker", "broker", "broker_kind"]


class Timeline:
    """Listener recording (body, delivery_count, monotonic time); fails while told to."""

    def __init__(self, fail_while: int) -> None:
        self.events: list[tuple[str, int, float]] = []
        self.cond = threading.Condition()
        self.fail_while = fail_while

    def __call__(self, message: Message) -> None:
        with self.cond:
            self.events.append((message.body, message.delivery_count, time.monotonic()))
            self.cond.notify_all()
        if message.body.startswith("fail") and message.delivery_count <= self.fail_while:
            raise RuntimeError("try again")

    def wait(self, count: int, timeout: float = 5.0) -> list[tuple[str, int, float]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= count, timeout), self.events
            return list(self.events)


def _listen(session: Session, queue: str, timeline: Timeline) -> None:
    session.create_consumer(session.queue(queue)).message_listener = timeline


def _gaps(events: list[tuple[str, int, float]]) -> list[float]:
    return [later[2] - earlier[2] for earlier, later in itertools.pairwise(events)]


def test_initial_then_subsequent_redelivery_delay(broker: BrokerHandle) -> None:
    policy = RedeliveryPolicy(initial_redelivery_delay=0.3, redelivery_delay=0.05)
    connection = broker.connect(redelivery_policy=policy)
    session = connection.create_session()
    queue = broker.name("delays")
    session.create_producer(session.queue(queue)).send("fail")
    timeline = Timeline(fail_while=2)
    _listen(session, queue, timeline)
    events = timeline.wait(3)
    assert [count for _b, count, _t in events] == [1, 2, 3]
    first, second = _gaps(events)
    assert first >= 0.3
    assert 0.05 <= second < 0.3


def test_exponential_backoff(broker: BrokerHandle) -> None:
    policy = RedeliveryPolicy(
        initial_redelivery_delay=0.04, use_exponential_backoff=True, backoff_multiplier=3.0
    )
    connection = broker.connect(redelivery_policy=policy)
    session = connection.create_session()
    queue = broker.name("backoff")
    session.create_producer(session.queue(queue)).send("fail")
    timeline = Timeline(fail_while=3)
    _listen(session, queue, timeline)
    gaps = _gaps(timeline.wait(4))
    for gap, expected in zip(gaps, (0.04, 0.12, 0.36), strict=True):
        assert expected <= gap < expected + 0.25


def test_blocking_redelivery_keeps_order(broker: BrokerHandle) -> None:
    policy = RedeliveryPolicy(initial_redelivery_delay=0.1)
    connection = broker.connect(redelivery_policy=policy)
    session = connection.create_session()
    queue = broker.name("blocking")
    producer = session.create_producer(session.queue(queue))
    producer.send("fail-a")
    producer.send("b")
    timeline = Timeline(fail_while=1)
    _listen(session, queue, timeline)
    assert [(b, c) for b, c, _t in timeline.wait(3)] == [("fail-a", 1), ("fail-a", 2), ("b", 1)]


def test_non_blocking_redelivery_lets_later_messages_pass(broker: BrokerHandle) -> None:
    policy = RedeliveryPolicy(initial_redelivery_delay=0.2, non_blocking_redelivery=True)
    connection = broker.connect(redelivery_policy=policy)
    session = connection.create_session()
    queue = broker.name("non-blocking")
    producer = session.create_producer(session.queue(queue))
    producer.send("fail-a")
    producer.send("b")
    timeline = Timeline(fail_while=1)
    _listen(session, queue, timeline)
    assert [(b, c) for b, c, _t in timeline.wait(3)] == [("fail-a", 1), ("b", 1), ("fail-a", 2)]


def test_recover_counts_toward_the_maximum_and_can_dead_letter(broker: BrokerHandle) -> None:
    connection = broker.connect(
        redelivery_policy=RedeliveryPolicy(maximum_redeliveries=1, initial_redelivery_delay=0)
    )
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = broker.name("recover-dlq")
    session.create_producer(session.queue(queue)).send("x")
    consumer = session.create_consumer(session.queue(queue))
    counts = []
    for _ in range(2):
        message = consumer.receive(5)
        assert message is not None
        counts.append(message.delivery_count)
        session.recover()
    assert counts == [1, 2]
    assert consumer.receive(0.2) is None
    assert [body for _p, body in broker.wait_dead_letters("ActiveMQ.DLQ", queue)] == [b"x"]


def test_individual_dead_letter_strategy(broker: BrokerHandle) -> None:
    connection = broker.connect(
        redelivery_policy=RedeliveryPolicy(maximum_redeliveries=1, initial_redelivery_delay=0),
        dead_letter_strategy=IndividualDeadLetterStrategy(),
    )
    session = connection.create_session()
    queue = broker.name("orders")
    session.create_producer(session.queue(queue)).send("fail")
    timeline = Timeline(fail_while=99)
    _listen(session, queue, timeline)
    dead = broker.wait_dead_letters(f"ActiveMQ.DLQ.Queue.{queue}", queue)
    assert [body for _p, body in dead] == [b"fail"]
    assert [c for _b, c, _t in timeline.events] == [1, 2]


def test_non_persistent_poison_is_dropped_not_dead_lettered(broker: BrokerHandle) -> None:
    """ActiveMQ's processNonPersistent=false default."""
    connection = broker.connect(
        redelivery_policy=RedeliveryPolicy(maximum_redeliveries=0),
        dead_letter_strategy=IndividualDeadLetterStrategy(),
    )
    session = connection.create_session()
    queue = broker.name("transient")
    producer = session.create_producer(session.queue(queue))
    producer.send("fail-transient", delivery_mode=DeliveryMode.NON_PERSISTENT)
    producer.send("fail-persistent")
    timeline = Timeline(fail_while=99)
    _listen(session, queue, timeline)
    dead = broker.wait_dead_letters(f"ActiveMQ.DLQ.Queue.{queue}", queue)
    assert [body for _p, body in dead] == [b"fail-persistent"]
    assert broker.depth(queue) == 0


def test_expired_message_in_the_prefetch_buffer_is_dead_lettered(broker: BrokerHandle) -> None:
    connection = broker.connect(start=False)
    session = connection.create_session()
    queue = broker.name("expiry")
    producer = session.create_producer(session.queue(queue))
    producer.send("short-lived", time_to_live=0.2)
    producer.send("keeper")
    consumer = session.create_consumer(session.queue(queue))
    broker.eventually(lambda: broker.depth(queue) == 0)  # both prefetched, none delivered
    time.sleep(0.3)  # let the first one expire in the client's buffer
    connection.start()
    message = consumer.receive(5)
    assert message is not None and message.body == "keeper"
    dead = broker.wait_dead_letters("ActiveMQ.DLQ", queue)
    assert [body for _p, body in dead] == [b"short-lived"]


# -- amqpd only: the delivery count survives consumers that go away ------------------------------


def _receive_and_vanish(broker: BrokerHandle, queue: str) -> int:
    """Receive one message in CLIENT mode and close the connection without acking."""
    connection = broker.factory().create_connection()
    try:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
        message = session.create_consumer(session.queue(queue)).receive(5)
        assert message is not None
        return message.delivery_count
    finally:
        connection.close()


def test_delivery_count_survives_consumer_crashes(amqpd_broker: BrokerHandle) -> None:
    """3 consumers vanish, then a failing listener: still 7 deliveries in all, then the DLQ."""
    broker = amqpd_broker
    queue = broker.name("crashy")
    sender = broker.connect().create_session()
    sender.create_producer(sender.queue(queue)).send("fail")
    assert [_receive_and_vanish(broker, queue) for _ in range(3)] == [1, 2, 3]
    connection = broker.connect(
        redelivery_policy=RedeliveryPolicy(initial_redelivery_delay=0.01, redelivery_delay=0.01),
        prefetch_policy=PrefetchPolicy(queue_prefetch=1),
    )
    session = connection.create_session()
    timeline = Timeline(fail_while=99)
    _listen(session, queue, timeline)
    broker.wait_dead_letters("ActiveMQ.DLQ", queue)
    assert [c for _b, c, _t in timeline.events] == [4, 5, 6, 7]


def test_transacted_pre_dispatch_check_poisons_without_dispatch(
    amqpd_broker: BrokerHandle,
) -> None:
    broker = amqpd_broker
    queue = broker.name("pre-dispatch")
    sender = broker.connect().create_session()
    sender.create_producer(sender.queue(queue)).send("x")
    assert [_receive_and_vanish(broker, queue) for _ in range(3)] == [1, 2, 3]
    connection = broker.connect(redelivery_policy=RedeliveryPolicy(maximum_redeliveries=2))
    session = connection.create_session(transacted=True)
    consumer = session.create_consumer(session.queue(queue))
    assert consumer.receive(0.3) is None  # counter 3 > 2: never reaches the application
    session.commit()  # the poison reject is part of the transaction
    assert [body for _p, body in broker.wait_dead_letters("ActiveMQ.DLQ", queue)] == [b"x"]


def test_existing_queue_with_other_arguments_is_used_as_it_is(
    broker: BrokerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """406 on the declare: reopen the admin channel, declare passively, warn."""
    queue = broker.name("legacy")
    admin = broker.pika()
    try:
        admin.channel().queue_declare(queue, durable=True, arguments={"x-max-length": 100})
    finally:
        admin.close()
    connection = broker.connect(redelivery_policy=RedeliveryPolicy(maximum_redeliveries=0))
    session = connection.create_session()
    with caplog.at_level(logging.WARNING, logger="interop.jms.topology"):
        producer = session.create_producer(session.queue(queue))
        producer.send("fail")
    assert "exists with other arguments" in caplog.text
    timeline = Timeline(fail_while=99)
    _listen(session, queue, timeline)
    timeline.wait(1)
    broker.eventually(lambda: broker.depth(queue) == 0)  # rejected without a DLX: dropped
    producer.send("still works")
    assert broker.dead_letters("ActiveMQ.DLQ", queue) == []
