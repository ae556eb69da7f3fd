"""Resource alarms as a publisher sees them, driven through the sans-IO engine.

Like RabbitMQ (rabbit_reader), while an alarm is on the broker stops reading from a
connection at the end of the first chunk that carried content, even if the chunk ended in the
middle of a message: the rest stays unread (in the kernel, with a real socket) until the alarm
clears. Clients that announce the connection.blocked capability are told once.
"""

from __future__ import annotations

from pamqp import commands, frame

from amqpd.model.broker import Broker, BrokerConfig
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import counts, declare, publish_frames

CAPABILITIES = {"connection.blocked": True, "consumer_cancel_notify": True}


def publisher(broker: Broker) -> Client:
    client = Client(broker, capabilities=CAPABILITIES)
    client.handshake()
    client.open_channel(1)
    declare(client, 1, "q")
    return client


def test_a_chunk_ending_inside_a_message_blocks_before_the_body() -> None:
    broker = Broker(BrokerConfig(memory_high_watermark=1000))
    client = publisher(broker)
    broker.memory_used(2000)
    publish, content, body = publish_frames("q", b"half")
    client.conn.receive_data(frame.marshal(publish, 1) + frame.marshal(content, 1))
    assert [(m.reason,) for m in client.methods()] == [("low on memory",)]
    assert client.conn.paused  # the shell reads nothing more: the body waits
    broker.memory_used(10)
    assert [type(m) for m in client.methods()] == [commands.Connection.Unblocked]
    assert not client.conn.paused
    client.conn.receive_data(frame.marshal(body, 1))
    assert counts(client, 1, "q") == (1, 0)


def test_blocked_is_sent_once_and_only_after_a_publish() -> None:
    broker = Broker(BrokerConfig(memory_high_watermark=1000))
    client = publisher(broker)
    broker.memory_used(2000)
    assert client.received() == [] and not client.conn.paused  # nothing published yet
    client.send(1, commands.Basic.Qos(prefetch_count=1))  # not a publish: still read
    assert [type(m) for m in client.methods()] == [commands.Basic.QosOk]
    client.send(1, *publish_frames("q", b"1"))
    assert [type(m) for m in client.methods()] == [commands.Connection.Blocked]
    assert counts(client, 1, "q") == (1, 0)  # the whole message was in the chunk
    client.send(1, *publish_frames("q", b"2"))  # (a shell would not even read this)
    assert client.methods() == []  # no second connection.blocked
