"""Selective consumers (``x-selector``) in the queue model: sans-IO, no broker process."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.selective import consumer_selector, entry_lookup
from amqpd.model.selector import compile_selector
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header
from amqpd.wire.errors import AMQPError


class Sink:
    """A channel stand-in: per-consumer credit, records deliveries, no acks."""

    def __init__(self) -> None:
        self.credit: dict[str, int] = defaultdict(int)
        self.got: dict[str, list[QueueEntry]] = defaultdict(list)

    def has_credit(self, consumer: Consumer) -> bool:
        return self.credit[consumer.tag] > 0

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        self.credit[consumer.tag] -= 1
        queue.delivered(entry)
        self.got[consumer.tag].append(entry)

    def cancel_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def _message(body: str, **headers: Any) -> Message:
    properties = commands.Basic.Properties(headers=headers or None, message_id=f"id-{body}")
    payload = ContentHeader(0, len(body), properties).marshal()
    peek = peek_header(payload)
    return Message(
        "",
        "q",
        encode_shortstr(""),
        encode_shortstr("q"),
        payload,
        body.encode(),
        persistent=False,
        priority=peek.priority,
        headers_raw=peek.headers_raw,
    )


def _consumer(queue: Queue, sink: Sink, tag: str, selector: str | None = None) -> Consumer:
    arguments = {"x-selector": selector} if selector is not None else {}
    consumer = Consumer(sink, tag, encode_shortstr(tag), queue, False, False, 0, arguments)
    consumer.selector = consumer_selector(arguments, queue)
    return consumer


def _bodies(entries: list[QueueEntry]) -> list[str]:
    return [entry.message.body.decode() for entry in entries if entry.message.body]


def test_selective_consumers_get_only_their_messages_the_rest_stays() -> None:
    queue = Queue("q", "/", False, None, False, {})
    sink = Sink()
    for n in range(10):
        queue.enqueue(_message(f"m{n}", region="eu" if n % 2 else "us", n=n))
    eu = _consumer(queue, sink, "eu", "region = 'eu' AND n > 2")
    sink.credit["eu"] = 100
    queue.add_consumer(eu)
    assert _bodies(sink.got["eu"]) == ["m3", "m5", "m7", "m9"]
    assert [e.message.body for e in queue.ready] == [b"m0", b"m1", b"m2", b"m4", b"m6", b"m8"]
    plain = _consumer(queue, sink, "plain")
    sink.credit["plain"] = 2
    queue.add_consumer(plain)
    assert _bodies(sink.got["plain"]) == ["m0", "m1"]  # the head, in order
    queue.enqueue(_message("late", region="eu", n=50))
    assert _bodies(sink.got["eu"])[-1] == "late"
    assert queue.message_count == 4 and queue.ready_bytes == sum(
        e.message.body_size for e in queue.ready
    )


def test_a_selective_consumer_never_rescans_from_the_head() -> None:
    """100,000 non-matching messages ahead of the matches: taking 100 matches one credit at
    a time evaluates the selector about once per message, not once per message per
    dispatch."""
    queue = Queue("big", "/", False, None, False, {})
    sink = Sink()
    for n in range(100_000):
        queue.enqueue(_message(f"x{n}", kind="other"))
    for n in range(100):
        queue.enqueue(_message(f"w{n}", kind="wanted"))
    consumer = _consumer(queue, sink, "sel", "kind = 'wanted'")
    evaluations = 0
    selector = consumer.selector
    assert selector is not None

    def counting(lookup: Any) -> bool:
        nonlocal evaluations
        evaluations += 1
        return selector(lookup)

    consumer.selector = counting
    queue.add_consumer(consumer)
    for _ in range(100):
        sink.credit["sel"] += 1
        queue.dispatch()
    assert _bodies(sink.got["sel"]) == [f"w{n}" for n in range(100)]
    assert evaluations == 100_100
    assert queue.message_count == 100_000


def test_requeue_lets_selectors_look_again() -> None:
    queue = Queue("q", "/", False, None, False, {})
    sink = Sink()
    queue.enqueue(_message("a"))
    first = _consumer(queue, sink, "first")
    sink.credit["first"] = 1
    queue.add_consumer(first)
    entry = sink.got["first"][0]
    queue.remove_consumer(first)
    retry = _consumer(queue, sink, "retry", "JMSRedelivered = TRUE AND JMSXDeliveryCount = 2")
    sink.credit["retry"] = 1
    queue.add_consumer(retry)
    assert sink.got["retry"] == []  # nothing redelivered yet
    queue.requeue([entry])
    assert sink.got["retry"] == [entry]


def test_jms_headers_seen_by_the_broker() -> None:
    entry = QueueEntry(_message("b", amount=5), 0)
    get = entry_lookup(entry)
    assert get("amount") == 5 and get("JMSMessageID") == "id-b" and get("missing") is None
    assert get("JMSDeliveryMode") == "NON_PERSISTENT" and get("JMSXDeliveryCount") == 1
    assert compile_selector("amount BETWEEN 1 AND 9 AND JMSPriority = 4")(get)


@pytest.mark.parametrize(
    ("arguments", "queue_arguments", "message"),
    [
        ({"x-selector": "a ="}, {}, "invalid arg 'x-selector'"),
        ({"x-selector": 5}, {}, "not a string"),
        ({"x-selector": "a = 1"}, {"x-max-priority": 5}, "priority or quorum"),
    ],
)
def test_bad_selectors_are_refused(
    arguments: dict[str, Any], queue_arguments: dict[str, Any], message: str
) -> None:
    queue = Queue("q", "/", False, None, False, queue_arguments)
    with pytest.raises(AMQPError, match=message) as raised:
        consumer_selector(arguments, queue)
    assert raised.value.reply_code == 406
