"""What survives a restart: durable definitions and persistent messages, as in RabbitMQ."""

from __future__ import annotations

from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.conftest import node_under_test

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


def _connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def test_durable_definitions_and_persistent_messages_survive(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.exchange_declare("dx", "direct", durable=True)
        ch.exchange_declare("transient-x", "fanout", durable=False)
        ch.queue_declare("dq", durable=True, arguments={"x-max-length": 100})
        ch.queue_declare("tq", durable=False)
        ch.queue_bind("dq", "dx", "k")
        ch.queue_bind("dq", "amq.topic", "a.#")
        ch.queue_bind("tq", "dx", "k")
        ch.confirm_delivery()
        for n in range(5):
            ch.basic_publish("", "dq", b"persistent-%d" % n, PERSISTENT)
        ch.basic_publish("", "dq", b"transient", TRANSIENT)
        ch.basic_publish("", "tq", b"in-transient-queue", PERSISTENT)
        conn.close()
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.exchange_declare("dx", "direct", durable=True, passive=True)
        declare = ch.queue_declare("dq", durable=True, arguments={"x-max-length": 100})
        assert declare.method.message_count == 5
        bodies = [ch.basic_get("dq", auto_ack=True)[2] for _ in range(5)]
        assert bodies == [b"persistent-%d" % n for n in range(5)]
        ch.basic_publish("dx", "k", b"via-binding", PERSISTENT)
        ch.basic_publish("amq.topic", "a.b", b"via-amq-topic", PERSISTENT)
        assert ch.basic_get("dq", auto_ack=True)[2] == b"via-binding"
        assert ch.basic_get("dq", auto_ack=True)[2] == b"via-amq-topic"
        for kind, name in (("queue", "tq"), ("exchange", "transient-x")):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                if kind == "queue":
                    ch.queue_declare(name, passive=True)
                else:
                    ch.exchange_declare(name, passive=True)
            assert info.value.reply_code == 404
            ch = conn.channel()
        conn.close()


def test_unacked_messages_come_back_redelivered(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.queue_declare("work", durable=True)
        ch.confirm_delivery()
        for n in range(4):
            ch.basic_publish("", "work", b"%d" % n, PERSISTENT)
        first = ch.basic_get("work")
        second = ch.basic_get("work")
        assert first[2] == b"0" and second[2] == b"1"
        ch.basic_ack(first[0].delivery_tag)
        ch.queue_declare("work", passive=True)  # fence: the ack has been processed
        # the broker stops with message 1 delivered but unacked
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
    assert info.value.reply_code == 320
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        got = [ch.basic_get("work", auto_ack=True) for _ in range(3)]
        assert [(m[2], m[0].redelivered) for m in got] == [
            (b"1", True),
            (b"2", False),
            (b"3", False),
        ]
        assert ch.basic_get("work")[0] is None
        conn.close()


def test_deleted_durable_queue_stays_deleted(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.queue_declare("gone", durable=True)
        ch.basic_publish("", "gone", b"x", PERSISTENT)
        ch.queue_delete("gone")
        ch.exchange_declare("gone-x", "topic", durable=True)
        ch.exchange_delete("gone-x")
        ch.queue_declare("unbound", durable=True)
        ch.queue_bind("unbound", "amq.direct", "r")
        ch.queue_unbind("unbound", "amq.direct", "r")
        conn.close()
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.queue_declare("gone", passive=True)
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.exchange_declare("gone-x", passive=True)
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("amq.direct", "r", b"x", mandatory=True)
        conn.close()


def test_tx_committed_persistent_messages_survive(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.queue_declare("txq", durable=True)
        ch.tx_select()
        for n in range(3):
            ch.basic_publish("", "txq", b"%d" % n, PERSISTENT)
        ch.tx_commit()
        ch.basic_publish("", "txq", b"rolled-back", PERSISTENT)
        ch.tx_rollback()
        conn.close()
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        assert ch.queue_declare("txq", passive=True).method.message_count == 3
        conn.close()


def test_acked_messages_do_not_come_back(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        ch.queue_declare("acked", durable=True)
        ch.confirm_delivery()
        for n in range(50):
            ch.basic_publish("", "acked", b"%d" % n, PERSISTENT)
        received = []

        def on_message(channel, method, _props, body):  # type: ignore[no-untyped-def]
            received.append(body)
            channel.basic_ack(method.delivery_tag)
            if len(received) == 30:
                channel.stop_consuming()

        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("acked", on_message)
        ch.start_consuming()
        conn.close()
    with node_under_test(tmp_path_factory, data_dir=tmp_path) as server:
        conn = _connect(server.port)
        ch = conn.channel()
        assert ch.queue_declare("acked", passive=True).method.message_count == 20
        assert ch.basic_get("acked", auto_ack=True)[2] == b"30"
        conn.close()
