"""Acknowledgement modes with ActiveMQ's rules and numbers, against a real broker.

Every test runs against amqpd and, when installed, RabbitMQ (see test_jms_brokers.py): none
of these rules needs an amqpd extension. Acks are observed with `AckSpy` (a counting wrapper
around the session's pika channel) and through the broker's queue depth.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from interop.jms import (
    AckMode,
    IllegalStateException,
    Message,
    PrefetchPolicy,
    RedeliveryPolicy,
    Session,
)
from tests.integration.test_jms_brokers import AckSpy, BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]

FAST = RedeliveryPolicy(initial_redelivery_delay=0.01, redelivery_delay=0.01)


def _send(session: Session, queue: str, *bodies: str) -> None:
    producer = session.create_producer(session.queue(queue))
    for body in bodies:
        producer.send(body)


class Recorder:
    """A message listener that records (body, delivery_count) and can fail on purpose."""

    def __init__(self, fail: Any = lambda message: False) -> None:
        self.seen: list[tuple[str, int]] = []
        self.cond = threading.Condition()
        self.fail = fail

    def __call__(self, message: Message) -> None:
        with self.cond:
            self.seen.append((message.body, message.delivery_count))
            self.cond.notify_all()
        if self.fail(message):
            raise RuntimeError(f"listener failure on {message.body}")

    def wait(self, count: int, timeout: float = 5.0) -> list[tuple[str, int]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= count, timeout), self.seen
            return list(self.seen)


# -- AUTO_ACKNOWLEDGE --------------------------------------------------------------------------


def test_auto_receive_acks_before_returning(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = broker.name("auto")
    _send(session, queue, "one")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    message = consumer.receive(5)
    assert message is not None and message.body == "one"
    spy.settle(session)
    assert spy.acks == [(1, False)]
    session.close()  # nothing unacked: nothing comes back
    assert broker.depth(queue) == 0


def test_auto_listener_acks_after_the_listener_returns(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = broker.name("auto-listener")
    _send(session, queue, "one")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    acks_during_listener: list[list[tuple[int, bool]]] = []

    def note_acks(_message: Message) -> bool:
        acks_during_listener.append(list(spy.acks))
        return False

    recorder = Recorder(fail=note_acks)
    consumer.message_listener = recorder
    recorder.wait(1)
    assert spy.wait_acks(1) == [(1, False)]
    assert acks_during_listener == [[]]


@pytest.mark.parametrize("ack_mode", [AckMode.AUTO_ACKNOWLEDGE, AckMode.INDIVIDUAL_ACKNOWLEDGE])
def test_failing_listener_gets_7_deliveries_then_activemq_dlq(
    broker: BrokerHandle, ack_mode: AckMode
) -> None:
    """maximumRedeliveries 6 = 7 deliveries; the 7th failure poisons into ActiveMQ.DLQ."""
    connection = broker.connect(redelivery_policy=FAST)
    session = connection.create_session(ack_mode=ack_mode)
    queue = broker.name("poison")
    _send(session, queue, "bad")
    recorder = Recorder(fail=lambda _m: True)
    session.create_consumer(session.queue(queue)).message_listener = recorder
    dead_letters = broker.wait_dead_letters("ActiveMQ.DLQ", queue)
    assert recorder.wait(7) == [("bad", count) for count in range(1, 8)]
    props, body = dead_letters[0]
    assert body == b"bad"
    assert props.headers["x-death"][0]["reason"] == "rejected"
    assert broker.depth(queue) == 0
    connection.close()
    assert len(recorder.seen) == 7


def test_maximum_redeliveries_zero_poisons_on_first_failure(broker: BrokerHandle) -> None:
    connection = broker.connect(redelivery_policy=RedeliveryPolicy(maximum_redeliveries=0))
    session = connection.create_session()
    queue = broker.name("poison0")
    _send(session, queue, "bad")
    recorder = Recorder(fail=lambda _m: True)
    session.create_consumer(session.queue(queue)).message_listener = recorder
    broker.wait_dead_letters("ActiveMQ.DLQ", queue)
    assert recorder.seen == [("bad", 1)]


# -- CLIENT_ACKNOWLEDGE ------------------------------------------------------------------------


def test_client_acknowledge_acks_everything_the_session_delivered(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    first, second = broker.name("c1"), broker.name("c2")
    _send(session, first, "a1", "a2", "a3", "a4", "a5")
    _send(session, second, "b1")
    c1 = session.create_consumer(session.queue(first))
    c2 = session.create_consumer(session.queue(second))
    m1 = c1.receive(5)
    m2 = c2.receive(5)
    m3 = c1.receive(5)
    assert m1 is not None and m2 is not None and m3 is not None
    m1.acknowledge()  # acks m1, m2 and m3 (delivered after m1), not the prefetched a3..a5
    session.close()
    assert broker.depth(second) == 0
    assert [body for _p, body in broker.drain(first)] == [b"a3", b"a4", b"a5"]


def test_client_listener_exception_continues_with_next_message(broker: BrokerHandle) -> None:
    connection = broker.connect(redelivery_policy=FAST)
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = broker.name("client-listener")
    _send(session, queue, "a", "b")
    done = threading.Event()

    def listener(message: Message) -> None:
        recorder(message)
        if message.body == "a" and message.delivery_count == 1:
            raise RuntimeError("swallowed in CLIENT mode")
        if message.body == "b" and message.delivery_count == 1:
            session.recover()  # redelivers a and b, counter + 1
        elif message.body == "b":
            message.acknowledge()
            done.set()

    recorder = Recorder()
    session.create_consumer(session.queue(queue)).message_listener = listener
    assert done.wait(5)
    assert recorder.seen == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    session.close()
    assert broker.depth(queue) == 0


def test_recover_redelivers_with_the_counter_incremented(broker: BrokerHandle) -> None:
    connection = broker.connect(redelivery_policy=FAST)
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    queue = broker.name("recover")
    _send(session, queue, "x")
    consumer = session.create_consumer(session.queue(queue))
    first = consumer.receive(5)
    assert first is not None and (first.delivery_count, first.redelivered) == (1, False)
    session.recover()
    again = consumer.receive(5)
    assert again is not None and again.body == "x"
    assert (again.delivery_count, again.redelivered) == (2, True)
    again.acknowledge()
    session.close()
    assert broker.depth(queue) == 0


# -- INDIVIDUAL_ACKNOWLEDGE ----------------------------------------------------------------------


def test_individual_acknowledge_acks_that_message_only(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session(ack_mode=AckMode.INDIVIDUAL_ACKNOWLEDGE)
    queue = broker.name("individual")
    _send(session, queue, "1", "2", "3")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    messages = [consumer.receive(5) for _ in range(3)]
    assert all(messages)
    messages[1].acknowledge()  # type: ignore[union-attr]
    spy.settle(session)
    assert spy.acks == [(2, False)]
    session.close()
    assert [body for _p, body in broker.drain(queue)] == [b"1", b"3"]


def test_message_context_manager_acks_or_redelivers(broker: BrokerHandle) -> None:
    connection = broker.connect(redelivery_policy=FAST)
    session = connection.create_session(ack_mode=AckMode.INDIVIDUAL_ACKNOWLEDGE)
    queue = broker.name("with")
    _send(session, queue, "ok", "fails-once")
    consumer = session.create_consumer(session.queue(queue))
    with consumer.receive(5) as message:  # type: ignore[union-attr]
        assert message.body == "ok"
    with pytest.raises(ValueError), consumer.receive(5) as message:  # type: ignore[union-attr]
        raise ValueError(message.body)
    again = consumer.receive(5)
    assert again is not None and (again.body, again.delivery_count) == ("fails-once", 2)
    with again:
        pass
    session.close()
    assert broker.depth(queue) == 0


# -- DUPS_OK_ACKNOWLEDGE -----------------------------------------------------------------------


def test_dups_ok_on_a_queue_acks_each_message(broker: BrokerHandle) -> None:
    connection = broker.connect(prefetch_policy=PrefetchPolicy(queue_prefetch=10))
    session = connection.create_session(ack_mode=AckMode.DUPS_OK_ACKNOWLEDGE)
    queue = broker.name("dups-queue")
    _send(session, queue, *"abcd")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    for _ in range(4):
        assert consumer.receive(5) is not None
    assert spy.wait_acks(4) == [(1, False), (2, False), (3, False), (4, False)]


def test_dups_ok_on_a_topic_acks_at_half_the_prefetch_and_flushes_on_close(
    broker: BrokerHandle,
) -> None:
    connection = broker.connect(prefetch_policy=PrefetchPolicy(topic_prefetch=10))
    session = connection.create_session(ack_mode=AckMode.DUPS_OK_ACKNOWLEDGE)
    topic = session.topic(broker.name("dups-topic"))
    consumer = session.create_consumer(topic)
    spy = AckSpy(session)
    producer = session.create_producer(topic)
    for index in range(12):
        producer.send(str(index))
    for _ in range(4):
        assert consumer.receive(5) is not None
    spy.settle(session)
    assert spy.acks == []
    assert consumer.receive(5) is not None  # 5th = 0.5 x 10: one cumulative ack
    assert spy.wait_acks(1) == [(5, True)]
    for _ in range(3):
        assert consumer.receive(5) is not None
    consumer.close()  # the remaining 6..8 are acked on close
    assert spy.wait_acks(2) == [(5, True), (8, True)]


# -- optimizeAcknowledge -----------------------------------------------------------------------


def test_optimize_acknowledge_first_cumulative_ack_covers_7_messages(broker: BrokerHandle) -> None:
    """prefetch 10: one basic.ack(multiple) at the 7th consumed message (0.65 x 10)."""
    connection = broker.connect_url(
        "jms.optimizeAcknowledge=true&jms.optimizeAcknowledgeTimeOut=60000"
        "&jms.prefetchPolicy.queuePrefetch=10"
    )
    session = connection.create_session()
    queue = broker.name("optimize")
    _send(session, queue, *(str(i) for i in range(20)))
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    for _ in range(6):
        assert consumer.receive(5) is not None
    spy.settle(session)
    assert spy.acks == []
    assert broker.depth(queue) == 10  # 10 prefetched, nothing acked
    assert consumer.receive(5) is not None
    assert spy.wait_acks(1) == [(7, True)]
    broker.eventually(lambda: broker.depth(queue) == 3)  # 7 acked: the broker sent 7 more
    for _ in range(7):
        assert consumer.receive(5) is not None
    assert spy.wait_acks(2) == [(7, True), (14, True)]
    consumer.close()  # nothing pending: no extra ack
    spy.settle(session)
    assert spy.acks == [(7, True), (14, True)]


def test_optimize_acknowledge_timeout_is_checked_when_a_message_is_consumed(
    broker: BrokerHandle,
) -> None:
    """The timeout is not a timer: only the next consumed message releases the batch."""
    timeout = 0.5
    connection = broker.connect(
        optimize_acknowledge=True,
        optimize_acknowledge_timeout=timeout,
        prefetch_policy=PrefetchPolicy(queue_prefetch=10),
    )
    session = connection.create_session()
    queue = broker.name("optimize-timeout")
    _send(session, queue, "1", "2", "3")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    assert consumer.receive(5) is not None
    stop = threading.Event()
    stop.wait(timeout + 0.1)  # the rule is about elapsed time: let it elapse
    spy.settle(session)
    assert spy.acks == []  # no timer fired
    assert consumer.receive(5) is not None
    assert spy.wait_acks(1) == [(2, True)]


def test_scheduled_ack_interval_flushes_optimized_acks(broker: BrokerHandle) -> None:
    """optimizedAckScheduledAckInterval: a timer flushes what the 65 % rule still holds."""
    connection = broker.connect(
        optimize_acknowledge=True,
        optimize_acknowledge_timeout=0,
        optimized_ack_scheduled_ack_interval=0.1,
        prefetch_policy=PrefetchPolicy(queue_prefetch=100),
    )
    session = connection.create_session()
    queue = broker.name("scheduled")
    _send(session, queue, "1", "2")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    assert consumer.receive(5) is not None
    assert consumer.receive(5) is not None
    assert spy.wait_acks(1) == [(2, True)]


def test_acknowledge_is_a_no_op_in_auto_mode(broker: BrokerHandle) -> None:
    connection = broker.connect(
        optimize_acknowledge=True,
        optimize_acknowledge_timeout=0,
        prefetch_policy=PrefetchPolicy(queue_prefetch=10),
    )
    session = connection.create_session()
    queue = broker.name("auto-noop")
    _send(session, queue, "1")
    consumer = session.create_consumer(session.queue(queue))
    spy = AckSpy(session)
    message = consumer.receive(5)
    assert message is not None
    message.acknowledge()
    session.acknowledge()
    spy.settle(session)
    assert spy.acks == []  # still waiting for the 7th message (or close)
    consumer.close()
    assert spy.wait_acks(1) == [(1, False)]


# -- SESSION_TRANSACTED --------------------------------------------------------------------------


def test_transacted_commit_and_rollback(broker: BrokerHandle) -> None:
    connection = broker.connect(redelivery_policy=FAST)
    session = connection.create_session(transacted=True)
    queue = broker.name("tx")
    producer = session.create_producer(session.queue(queue))
    producer.send("a")
    producer.send("b")
    assert broker.depth(queue) == 0  # not visible before commit
    session.commit()
    broker.eventually(lambda: broker.depth(queue) == 2)
    consumer = session.create_consumer(session.queue(queue))
    first = [consumer.receive(5), consumer.receive(5)]
    assert [(m.body, m.delivery_count) for m in first if m] == [("a", 1), ("b", 1)]
    session.rollback()
    again = [consumer.receive(5), consumer.receive(5)]
    assert [(m.body, m.delivery_count, m.redelivered) for m in again if m] == [
        ("a", 2, True),
        ("b", 2, True),
    ]
    with session.transaction():
        producer.send("c")
    session.commit()
    third = consumer.receive(5)
    assert third is not None and third.body == "c"
    session.commit()
    session.close()
    assert broker.depth(queue) == 0


def test_transacted_rollback_beyond_the_maximum_dead_letters(broker: BrokerHandle) -> None:
    policy = RedeliveryPolicy(
        maximum_redeliveries=2, initial_redelivery_delay=0.01, redelivery_delay=0.01
    )
    connection = broker.connect(redelivery_policy=policy)
    session = connection.create_session(transacted=True)
    queue = broker.name("tx-poison")
    session.create_producer(session.queue(queue)).send("x")
    session.commit()
    consumer = session.create_consumer(session.queue(queue))
    counts = []
    for _ in range(3):
        message = consumer.receive(5)
        assert message is not None
        counts.append(message.delivery_count)
        session.rollback()
    assert counts == [1, 2, 3]
    assert consumer.receive(0.2) is None
    dead = broker.wait_dead_letters("ActiveMQ.DLQ", queue)
    assert dead[0][1] == b"x"


def test_transaction_context_manager_rolls_back_on_error(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session(transacted=True)
    queue = broker.name("tx-with")
    producer = session.create_producer(session.queue(queue))
    with pytest.raises(RuntimeError), session.transaction():
        producer.send("discarded")
        raise RuntimeError("abort")
    with session.transaction():
        producer.send("kept")
    assert [body for _p, body in broker.drain(queue)] == [b"kept"]


def test_mode_errors(broker: BrokerHandle) -> None:
    connection = broker.connect()
    plain = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    with pytest.raises(IllegalStateException, match="Not a transacted session"):
        plain.commit()
    with pytest.raises(IllegalStateException, match="Not a transacted session"):
        plain.rollback()
    transacted = connection.create_session(transacted=True)
    with pytest.raises(IllegalStateException, match="This session is transacted"):
        transacted.recover()
    plain.acknowledge()  # nothing to ack: fine
    plain.close()
    with pytest.raises(IllegalStateException, match="closed"):
        plain.create_consumer(plain.queue(broker.name("x")))


# -- the window: read a batch larger than the prefetch, then acknowledge once -----------------


@pytest.mark.parametrize(
    "ack_mode",
    [
        AckMode.CLIENT_ACKNOWLEDGE,
        AckMode.INDIVIDUAL_ACKNOWLEDGE,
        AckMode.SESSION_TRANSACTED,
    ],
)
def test_batch_larger_than_the_prefetch_then_one_acknowledge_never_stalls(
    broker: BrokerHandle, ack_mode: AckMode
) -> None:
    connection = broker.connect(prefetch_policy=PrefetchPolicy(queue_prefetch=10))
    session = connection.create_session(
        transacted=ack_mode is AckMode.SESSION_TRANSACTED, ack_mode=ack_mode
    )
    queue = broker.name("batch")
    sender = connection.create_session()
    _send(sender, queue, *(str(i) for i in range(25)))
    consumer = session.create_consumer(session.queue(queue))
    bodies: list[str] = []
    for _ in range(25):
        message = consumer.receive(5)
        assert message is not None, f"stalled after {len(bodies)} messages"
        bodies.append(message.body)
    assert bodies == [str(i) for i in range(25)]
    if ack_mode is AckMode.SESSION_TRANSACTED:
        session.commit()
    else:
        session.acknowledge()
    session.close()
    assert broker.depth(queue) == 0
