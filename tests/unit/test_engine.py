"""The sans-IO connection/channel engine driven with pamqp frames."""

from __future__ import annotations

import pytest
from pamqp import body, commands, header

from amqpd.engine.connection_open import State
from amqpd.model.broker import Broker, BrokerConfig
from tests.unit.engine_driver import Client


def test_handshake_sends_start_tune_and_open_ok() -> None:
    client = Client(Broker())
    frames = [v for _c, v in client.handshake()]
    kinds = [type(f) for f in frames]
    assert kinds == [
        commands.Connection.Start,
        commands.Connection.Tune,
        commands.Connection.OpenOk,
    ]
    start = frames[0]
    assert start.mechanisms == "AMQPLAIN PLAIN"  # RabbitMQ 3.10 offers them so
    caps = start.server_properties["capabilities"]
    assert caps["publisher_confirms"] and caps["basic.nack"] and caps["consumer_cancel_notify"]
    assert frames[1].channel_max == 2047 and frames[1].frame_max == 131072
    assert client.conn.state is State.OPEN


def test_bad_password_is_403_close() -> None:
    client = Client(Broker())
    frames = [v for _c, v in client.handshake(password="nope")]
    close = frames[-1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 403


def test_unknown_vhost_is_530() -> None:
    client = Client(Broker())
    close = [v for _c, v in client.handshake(vhost="nope")][-1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 530
    assert "nope" in close.reply_text


def test_publish_on_one_connection_delivers_on_another() -> None:
    broker = Broker()
    producer, consumer = Client(broker), Client(broker)
    for c in (producer, consumer):
        c.handshake()
        c.open_channel()
    consumer.send(1, commands.Queue.Declare(queue="q"))
    consumer.send(1, commands.Basic.Consume(queue="q", consumer_tag="ctag"))
    assert isinstance(consumer.methods()[-1], commands.Basic.ConsumeOk)
    producer.publish(1, "q", b"hello", delivery_mode=2, headers={"k": "v"})
    out = consumer.received()
    deliver, content, payload = (v for _c, v in out)
    assert isinstance(deliver, commands.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.routing_key) == ("ctag", 1, "q")
    assert isinstance(content, header.ContentHeader)
    assert content.properties.headers == {"k": "v"} and content.properties.delivery_mode == 2
    assert isinstance(payload, body.ContentBody) and payload.value == b"hello"


@pytest.mark.parametrize(
    "pieces", [[b"whole"], [b"", b"ab", b"c"], [b"a", b"", b"b", b"cde"], [b"x" * 10, b"y"]]
)
def test_a_body_in_several_frames_is_delivered_whole(pieces: list[bytes]) -> None:
    broker = Broker()
    producer, consumer = Client(broker), Client(broker)
    for c in (producer, consumer):
        c.handshake()
        c.open_channel()
    consumer.send(1, commands.Queue.Declare(queue="q"))
    consumer.send(1, commands.Basic.Consume(queue="q", consumer_tag="ctag"))
    consumer.received()
    whole = b"".join(pieces)
    producer.send(
        1,
        commands.Basic.Publish(routing_key="q"),
        header.ContentHeader(0, len(whole), commands.Basic.Properties()),
        *(body.ContentBody(piece) for piece in pieces),
    )
    out = [v for _c, v in consumer.received()]
    assert isinstance(out[0], commands.Basic.Deliver)
    assert b"".join(v.value for v in out[2:]) == whole


def test_confirms_for_a_batch_coalesce_into_one_ack() -> None:
    client = Client(Broker())
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="q"), commands.Confirm.Select())
    client.received()
    chunk = b"".join(Client.encode_publish(1, "q", b"x") for _ in range(1000))
    client.feed(chunk)
    acks = client.methods()
    assert len(acks) == 1
    assert isinstance(acks[0], commands.Basic.Ack)
    assert acks[0].delivery_tag == 1000 and acks[0].multiple


def test_reject_publish_overflow_nacks_and_keeps_message_out() -> None:
    client = Client(Broker())
    client.handshake()
    client.open_channel()
    client.send(
        1,
        commands.Queue.Declare(
            queue="q", arguments={"x-max-length": 2, "x-overflow": "reject-publish"}
        ),
        commands.Confirm.Select(),
    )
    client.received()
    for n in range(3):
        client.publish(1, "q", b"%d" % n)
    frames = client.methods()
    assert [type(f) for f in frames] == [
        commands.Basic.Ack,
        commands.Basic.Ack,
        commands.Basic.Nack,
    ]
    assert frames[2].delivery_tag == 3
    assert client.conn.vhost.queues["q"].message_count == 2


def test_tx_commit_applies_publishes_atomically_and_rollback_discards() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="q"), commands.Tx.Select())
    client.received()
    queue = broker.vhosts["/"].queues["q"]
    for n in range(10):
        client.publish(1, "q", b"%d" % n)
    assert queue.message_count == 0
    client.send(1, commands.Tx.Rollback())
    assert queue.message_count == 0
    for n in range(10):
        client.publish(1, "q", b"%d" % n)
    client.send(1, commands.Tx.Commit())
    assert isinstance(client.methods()[-1], commands.Tx.CommitOk)
    assert queue.message_count == 10


def test_channel_error_closes_only_that_channel_and_ignores_until_close_ok() -> None:
    client = Client(Broker())
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    client.send(1, commands.Queue.Declare(queue="missing", passive=True))
    close = client.methods()[-1]
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 404
    client.send(1, commands.Queue.Declare(queue="other"))  # ignored while closing
    assert client.methods() == []
    client.send(2, commands.Queue.Declare(queue="other"))
    assert isinstance(client.methods()[-1], commands.Queue.DeclareOk)
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(1)  # the number is free again


def test_heartbeat_timeout_drops_silent_peer() -> None:
    broker = Broker(BrokerConfig(heartbeat=5))
    client = Client(broker)
    client.feed(b"AMQP\x00\x00\x09\x01")
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=5))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    client.received()
    client.conn.tick(1.0)
    client.conn.tick(3.6)
    assert any(v.__class__.__name__ == "Heartbeat" for _c, v in client.received())
    client.conn.tick(11.5)
    assert client.conn.should_close


def test_handshake_timeout() -> None:
    client = Client(Broker(), now=100.0)
    client.feed(b"AMQP\x00\x00\x09\x01")
    client.conn.tick(105.0)
    assert not client.conn.should_close
    client.conn.tick(110.0)
    assert client.conn.should_close


def test_exclusive_queue_deleted_when_owner_goes() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="", exclusive=True))
    name = client.methods()[-1].queue
    assert name.startswith("amq.gen-") and name in broker.vhosts["/"].queues
    client.conn.connection_lost()
    assert name not in broker.vhosts["/"].queues


def test_amqplain_login() -> None:
    from pamqp import encode

    client = Client(Broker())
    client.feed(b"AMQP\x00\x00\x09\x01")
    table = encode.field_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="AMQPLAIN", response=table.decode("latin-1")
        ),
    )
    frames = [v for _c, v in client.received()]
    assert isinstance(frames[-1], commands.Connection.Tune)


def test_unsupported_mechanism_is_refused() -> None:
    client = Client(Broker())
    client.feed(b"AMQP\x00\x00\x09\x01")
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="EXTERNAL",
            response="",
        ),
    )
    close = [v for _c, v in client.received()][-1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 403
    assert "EXTERNAL" in close.reply_text


def test_nowait_methods_send_no_reply() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(
        1,
        commands.Exchange.Declare(exchange="x", exchange_type="fanout", nowait=True),
        commands.Queue.Declare(queue="q", nowait=True),
        commands.Queue.Bind(queue="q", exchange="x", nowait=True),
        commands.Basic.Consume(queue="q", consumer_tag="c", nowait=True),
        commands.Basic.Cancel(consumer_tag="c", nowait=True),
        commands.Queue.Purge(queue="q", nowait=True),
        commands.Confirm.Select(nowait=True),
    )
    assert client.methods() == []
    vhost = broker.vhosts["/"]
    assert "x" in vhost.exchanges and "q" in vhost.queues
    client.publish(1, "", b"m", exchange="x")
    assert [type(m) for m in client.methods()] == [commands.Basic.Ack]
    assert vhost.queues["q"].message_count == 1


def test_multiple_ack_and_nack_settle_ranges() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="q"))
    for n in range(6):
        client.publish(1, "q", b"%d" % n)
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    client.received()
    channel = client.conn.channels[1]
    assert list(channel.unacked) == [1, 2, 3, 4, 5, 6]
    client.send(1, commands.Basic.Ack(delivery_tag=3, multiple=True))
    assert list(channel.unacked) == [4, 5, 6]
    client.send(1, commands.Basic.Nack(delivery_tag=5, multiple=True, requeue=False))
    assert list(channel.unacked) == [6]
    client.send(1, commands.Basic.Ack(delivery_tag=0, multiple=True))
    assert list(channel.unacked) == []
    assert broker.vhosts["/"].queues["q"].message_count == 0
    client.send(1, commands.Basic.Ack(delivery_tag=2))
    close = client.methods()[-1]
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 406
    assert "unknown delivery tag 2" in close.reply_text


def test_recover_async_requeues() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.publish(1, "q", b"m")
    client.send(1, commands.Basic.Get(queue="q"))
    client.received()
    with pytest.warns(DeprecationWarning):
        recover_async = commands.Basic.RecoverAsync(requeue=True)
    client.send(1, recover_async)
    assert client.methods() == []
    assert broker.vhosts["/"].queues["q"].ready[0].redelivered
    client.send(1, commands.Basic.Recover(requeue=False))
    close = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 540


def test_auto_delete_exchange_goes_with_its_last_binding() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    client.send(
        1,
        commands.Exchange.Declare(exchange="ad", exchange_type="direct", auto_delete=True),
        commands.Queue.Declare(queue="q1"),
        commands.Queue.Declare(queue="q2"),
        commands.Queue.Bind(queue="q1", exchange="ad", routing_key="a"),
        commands.Queue.Bind(queue="q2", exchange="ad", routing_key="b"),
        commands.Queue.Unbind(queue="q1", exchange="ad", routing_key="a"),
    )
    vhost = broker.vhosts["/"]
    assert "ad" in vhost.exchanges
    client.send(1, commands.Queue.Delete(queue="q2"))
    assert "ad" not in vhost.exchanges


def test_nothing_is_buffered_after_a_framing_error() -> None:
    client = Client(Broker())
    client.handshake()
    client.feed(b"\x01\x00\x01\x00\x00\x00\x04abcdX")  # bad frame-end octet
    close = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 501
    for _ in range(100):
        client.feed(b"\x00" * 65536)
    assert client.conn.frame_reader.buffered == 0


def test_publisher_flooding_a_consumed_queue_is_flagged_for_flow_control() -> None:
    from amqpd.model.enqueue import FLOW_BACKLOG

    broker = Broker(now=1000.0)
    client = Client(broker, now=1000.0)
    client.handshake()
    client.open_channel()
    client.consume_actively("q")  # the consumer makes progress
    chunk = b"".join(Client.encode_publish(1, "q", b"x") for _ in range(FLOW_BACKLOG + 1))
    client.feed(chunk)
    assert not client.conn.flow_queues  # a backlog of FLOW_BACKLOG: not yet
    client.feed(Client.encode_publish(1, "q", b"x"))
    assert [q.name for q in client.conn.flow_queues] == ["q"]
    # a consumer that settled nothing for a while is stuck: publishers are not paused for it
    client.conn.flow_queues.clear()
    client.advance(1.0)
    client.feed(Client.encode_publish(1, "q", b"x"))
    assert not client.conn.flow_queues
