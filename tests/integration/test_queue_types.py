"""Queue arguments and queue types: RabbitMQ 3.x's validation texts (406 naming the argument
and the queue), redeclare equivalence, x-queue-type classic/quorum/stream, and quorum queues'
redelivery behaviour. Texts and orders were checked against RabbitMQ 3.10."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pika
import pytest

from tests.conftest import node_under_test
from tests.integration.ext_support import closed_by_broker, connect, next_message


@pytest.fixture
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pika.BlockingConnection]:
    with node_under_test(tmp_path_factory, tick_interval=0.1) as server:
        connection = connect(server.port)
        yield connection
        if connection.is_open:
            connection.close()


def _declare_fails(
    conn: pika.BlockingConnection, name: str, arguments: dict[str, Any], **flags: bool
) -> str:
    ch = conn.channel()
    code, text = closed_by_broker(lambda: ch.queue_declare(name, arguments=arguments, **flags))
    assert code == 406, text
    prefix = "PRECONDITION_FAILED - "
    assert text.startswith(prefix)
    return text[len(prefix) :]


INVALID_ARGUMENTS: list[tuple[dict[str, Any], str, str]] = [
    ({"x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
    ({"x-message-ttl": "1000"}, "x-message-ttl", '"expected integer, got longstr"'),
    ({"x-message-ttl": 315360000001}, "x-message-ttl", "{value_too_large,315360000001}"),
    ({"x-expires": 0}, "x-expires", "{value_zero,0}"),
    ({"x-expires": -5}, "x-expires", "{value_negative,-5}"),
    ({"x-max-length": -1}, "x-max-length", "{value_negative,-1}"),
    ({"x-max-length-bytes": True}, "x-max-length-bytes", '"expected integer, got bool"'),
    ({"x-max-priority": 256}, "x-max-priority", "{max_value_exceeded,256}"),
    ({"x-max-priority": "high"}, "x-max-priority", '"expected integer, got longstr"'),
    ({"x-overflow": "bogus"}, "x-overflow", "invalid_overflow"),
    ({"x-overflow": 5}, "x-overflow", "{unacceptable_type,signedint}"),
    ({"x-queue-mode": "weird"}, "x-queue-mode", "\"unsupported queue mode 'weird'\""),
    (
        {"x-single-active-consumer": "yes"},
        "x-single-active-consumer",
        "{unacceptable_type,longstr}",
    ),
    ({"x-queue-type": "bogus"}, "x-queue-type", "\"unsupported queue type 'bogus'\""),
    ({"x-queue-type": 5}, "x-queue-type", "{unacceptable_type,signedint}"),
    (
        {"x-dead-letter-routing-key": "k"},
        "x-dead-letter-routing-key",
        "routing_key_but_no_dlx_defined",
    ),
    (
        {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": 5},
        "x-dead-letter-routing-key",
        "{unacceptable_type,signedint}",
    ),
    # several bad arguments: RabbitMQ reports the first in its own checking order
    ({"x-overflow": "bogus", "x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
    ({"x-max-priority": 256, "x-expires": 0}, "x-expires", "{value_zero,0}"),
]


def test_invalid_queue_arguments_are_406_naming_argument_and_queue(
    conn: pika.BlockingConnection,
) -> None:
    for number, (arguments, name, problem) in enumerate(INVALID_ARGUMENTS):
        queue = f"bad-{number}"
        text = _declare_fails(conn, queue, arguments)
        assert text == f"invalid arg '{name}' for queue '{queue}' in vhost '/': {problem}"
    for name in ("bad-0", "bad-9"):  # nothing was created
        ch = conn.channel()
        code, _text = closed_by_broker(partial(ch.queue_declare, name, passive=True))
        assert code == 404


def test_redeclare_compares_arguments_like_rabbitmq(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("plain")
    ch.queue_declare("plain", arguments={"x-queue-type": "classic"})  # the default type
    ch.queue_declare("typed", arguments={"x-queue-type": "classic"})
    ch.queue_declare("typed")
    ch.queue_declare("ttl", arguments={"x-message-ttl": 100, "x-single-active-consumer": True})
    ch.queue_declare("q", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 5})
    cases: list[tuple[str, dict[str, Any], bool, str, str]] = [
        ("ttl", {"x-message-ttl": 200, "x-single-active-consumer": True}, False, "x-message-ttl",
         "received '200' but current is '100'"),
        ("ttl", {"x-single-active-consumer": True}, False, "x-message-ttl",
         "received none but current is the value '100' of type 'signedint'"),
        ("ttl", {"x-message-ttl": 100}, False, "x-single-active-consumer",
         "received none but current is the value 'true' of type 'bool'"),
        ("plain", {"x-max-priority": 5}, False, "x-max-priority",
         "received the value '5' of type 'signedint' but current is none"),
        ("q", {"x-delivery-limit": 5}, True, "x-queue-type",
         "received none but current is the value 'quorum' of type 'longstr'"),
        ("q", {"x-queue-type": "classic", "x-delivery-limit": 5}, True, "x-queue-type",
         "received 'classic' but current is 'quorum'"),
        ("q", {"x-queue-type": "quorum", "x-delivery-limit": 6}, True, "x-delivery-limit",
         "received '6' but current is '5'"),
    ]  # fmt: skip
    for queue, arguments, durable, name, detail in cases:
        text = _declare_fails(conn, queue, arguments, durable=durable)
        assert text == f"inequivalent arg '{name}' for queue '{queue}' in vhost '/': {detail}"


def test_quorum_queues_must_be_durable_and_refuse_classic_only_arguments(
    conn: pika.BlockingConnection,
) -> None:
    quorum = {"x-queue-type": "quorum"}
    cases: list[tuple[dict[str, Any], dict[str, bool], str]] = [
        (quorum, {}, "invalid property 'non-durable' for queue 'qq' in vhost '/'"),
        (quorum, {"durable": True, "exclusive": True}, "invalid property 'exclusive-owner' "
         "for queue 'qq' in vhost '/'"),
        (quorum, {"exclusive": True, "auto_delete": True}, "invalid property 'auto-delete' "
         "for queue 'qq' in vhost '/'"),
        ({**quorum, "x-max-priority": 5}, {"durable": True, "auto_delete": True},
         "invalid arg 'x-max-priority' for queue 'qq' in vhost '/' of queue type "
         "rabbit_quorum_queue"),
        ({**quorum, "x-queue-mode": "lazy"}, {"durable": True},
         "invalid arg 'x-queue-mode' for queue 'qq' in vhost '/' of queue type "
         "rabbit_quorum_queue"),
        ({"x-queue-type": "stream", "x-max-length": 5}, {"durable": True},
         "invalid arg 'x-max-length' for queue 'qq' in vhost '/' of queue type "
         "rabbit_stream_queue"),
    ]  # fmt: skip
    for arguments, flags, expected in cases:
        assert _declare_fails(conn, "qq", arguments, **flags) == expected
    ch = conn.channel()
    ok = ch.queue_declare("qq", durable=True, arguments={**quorum, "x-message-ttl": 1000})
    assert (ok.method.queue, ok.method.message_count, ok.method.consumer_count) == ("qq", 0, 0)
    ch.queue_declare("cq", arguments={"x-queue-type": "classic", "x-max-priority": 3})


def test_quorum_queue_requeues_to_the_back_with_delivery_counts(
    conn: pika.BlockingConnection,
) -> None:
    """Consumer with prefetch 2 nacks (requeue) its first two deliveries. RabbitMQ 3.10 (as
    observed with this exact scenario) redelivers them after the rest for a quorum queue; a
    classic queue puts them back at their original place."""
    ch = conn.channel()
    ch.queue_declare("quorum-q", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare("classic-q")
    seen: dict[str, list[tuple[bytes, bool, Any]]] = {}
    for queue in ("quorum-q", "classic-q"):
        for body in (b"a", b"b", b"c", b"d"):
            ch.basic_publish("", queue, body)
        consumer = conn.channel()
        consumer.basic_qos(prefetch_count=2)
        got = seen[queue] = []
        for method, props, body in consumer.consume(queue, inactivity_timeout=5):
            assert method is not None, got
            got.append((body, method.redelivered, (props.headers or {}).get("x-delivery-count")))
            if len(got) <= 2:
                consumer.basic_nack(method.delivery_tag, requeue=True)
            else:
                consumer.basic_ack(method.delivery_tag)
            if len(got) == 6:
                break
        consumer.cancel()
        consumer.close()
    assert seen["quorum-q"] == [
        (b"a", False, None),
        (b"b", False, None),
        (b"c", False, None),
        (b"d", False, None),
        (b"a", True, 1),
        (b"b", True, 1),
    ]
    assert seen["classic-q"] == [
        (b"a", False, None),
        (b"b", False, None),
        (b"a", True, 1),
        (b"b", True, 1),
        (b"c", False, None),
        (b"d", False, None),
    ]


def test_quorum_delivery_limit_dead_letters_poison_messages(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.queue_declare("poison-dlq")
    ch.queue_declare(
        "jobs",
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "poison-dlq",
        },
    )
    ch.basic_publish("", "jobs", b"poison", pika.BasicProperties(delivery_mode=2))
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=1)
    counts = []
    for method, props, _body in consumer.consume("jobs", inactivity_timeout=5):
        assert method is not None
        counts.append((props.headers or {}).get("x-delivery-count"))
        consumer.basic_reject(method.delivery_tag, requeue=True)
        if len(counts) == 3:
            break
    consumer.cancel()
    assert counts == [None, 1, 2]  # delivered limit+1 times, then dead-lettered
    _method, props, body = next_message(conn, "poison-dlq")
    assert body == b"poison"
    assert props.delivery_mode == 2
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", "jobs", 1)
    assert ch.queue_declare("jobs", durable=True, passive=True).method.message_count == 0
