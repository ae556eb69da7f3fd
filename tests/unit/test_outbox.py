"""The engine reports to the shell instead of calling it back: after a chunk the shared
`Outbox` lists each connection with output (once, however many frames), connections to
close and readers to resume; `read_delay` is the flow-control decision. No sockets."""

from __future__ import annotations

from pamqp import commands

from amqpd.engine.connection import FLOW_MAX_PAUSE, FLOW_POLL, Connection
from amqpd.engine.outbox import Outbox
from amqpd.model.broker import Broker
from amqpd.model.enqueue import FLOW_BACKLOG
from tests.unit.engine_driver import Client


def _pair(broker: Broker, outbox: Outbox[Connection]) -> tuple[Client, Client]:
    publisher, consumer = Client(broker, now=100.0), Client(broker, now=100.0)
    for client in (publisher, consumer):
        client.conn = Connection(broker, client.now, "127.0.0.1:5672", outbox)
        client.handshake()
        client.open_channel()
    return publisher, consumer


def test_a_chunk_reports_each_connection_with_output_once() -> None:
    broker = Broker()
    outbox: Outbox[Connection] = Outbox()
    publisher, consumer = _pair(broker, outbox)
    consumer.send(1, commands.Queue.Declare(queue="q"), commands.Basic.Consume(queue="q"))
    consumer.received()
    publisher.received()
    assert set(outbox.take_output()) == {consumer.conn, publisher.conn}  # handshake replies
    chunk = b"".join(Client.encode_publish(1, "q", b"%d" % n) for n in range(50))
    publisher.feed(chunk)
    assert outbox.take_output() == [consumer.conn]  # 50 deliveries, one entry; none for A
    assert outbox.take_output() == []
    assert len([v for v in consumer.methods() if isinstance(v, commands.Basic.Deliver)]) == 50


def test_a_connection_to_close_is_reported_even_without_output() -> None:
    broker = Broker()
    outbox: Outbox[Connection] = Outbox()
    publisher, _consumer = _pair(broker, outbox)
    outbox.take_output()
    publisher.conn.close(320, "CONNECTION_FORCED - bye")  # e.g. from an admin command
    assert outbox.take_output() == [publisher.conn]
    assert isinstance(publisher.methods()[-1], commands.Connection.Close)
    publisher.send(0, commands.Connection.CloseOk())
    assert publisher.conn.should_close and not publisher.received()
    assert outbox.take_output() == [publisher.conn]  # no output, but the socket must close


def test_a_flooding_publisher_waits_until_its_queue_catches_up_or_at_most_a_while() -> None:
    broker = Broker(now=1000.0)
    client = Client(broker, now=1000.0)
    client.handshake()
    client.open_channel()
    client.consume_actively("q")
    assert client.conn.read_delay(client.now) is None
    chunk = b"".join(Client.encode_publish(1, "q", b"x") for _ in range(FLOW_BACKLOG + 2))
    client.feed(chunk)
    assert client.conn.flow_queues
    assert client.conn.read_delay(client.now) == FLOW_POLL  # wait, then ask again
    assert client.conn.read_delay(client.now + FLOW_MAX_PAUSE / 2) == FLOW_POLL
    assert client.conn.read_delay(client.now + FLOW_MAX_PAUSE) is None  # never longer
    assert not client.conn.flow_queues
    client.feed(Client.encode_publish(1, "q", b"x"))
    assert client.conn.read_delay(client.now) == FLOW_POLL
    broker.vhosts["/"].queues["q"].purge()  # caught up: read at once
    assert client.conn.read_delay(client.now) is None
