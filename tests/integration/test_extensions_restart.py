"""What the extensions keep across a restart, as RabbitMQ does: TTL deadlines (absolute, so a
message still expires on time), delivery counts, and dead-lettered messages in durable
dead-letter queues."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pika
import pytest

from tests.conftest import node_under_test
from tests.integration.ext_support import connect, next_message

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TICK = 0.1


def test_ttl_deadline_survives_a_restart(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the deadline must lie beyond the restart: a --workers node (AMQPD_TEST_WORKERS) takes
    # over a second to start its supervisor and workers
    ttl = 5.0 if os.environ.get("AMQPD_TEST_WORKERS") else 1.0
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "expired"}
    with (
        node_under_test(tmp_path_factory, TICK, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        ch = conn.channel()
        ch.queue_declare("expired", durable=True)
        ch.queue_declare("timed", durable=True, arguments=arguments)
        ch.confirm_delivery()
        published = time.monotonic()
        props = pika.BasicProperties(delivery_mode=2, expiration=str(int(ttl * 1000)))
        ch.basic_publish("", "timed", b"deadline", props)
    # Down for a while (the client left first, so the stop is quick): a deadline counted
    # again from the restart would come 0.6 s late.
    time.sleep(max(0.0, published + 0.6 - time.monotonic()))
    with (
        node_under_test(tmp_path_factory, TICK, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        _method, props, body = next_message(conn, "expired")
        arrived = time.monotonic() - published
        assert body == b"deadline"
        assert ttl <= arrived < ttl + 0.45, arrived
        assert (props.delivery_mode, props.expiration) == (2, None)
        death = props.headers["x-death"][0]
        assert (death["reason"], death["queue"], death["original-expiration"]) == (
            "expired",
            "timed",
            str(int(ttl * 1000)),
        )
        ch = conn.channel()
        assert ch.queue_declare("timed", durable=True, passive=True).method.message_count == 0


def test_delivery_counts_survive_a_restart(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    limited = {"x-queue-type": "quorum", "x-delivery-limit": 1}
    with (
        node_under_test(tmp_path_factory, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        ch = conn.channel()
        ch.queue_declare("work", durable=True)
        ch.queue_declare("dead", durable=True)
        ch.queue_declare(
            "limited",
            durable=True,
            arguments={
                **limited,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dead",
            },
        )
        ch.confirm_delivery()
        ch.basic_publish("", "work", b"nacked-once", PERSISTENT)
        ch.basic_publish("", "limited", b"poison", PERSISTENT)
        for queue in ("work", "limited"):
            method, props, _body = ch.basic_get(queue)
            assert props.headers is None
            ch.basic_nack(method.delivery_tag, requeue=True)
        ch.queue_declare("work", durable=True, passive=True)  # fence: the nacks are processed
    with (
        node_under_test(tmp_path_factory, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        ch = conn.channel()
        method, props, body = ch.basic_get("work")
        assert (body, method.redelivered, props.headers) == (
            b"nacked-once",
            True,
            {"x-delivery-count": 1},
        )
        ch.basic_ack(method.delivery_tag)

        # x-delivery-limit=1 counts the delivery before the restart: this is the last one
        method, props, body = ch.basic_get("limited")
        assert (body, props.headers) == (b"poison", {"x-delivery-count": 1})
        ch.basic_nack(method.delivery_tag, requeue=True)
        _method, props, body = next_message(conn, "dead")
        assert body == b"poison"
        assert props.headers["x-death"][0]["reason"] == "delivery_limit"


def test_dead_lettered_messages_are_stored_in_durable_dead_letter_queues(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with (
        node_under_test(tmp_path_factory, TICK, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        ch = conn.channel()
        ch.exchange_declare("dlx", "fanout", durable=True)
        ch.queue_declare("dlq", durable=True)
        ch.queue_bind("dlq", "dlx")
        ch.queue_declare("observer")  # not durable: sees each dead-lettering as it happens
        ch.queue_bind("observer", "dlx")
        ch.queue_declare(
            "src", durable=True, arguments={"x-dead-letter-exchange": "dlx", "x-message-ttl": 100}
        )
        ch.confirm_delivery()
        ch.basic_publish("", "src", b"rejected", PERSISTENT)
        ch.basic_publish("", "src", b"transient", pika.BasicProperties(delivery_mode=1))
        method, _props, _body = ch.basic_get("src")
        ch.basic_reject(method.delivery_tag, requeue=False)
        ch.basic_publish("", "src", b"expired", PERSISTENT)
        seen = [next_message(conn, "observer")[2] for _ in range(3)]
        assert seen == [b"rejected", b"transient", b"expired"]
        assert ch.queue_declare("dlq", durable=True, passive=True).method.message_count == 3
        assert ch.queue_declare("src", durable=True, passive=True).method.message_count == 0
    with (
        node_under_test(tmp_path_factory, data_dir=tmp_path) as server,
        connect(server.port) as conn,
    ):
        ch = conn.channel()
        declared = ch.queue_declare("dlq", durable=True, passive=True).method
        assert declared.message_count == 2  # the transient one is gone, as in RabbitMQ
        got = [ch.basic_get("dlq", auto_ack=True) for _ in range(2)]
        assert [(g[2], g[1].headers["x-death"][0]["reason"]) for g in got] == [
            (b"rejected", "rejected"),
            (b"expired", "expired"),
        ]
        assert got[0][1].headers["x-first-death-queue"] == "src"
        assert ch.queue_declare("src", durable=True, passive=True).method.message_count == 0
