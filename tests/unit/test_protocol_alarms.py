"""Resource alarms as a publisher sees them, driven through the sans-IO engine.

Like RabbitMQ (rabbit_reader), while an alarm is on the broker stops reading from a
connection at the end of the first chunk that carried content, even if the chunk ended in the
middle of a message: the rest stays unread (in the kernel, with a real socket) until the alarm
clears. Clients that announce the connection.blocked capability are told once.
"""

from __future__ import annotations

from pamqp import commands, frame

from amqpd.model.alarms import CLEAR_READINGS
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
    for _ in range(CLEAR_READINGS):
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


def test_memory_readings_flapping_at_the_watermark_give_one_blocked_unblocked_pair() -> None:
    broker = Broker(BrokerConfig(memory_high_watermark=1000))
    client = publisher(broker)
    client.send(1, *publish_frames("q", b"1"))
    client.methods()
    # What a blocked publisher does to the RSS at the watermark: up, trimmed just below, up.
    readings = [1010, 995, 1020, 980, 1005, 960, 1001, 999, 1030, 970] * 3
    for used in readings:
        broker.memory_used(used)
        client.send(1, *publish_frames("q", b"more"))
    # then consumers make room: a sustained drop well below the watermark
    for used in [890, 880, 870, 860, 850, 840]:
        broker.memory_used(used)
    kinds = [type(m).__name__ for m in client.methods()]
    assert kinds == ["Blocked", "Unblocked"]
    broker.memory_used(1200)  # a new crossing: a new pair
    client.send(1, *publish_frames("q", b"again"))
    assert [type(m).__name__ for m in client.methods()] == ["Blocked"]


def test_a_dip_under_the_clearing_level_that_does_not_last_keeps_the_alarm() -> None:
    broker = Broker(BrokerConfig(memory_high_watermark=1000))
    broker.memory_used(2000)
    for _ in range(CLEAR_READINGS - 1):
        broker.memory_used(100)
    broker.memory_used(950)  # under the watermark but above the clearing level: resets
    for _ in range(CLEAR_READINGS - 1):
        broker.memory_used(100)
    assert broker.alarms.active
    broker.memory_used(100)
    assert not broker.alarms.active
