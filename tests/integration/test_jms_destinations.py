"""Queues, topics, durable subscribers, selectors, prefetch 0 (pull), receive vs listener,
message headers, temporary queues, options: against a real broker."""

from __future__ import annotations

import itertools
import threading
import time

import pika
import pytest

from interop.jms import (
    AckMode,
    BytesMessage,
    ConfigurationError,
    ConnectionFactory,
    DeliveryMode,
    IllegalStateException,
    InvalidClientIDException,
    InvalidDestinationException,
    InvalidSelectorException,
    JMSException,
    MapMessage,
    Message,
    MessageConsumer,
    PrefetchPolicy,
    TextMessage,
    Topic,
)
from tests.conftest import node_under_test
from tests.integration.test_jms_brokers import AckSpy, BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]


def _bodies(consumer_receive: list[Message | None]) -> list[str]:
    return [message.body for message in consumer_receive if message is not None]


def _receive(consumer: MessageConsumer, count: int) -> list[str]:
    """Exactly ``count`` message bodies, then nothing more (checked without a long wait)."""
    bodies: list[str] = []
    for _ in range(count):
        message = consumer.receive(5)
        assert message is not None, f"only {bodies}"
        bodies.append(message.body)
    assert consumer.receive(0.05) is None
    return bodies


# -- topics ------------------------------------------------------------------------------------


def test_topic_subscribers_get_copies_and_wildcards_translate(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    base = broker.name("orders")
    exact = session.create_consumer(session.topic(f"{base}.eu"))
    one_word = session.create_consumer(session.topic(f"{base}.*"))
    rest = session.create_consumer(session.topic(f"{base}.>"))
    producer = session.create_producer()
    producer.send("eu", destination=session.topic(f"{base}.eu"))
    producer.send("us-west", destination=session.topic(f"{base}.us.west"))
    assert _receive(exact, 1) == ["eu"]
    assert _receive(one_word, 1) == ["eu"]
    assert _receive(rest, 2) == ["eu", "us-west"]
    received = rest.receive(0)
    assert received is None
    with pytest.raises(InvalidDestinationException, match="wildcard"):
        producer.send("x", destination=session.topic(f"{base}.>"))


def test_topic_message_destination_and_subscriber_queue_cleanup(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    topic = session.topic(broker.name("news"))
    consumer = session.create_consumer(topic)
    queue = consumer.queue
    session.create_producer(topic).send("hello")
    message = consumer.receive(5)
    assert message is not None and message.destination == topic
    consumer.close()
    conn = broker.pika()
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare(queue, passive=True)
        assert refused.value.reply_code == 404
    finally:
        conn.close()


def test_topic_selector_is_evaluated_by_the_client(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    topic = session.topic(broker.name("parcels"))
    consumer = session.create_consumer(topic, selector="color = 'red' AND weight > 2")
    spy = AckSpy(session)
    producer = session.create_producer(topic)
    producer.send("red-heavy", properties={"color": "red", "weight": 5})
    producer.send("red-light", properties={"color": "red", "weight": 1})
    producer.send("blue-heavy", properties={"color": "blue", "weight": 9})
    producer.send("red-float", properties={"color": "red", "weight": 2.5})
    producer.send("no-props")
    assert _receive(consumer, 2) == ["red-heavy", "red-float"]
    spy.settle(session)
    assert len(spy.acks) == 5  # the misses are acked (ActiveMQ's UNMATCHED), not left behind


def test_selector_via_destination_option_and_bad_selectors(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    name = broker.name("prio")
    consumer = session.create_consumer(session.topic(f"{name}?consumer.selector=JMSPriority%3E6"))
    producer = session.create_producer(session.topic(name))
    producer.send("low", priority=1)
    producer.send("high", priority=9)
    assert _receive(consumer, 1) == ["high"]
    with pytest.raises(InvalidSelectorException):
        session.create_consumer(session.queue(broker.name("q")), selector="a = ")
    with pytest.raises(InvalidSelectorException):
        session.create_consumer(session.topic(name), selector="a = ")


def test_no_local_drops_this_connections_messages(broker: BrokerHandle) -> None:
    mine = broker.connect()
    other = broker.connect()
    session = mine.create_session()
    topic = Topic(broker.name("chat"))
    local = session.create_consumer(topic, no_local=True)
    everyone = session.create_consumer(topic)
    session.create_producer(topic).send("from me")
    other.create_session().create_producer(topic).send("from them")
    assert _receive(local, 1) == ["from them"]
    assert sorted(_receive(everyone, 2)) == ["from me", "from them"]


# -- durable subscribers -------------------------------------------------------------------------


def test_durable_subscriber_needs_a_client_id(broker: BrokerHandle) -> None:
    session = broker.connect().create_session()
    with pytest.raises(IllegalStateException, match="unique clientID"):
        session.create_durable_subscriber(session.topic(broker.name("t")), "sub")


def test_durable_subscription_keeps_messages_while_offline(broker: BrokerHandle) -> None:
    client_id = broker.name("client")
    topic = Topic(broker.name("prices.>"))
    connection = broker.connect(client_id=client_id)
    session = connection.create_session()
    subscriber = session.create_durable_subscriber(topic, "ticker")
    assert subscriber.queue == f"{client_id}.ticker"
    with pytest.raises(JMSException, match="Durable consumer is in use"):
        session.create_durable_subscriber(topic, "ticker")
    with pytest.raises(JMSException, match="Durable consumer is in use"):
        session.unsubscribe("ticker")
    subscriber.close()
    publisher = broker.connect().create_session()
    producer = publisher.create_producer()
    producer.send("1", destination=Topic(broker.name("prices.eur")))
    producer.send("2", destination=Topic(broker.name("prices.usd")))
    again = session.create_durable_subscriber(topic, "ticker")
    assert _receive(again, 2) == ["1", "2"]
    again.close()
    session.unsubscribe("ticker")
    with pytest.raises(InvalidDestinationException, match="No durable subscription"):
        session.unsubscribe("ticker")


def test_durable_prefetch_follows_activemq(broker: BrokerHandle) -> None:
    """1000 for AUTO on a connection with one non-transacted session, else 100."""
    connection = broker.connect(client_id=broker.name("c"))
    auto = connection.create_session()
    first = auto.create_durable_subscriber(Topic(broker.name("t")), "a")
    assert first.prefetch == 1000
    second_session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    second = auto.create_durable_subscriber(Topic(broker.name("t")), "b")
    assert second.prefetch == 100
    assert second_session.create_durable_subscriber(Topic(broker.name("t")), "c").prefetch == 100


def test_client_id_is_unique_per_broker(broker: BrokerHandle) -> None:
    client_id = broker.name("unique")
    broker.connect(client_id=client_id)
    with pytest.raises(InvalidClientIDException):
        broker.connect(client_id=client_id)
    late = broker.connect()
    late.client_id = broker.name("late")
    with pytest.raises(IllegalStateException):
        late.client_id = "again"


# -- prefetch 0 (pull), receive timeouts, receive vs listener ---------------------------------


def test_prefetch_zero_pulls_one_message_per_receive(broker: BrokerHandle) -> None:
    connection = broker.connect(prefetch_policy=PrefetchPolicy(queue_prefetch=0))
    session = connection.create_session()
    queue = session.queue(broker.name("pull"))
    consumer = session.create_consumer(queue)
    assert consumer.receive_no_wait() is None
    producer = session.create_producer(queue)
    producer.send("a")
    producer.send("b")
    first = consumer.receive(5)
    assert first is not None and first.body == "a"
    assert broker.depth(queue.name) == 1  # nothing was pushed ahead
    sender = threading.Timer(0.1, lambda: producer.send("c"))
    second = consumer.receive(5)
    sender.start()
    third = consumer.receive(5)  # polls until "c" arrives
    sender.join()
    assert _bodies([second, third]) == ["b", "c"]
    assert consumer.receive(0.05) is None
    with pytest.raises(JMSException, match="Illegal prefetch size of zero"):
        consumer.message_listener = lambda message: None


def test_destination_prefetch_option(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    name = broker.name("small")
    producer = session.create_producer(session.queue(name))
    for index in range(10):
        producer.send(str(index))
    consumer = session.create_consumer(session.queue(f"{name}?consumer.prefetchSize=3"))
    assert consumer.prefetch == 3
    broker.eventually(lambda: broker.depth(name) == 7)
    pull = session.create_consumer(session.queue(f"{name}?consumer.prefetchSize=0"))
    assert pull.prefetch == 0
    with pytest.raises(ConfigurationError, match=r"consumer\.prefetchSiz"):
        session.create_consumer(session.queue(f"{name}?consumer.prefetchSiz=3"))


def test_receive_zero_does_not_wait_and_receive_waits(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("wait"))
    consumer = session.create_consumer(queue)
    started = time.monotonic()
    assert consumer.receive(0) is None
    assert time.monotonic() - started < 0.5
    other = broker.connect().create_session()
    timer = threading.Timer(0.1, lambda: other.create_producer(queue).send("late"))
    timer.start()
    message = consumer.receive()  # no timeout: waits for the message
    timer.join()
    assert message is not None and message.body == "late"


def test_receive_and_listener_are_exclusive_both_ways(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    listening = session.create_consumer(session.queue(broker.name("a")))
    receiving = session.create_consumer(session.queue(broker.name("b")))
    listening.message_listener = lambda message: None
    with pytest.raises(IllegalStateException, match="Cannot synchronously receive"):
        receiving.receive(0)
    listening.message_listener = None
    outcome: list[object] = []
    in_receive = threading.Event()

    def blocked_receive() -> None:
        in_receive.set()
        outcome.append(receiving.receive(5))

    thread = threading.Thread(target=blocked_receive, daemon=True)
    thread.start()
    assert in_receive.wait(5)
    deadline = time.monotonic() + 5
    while session._receivers == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    with pytest.raises(IllegalStateException, match="receive\\(\\) is outstanding"):
        listening.message_listener = lambda message: None
    receiving.close()  # ends the blocked receive with None
    thread.join(5)
    assert outcome == [None]


def test_messages_wait_for_connection_start(broker: BrokerHandle) -> None:
    connection = broker.connect(start=False)
    session = connection.create_session()
    queue = session.queue(broker.name("stopped"))
    session.create_producer(queue).send("x")
    consumer = session.create_consumer(queue)
    assert consumer.receive(0.2) is None
    connection.start()
    message = consumer.receive(5)
    assert message is not None and message.body == "x"


def test_iteration_yields_messages(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("iter"))
    producer = session.create_producer(queue)
    for body in "abc":
        producer.send(body)
    with session.create_consumer(queue) as consumer:
        assert [m.body for m in itertools.islice(consumer, 3)] == ["a", "b", "c"]


def test_exclusive_consumer_option_single_active_consumer(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    name = broker.name("sac")
    first = session.create_consumer(session.queue(f"{name}?consumer.exclusive=true"))
    second = session.create_consumer(session.queue(f"{name}?consumer.exclusive=true"))
    producer = session.create_producer(session.queue(name))
    for body in "abcd":
        producer.send(body)
    assert _receive(first, 4) == ["a", "b", "c", "d"]
    assert second.receive(0) is None


# -- messages --------------------------------------------------------------------------------------


def test_jms_headers_and_bodies_map_onto_amqp(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("headers"))
    reply_to = session.temporary_queue()
    producer = session.create_producer(queue)
    sent = producer.send(
        TextMessage("héllo", correlation_id="corr-1", reply_to=reply_to, type="greeting"),
        priority=7,
        time_to_live=60,
        delivery_mode=DeliveryMode.NON_PERSISTENT,
        properties={"i": 3, "f": 2.5, "b": True, "s": "x"},
    )
    producer.send(MapMessage({"k": [1, 2], "n": None}))
    producer.send(BytesMessage(b"\x00\x01"))
    consumer = session.create_consumer(queue)
    text = consumer.receive(5)
    assert isinstance(text, TextMessage)
    assert text.body == "héllo"
    assert text.message_id == sent.message_id
    assert str(text.message_id).startswith("ID:")
    assert (text.correlation_id, text.type, text.priority) == ("corr-1", "greeting", 7)
    assert text.reply_to is not None and text.reply_to.name == reply_to.name
    assert text.delivery_mode == DeliveryMode.NON_PERSISTENT
    assert text.properties == {"i": 3, "f": 2.5, "b": True, "s": "x"}
    assert text.expiration is not None and 50 < text.expiration - time.time() <= 60
    assert text.timestamp is not None and abs(text.timestamp - time.time()) < 5
    assert (text.redelivered, text.delivery_count) == (False, 1)
    mapped = consumer.receive(5)
    assert isinstance(mapped, MapMessage) and mapped.body == {"k": [1, 2], "n": None}
    raw = consumer.receive(5)
    assert isinstance(raw, BytesMessage) and raw.body == b"\x00\x01"
    # A plain AMQP consumer sees ordinary AMQP properties.
    consumer.close()
    producer.send("plain", properties={"color": "red"})
    [(props, body)] = broker.drain(queue.name)
    assert (props.content_type, props.content_encoding, body) == ("text/plain", "utf-8", b"plain")
    assert props.delivery_mode == 2 and props.priority == 4
    assert props.headers == {"color": "red"}


def test_request_reply_over_a_temporary_queue(broker: BrokerHandle) -> None:
    server_conn = broker.connect()
    client_conn = broker.connect()
    service = server_conn.create_session()
    requests = service.queue(broker.name("rpc"))
    replier = service.create_producer()

    def serve(message: Message) -> None:
        assert message.reply_to is not None
        replier.send(
            TextMessage(message.body.upper(), correlation_id=message.message_id),
            destination=message.reply_to,
        )

    service.create_consumer(requests).message_listener = serve
    client = client_conn.create_session()
    inbox = client.temporary_queue()
    replies = client.create_consumer(inbox)
    request = client.create_producer(requests).send(TextMessage("ping", reply_to=inbox))
    reply = replies.receive(5)
    assert reply is not None and (reply.body, reply.correlation_id) == ("PING", request.message_id)


def test_exception_listener_hears_about_a_lost_connection(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    errors: list[JMSException] = []
    heard = threading.Event()
    with node_under_test(tmp_path_factory) as server:
        connection = ConnectionFactory(
            f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        ).create_connection()

        def listener(error: JMSException) -> None:
            errors.append(error)
            heard.set()

        connection.exception_listener = listener
        session = connection.create_session()
        consumer = session.create_consumer(session.queue("q"))
        connection.start()
    assert heard.wait(5)
    with pytest.raises(JMSException, match="session failed"):
        consumer.receive(1)
    connection.close()


def test_deleting_the_queue_closes_the_consumer(broker: BrokerHandle) -> None:
    connection = broker.connect()
    session = connection.create_session()
    queue = session.queue(broker.name("doomed"))
    consumer = session.create_consumer(queue)
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(consumer.receive(10)), daemon=True)
    thread.start()
    admin = broker.pika()
    try:
        admin.channel().queue_delete(queue.name)  # the broker sends basic.cancel
    finally:
        admin.close()
    thread.join(10)
    assert outcome == [None]
    assert consumer.closed
