"""Queue.dispatch's consumer choice as consumers come and go (sans-IO, no broker process).

A queue with exactly one consumer asks only that one for credit (``Queue._sole``); these
tests pin down that the choice stays right when consumers join, leave and change levels.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pamqp import commands
from pamqp.header import ContentHeader

from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header


class Sink:
    """A channel stand-in: per-consumer credit, records deliveries."""

    def __init__(self) -> None:
        self.credit: dict[str, int] = defaultdict(int)
        self.got: dict[str, list[str]] = defaultdict(list)

    def has_credit(self, consumer: Consumer) -> bool:
        return self.credit[consumer.tag] > 0

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        self.credit[consumer.tag] -= 1
        queue.delivered(entry)
        assert entry.message.body is not None
        self.got[consumer.tag].append(entry.message.body.decode())

    def cancel_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


def _message(body: str) -> Message:
    payload = ContentHeader(0, len(body), commands.Basic.Properties()).marshal()
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


def _consumer(queue: Queue, sink: Sink, tag: str, **arguments: Any) -> Consumer:
    return Consumer(sink, tag, encode_shortstr(tag), queue, False, False, 0, arguments)


def _publish(queue: Queue, *bodies: str) -> None:
    for body in bodies:
        queue.enqueue(_message(body))


def test_a_sole_consumer_takes_messages_while_it_has_credit() -> None:
    queue, sink = Queue("q", "/", False, None, False, {}), Sink()
    only = _consumer(queue, sink, "only")
    sink.credit["only"] = 2
    queue.add_consumer(only)
    _publish(queue, "m0", "m1", "m2")
    assert sink.got["only"] == ["m0", "m1"]
    assert [e.message.body for e in queue.ready] == [b"m2"]
    sink.credit["only"] = 5
    queue.dispatch()
    assert sink.got["only"] == ["m0", "m1", "m2"]


def test_joining_and_leaving_switches_between_round_robin_and_the_sole_consumer() -> None:
    queue, sink = Queue("q", "/", False, None, False, {}), Sink()
    a, b = _consumer(queue, sink, "a"), _consumer(queue, sink, "b")
    sink.credit.update(a=100, b=100)
    queue.add_consumer(a)
    _publish(queue, "m0")
    queue.add_consumer(b)
    _publish(queue, "m1", "m2", "m3", "m4")
    assert (sink.got["a"], sink.got["b"]) == (["m0", "m1", "m3"], ["m2", "m4"])
    queue.remove_consumer(a)
    _publish(queue, "m5", "m6")
    assert sink.got["b"] == ["m2", "m4", "m5", "m6"]
    queue.remove_consumer(b)
    _publish(queue, "m7")
    assert sink.got["a"] == ["m0", "m1", "m3"] and sink.got["b"][-1] == "m6"
    assert [e.message.body for e in queue.ready] == [b"m7"]


def test_a_sole_consumer_without_credit_does_not_block_a_higher_priority_newcomer() -> None:
    queue, sink = Queue("q", "/", False, None, False, {}), Sink()
    low = _consumer(queue, sink, "low")
    queue.add_consumer(low)  # no credit
    _publish(queue, "m0")
    high = _consumer(queue, sink, "high", **{"x-priority": 5})
    sink.credit.update(low=100, high=1)
    queue.add_consumer(high)
    _publish(queue, "m1")
    assert (sink.got["high"], sink.got["low"]) == (["m0"], ["m1"])


def test_single_active_consumer_delivers_to_the_first_then_fails_over() -> None:
    queue = Queue("q", "/", False, None, False, {"x-single-active-consumer": True})
    sink = Sink()
    first, second = _consumer(queue, sink, "first"), _consumer(queue, sink, "second")
    sink.credit.update(first=100, second=100)
    queue.add_consumer(first)
    queue.add_consumer(second)
    _publish(queue, "m0", "m1")
    assert (sink.got["first"], sink.got["second"]) == (["m0", "m1"], [])
    queue.remove_consumer(first)
    _publish(queue, "m2")
    assert sink.got["second"] == ["m2"]
