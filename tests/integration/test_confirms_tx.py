"""Publisher confirms and transactions with pika over a real socket."""

from __future__ import annotations

import threading

import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server


def _connect(server: Server) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))


def test_confirm_delivery_each_publish_waits_for_its_ack(channel: object) -> None:
    ch = channel
    ch.queue_declare("confirmed", durable=True)
    ch.confirm_delivery()
    for n in range(50):
        ch.basic_publish("", "confirmed", b"%d" % n, pika.BasicProperties(delivery_mode=2))
    assert ch.queue_declare("confirmed", passive=True).method.message_count == 50


def test_reject_publish_overflow_is_nacked_and_not_enqueued(channel: object) -> None:
    ch = channel
    ch.queue_declare("limited", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", "limited", b"1")
    ch.basic_publish("", "limited", b"2")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "limited", b"3")
    assert ch.queue_declare("limited", passive=True).method.message_count == 2
    assert [ch.basic_get("limited", auto_ack=True)[2] for _ in range(2)] == [b"1", b"2"]


def test_drop_head_overflow_keeps_the_newest(channel: object) -> None:
    ch = channel
    ch.queue_declare("dropping", arguments={"x-max-length": 3})
    ch.confirm_delivery()
    for n in range(10):
        ch.basic_publish("", "dropping", b"%d" % n)
    bodies = [ch.basic_get("dropping", auto_ack=True)[2] for _ in range(3)]
    assert bodies == [b"7", b"8", b"9"]


def test_max_length_bytes(channel: object) -> None:
    ch = channel
    ch.queue_declare(
        "bytes-limited", arguments={"x-max-length-bytes": 10, "x-overflow": "reject-publish"}
    )
    ch.confirm_delivery()
    ch.basic_publish("", "bytes-limited", b"12345")
    ch.basic_publish("", "bytes-limited", b"67890")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "bytes-limited", b"x")


def test_invalid_length_argument_is_406(channel: object) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("bad-args", arguments={"x-max-length": -1})
    assert info.value.reply_code == 406
    assert "x-max-length" in info.value.reply_text and "bad-args" in info.value.reply_text


def test_mandatory_unroutable_is_returned_before_its_ack(channel: object) -> None:
    ch = channel
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        ch.basic_publish("amq.direct", "nowhere", b"lost", mandatory=True)
    returned = info.value.messages[0]
    assert returned.method.reply_code == 312 and returned.body == b"lost"
    # non-mandatory unroutable: silently confirmed
    ch.basic_publish("amq.direct", "nowhere", b"dropped")


def test_confirms_stay_per_channel(connection: pika.BlockingConnection) -> None:
    channels = [connection.channel() for _ in range(5)]
    channels[0].queue_declare("multi")
    for ch in channels:
        ch.confirm_delivery()
    for round_ in range(10):
        for ch in channels:
            ch.basic_publish("", "multi", b"%d" % round_)
    assert channels[0].queue_declare("multi", passive=True).method.message_count == 50


def test_tx_rollback_discards_and_commit_delivers(channel: object) -> None:
    ch = channel
    ch.queue_declare("txq")
    ch.tx_select()
    for n in range(10):
        ch.basic_publish("", "txq", b"%d" % n)
    assert ch.queue_declare("txq", passive=True).method.message_count == 0
    ch.tx_rollback()
    assert ch.queue_declare("txq", passive=True).method.message_count == 0
    for n in range(10):
        ch.basic_publish("", "txq", b"%d" % n)
    assert ch.queue_declare("txq", passive=True).method.message_count == 0
    ch.tx_commit()
    assert ch.queue_declare("txq", passive=True).method.message_count == 10


def test_ack_inside_rolled_back_tx_stays_unacked(channel: object) -> None:
    ch = channel
    ch.queue_declare("txack")
    ch.basic_publish("", "txack", b"m")
    method, _props, body = ch.basic_get("txack")
    assert body == b"m"
    ch.tx_select()
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()
    assert ch.queue_declare("txack", passive=True).method.message_count == 0  # still unacked
    ch.basic_recover(requeue=True)
    again = ch.basic_get("txack", auto_ack=True)
    assert again[2] == b"m" and again[0].redelivered


def test_ack_inside_committed_tx_removes_the_message(channel: object) -> None:
    ch = channel
    ch.queue_declare("txack2")
    ch.basic_publish("", "txack2", b"m")
    method, _props, _body = ch.basic_get("txack2")
    ch.tx_select()
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()
    ch.basic_recover(requeue=True)
    assert ch.basic_get("txack2")[0] is None


def test_mode_conflicts_are_406(connection: pika.BlockingConnection) -> None:
    ch = connection.channel()
    ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406
    ch = connection.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_select()
    assert info.value.reply_code == 406
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_commit()
    assert info.value.reply_code == 406
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_rollback()
    assert info.value.reply_code == 406


def test_no_consumer_observes_half_a_commit(server: Server) -> None:
    """While a producer commits batches of 10, another connection only ever sees counts
    that are whole batches."""
    batches = 40
    producer = _connect(server)
    observer = _connect(server)
    try:
        pch = producer.channel()
        pch.queue_declare("atomic")
        ob = observer.channel()
        seen: list[int] = []
        done = threading.Event()
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                pch.tx_select()
                for _ in range(batches):
                    for n in range(10):
                        pch.basic_publish("", "atomic", b"%d" % n)
                    pch.tx_commit()
            except BaseException as exc:  # surfaced below
                errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        while not done.is_set():
            seen.append(ob.queue_declare("atomic", passive=True).method.message_count)
        thread.join()
        assert not errors
        seen.append(ob.queue_declare("atomic", passive=True).method.message_count)
        assert seen[-1] == batches * 10
        assert all(count % 10 == 0 for count in seen), seen
    finally:
        producer.close()
        observer.close()
