"""Message groups (``x-message-groups``) in the queue model: sans-IO, no broker process."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.queue_args import InvalidQueueArgument
from amqpd.model.selective import consumer_selector
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header


class Sink:
    """A channel stand-in: per-consumer credit; deliveries held until `ack` / `requeue`."""

    def __init__(self) -> None:
        self.credit: dict[str, int] = defaultdict(int)
        self.got: dict[str, list[QueueEntry]] = defaultdict(list)
        self.unacked: dict[str, list[QueueEntry]] = defaultdict(list)
        self.order: list[QueueEntry] = []  # every delivery, in delivery order

    def has_credit(self, consumer: Consumer) -> bool:
        return self.credit[consumer.tag] > 0

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        self.credit[consumer.tag] -= 1
        queue.delivered(entry)
        self.got[consumer.tag].append(entry)
        self.unacked[consumer.tag].append(entry)
        self.order.append(entry)

    def cancel_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")

    def ack(self, queue: Queue, tag: str) -> None:
        entries, self.unacked[tag] = self.unacked[tag], []
        for entry in entries:
            queue.settled(entry)

    def close(self, queue: Queue, consumer: Consumer) -> None:
        """What a channel close does: remove the consumer, then requeue its unacked."""
        queue.remove_consumer(consumer)
        entries, self.unacked[consumer.tag] = self.unacked[consumer.tag], []
        queue.requeue(entries)


def _message(
    body: str, group: str | None = None, seq: int | None = None, **headers: Any
) -> Message:
    if group is not None:
        headers["JMSXGroupID"] = group
    if seq is not None:
        headers["JMSXGroupSeq"] = seq
    properties = commands.Basic.Properties(headers=headers or None)
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
        headers_raw=peek.headers_raw,
    )


def _queue() -> Queue:
    return Queue("q", "/", False, None, False, {"x-message-groups": True})


def _consumer(queue: Queue, sink: Sink, tag: str, selector: str | None = None) -> Consumer:
    arguments = {"x-selector": selector} if selector is not None else {}
    consumer = Consumer(sink, tag, encode_shortstr(tag), queue, False, False, 0, arguments)
    consumer.selector = consumer_selector(arguments, queue)
    return consumer


def _bodies(entries: list[QueueEntry]) -> list[str]:
    return [entry.message.body.decode() for entry in entries if entry.message.body]


def test_argument_checks() -> None:
    with pytest.raises(InvalidQueueArgument):
        Queue("q", "/", False, None, False, {"x-message-groups": "yes"})
    with pytest.raises(InvalidQueueArgument):
        Queue("q", "/", False, None, False, {"x-message-groups": True, "x-max-priority": 5})
    assert Queue("q", "/", False, None, False, {"x-message-groups": False}).groups is None


def test_each_group_sticks_to_one_consumer_and_groups_spread() -> None:
    queue, sink = _queue(), Sink()
    consumers = [_consumer(queue, sink, f"c{i}") for i in range(4)]
    for consumer in consumers:
        sink.credit[consumer.tag] = 10_000
        queue.add_consumer(consumer)
    for n in range(400):
        queue.enqueue(_message(f"{n % 20}:{n}", group=f"g{n % 20}"))
    holders: dict[str, set[str]] = defaultdict(set)
    for tag, entries in sink.got.items():
        for body in _bodies(entries):
            holders[body.split(":")[0]].add(tag)
    assert all(len(tags) == 1 for tags in holders.values())
    per_consumer = defaultdict(int)
    for tags in holders.values():
        per_consumer[next(iter(tags))] += 1
    assert sorted(per_consumer.values()) == [5, 5, 5, 5]
    for entries in sink.got.values():  # per-group order
        seen: dict[str, int] = {}
        for body in _bodies(entries):
            group, n = body.split(":")
            assert seen.get(group, -1) < int(n)
            seen[group] = int(n)


def test_a_busy_owner_blocks_only_its_groups() -> None:
    queue, sink = _queue(), Sink()
    a, b = _consumer(queue, sink, "a"), _consumer(queue, sink, "b")
    sink.credit["a"] = 1
    queue.add_consumer(a)
    queue.enqueue(_message("x1", "x"))  # x -> a
    sink.credit["b"] = 100
    queue.add_consumer(b)
    for body, group in (("x2", "x"), ("y1", "y"), ("x3", "x"), ("n1", None), ("y2", "y")):
        queue.enqueue(_message(body, group))
    assert _bodies(sink.got["a"]) == ["x1"]
    assert _bodies(sink.got["b"]) == ["y1", "n1", "y2"]  # x waits for a
    assert _bodies(list(queue.ready)) == ["x2", "x3"]
    sink.credit["a"] = 5
    queue.dispatch()
    assert _bodies(sink.got["a"]) == ["x1", "x2", "x3"]


def test_closed_consumer_groups_move_with_their_unacked_messages_first() -> None:
    queue, sink = _queue(), Sink()
    a, b = _consumer(queue, sink, "a"), _consumer(queue, sink, "b")
    sink.credit["a"] = 2
    queue.add_consumer(a)
    for n in range(5):
        queue.enqueue(_message(f"g{n}", "g"))
    assert _bodies(sink.got["a"]) == ["g0", "g1"]
    sink.credit["b"] = 100
    queue.add_consumer(b)
    assert sink.got["b"] == []  # g belongs to a
    sink.close(queue, a)  # a's unacked g0, g1 come back before b gets g2
    assert _bodies(sink.got["b"]) == ["g0", "g1", "g2", "g3", "g4"]
    assert all(entry.redelivered for entry in sink.got["b"][:2])


def test_cancelled_consumer_group_waits_for_its_unsettled_deliveries() -> None:
    queue, sink = _queue(), Sink()
    a, b = _consumer(queue, sink, "a"), _consumer(queue, sink, "b")
    sink.credit["a"] = 1
    sink.credit["b"] = 100
    queue.add_consumer(a)
    queue.enqueue(_message("g0", "g"))
    queue.add_consumer(b)
    queue.enqueue(_message("g1", "g"))
    assert sink.got["b"] == []
    queue.remove_consumer(a)  # basic.cancel: g0 still unacked on a's channel
    assert sink.got["b"] == []
    sink.ack(queue, "a")  # settled: g moves to b
    assert _bodies(sink.got["b"]) == ["g1"]


def test_group_seq_minus_one_closes_the_group() -> None:
    queue, sink = _queue(), Sink()
    a, b = _consumer(queue, sink, "a"), _consumer(queue, sink, "b")
    sink.credit["a"] = 100
    queue.add_consumer(a)
    queue.enqueue(_message("g0", "g"))
    queue.enqueue(_message("g-end", "g", seq=-1))
    assert queue.groups is not None and "g" not in queue.groups.owner
    sink.credit["b"] = 100
    queue.add_consumer(b)
    sink.credit["a"] = 0
    queue.enqueue(_message("g-new", "g"))  # a new assignment: b has credit
    assert _bodies(sink.got["b"]) == ["g-new"]


def test_selectors_and_groups_together() -> None:
    queue, sink = _queue(), Sink()
    eu = _consumer(queue, sink, "eu", "region = 'eu'")
    sink.credit["eu"] = 100
    queue.add_consumer(eu)
    queue.enqueue(_message("us1", "g", region="us"))
    queue.enqueue(_message("eu1", "h", region="eu"))
    assert _bodies(sink.got["eu"]) == ["eu1"]
    assert _bodies(list(queue.ready)) == ["us1"]


def test_groups_stay_with_their_owner_across_consumer_tags() -> None:
    """A JMS consumer re-subscribes under a new tag (subscribe, then cancel the old one):
    with the same x-message-group-owner its groups stay with it."""
    queue, sink = _queue(), Sink()
    old = Consumer(
        sink, "j.0", encode_shortstr("j.0"), queue, False, False, 0, {"x-message-group-owner": "j"}
    )
    other = _consumer(queue, sink, "other")
    sink.credit["j.0"] = 1
    queue.add_consumer(old)
    queue.enqueue(_message("g0", "g"))
    sink.credit["other"] = 100
    queue.add_consumer(other)
    new = Consumer(
        sink, "j.1", encode_shortstr("j.1"), queue, False, False, 0, {"x-message-group-owner": "j"}
    )
    queue.add_consumer(new)
    queue.remove_consumer(old)  # g0 still unacked: nothing moves
    queue.enqueue(_message("g1", "g"))
    assert sink.got["other"] == []
    sink.credit["j.1"] = 5
    queue.dispatch()
    assert _bodies(sink.got["j.1"]) == ["g1"]
    sink.ack(queue, "j.0")
    queue.enqueue(_message("g2", "g"))
    assert _bodies(sink.got["j.1"]) == ["g1", "g2"] and sink.got["other"] == []


@pytest.mark.parametrize(
    "seq_raw",
    [
        b"I" + (-1).to_bytes(4, "big", signed=True),
        b"l" + (-1).to_bytes(8, "big", signed=True),
        b"b\xff",
    ],
)
def test_group_headers_are_read_without_decoding_the_table(seq_raw: bytes) -> None:
    """pika writes ints as I (or l), pamqp as the smallest type (b): all read the same."""
    from amqpd.model.groups import group_of

    table = b"\x0bJMSXGroupIDS\x00\x00\x00\x02g1" + b"\x0cJMSXGroupSeq" + seq_raw
    message = _message("x")
    message.headers_raw = table
    message.reset_headers()
    assert group_of(QueueEntry(message, 0)) == ("g1", True)
    message.headers_raw = b"\x01aS\x00\x00\x00\x00"
    message.reset_headers()
    assert group_of(QueueEntry(message, 1)) == (None, False)


@pytest.mark.parametrize("seed", range(30))
def test_random_histories_keep_groups_whole(seed: int) -> None:
    """Random publishes, credit, acks, cancels, channel closes and owner re-subscriptions:
    no group ever has unsettled deliveries on two owners, a group's messages are first
    delivered in publish order, and in the end every message is acked exactly once."""
    import random

    rng = random.Random(seed)
    queue, sink = _queue(), Sink()
    live: list[Consumer] = []
    owner_of: dict[str, str] = {}
    counter = 0
    next_n: dict[str, int] = defaultdict(int)
    acked: list[str] = []
    last_seen: dict[str, int] = {}

    def add(owner: str) -> None:
        nonlocal counter
        counter += 1
        tag = f"t{counter}"
        args = {"x-message-group-owner": owner}
        consumer = Consumer(sink, tag, encode_shortstr(tag), queue, False, False, 0, args)
        owner_of[tag] = owner
        sink.credit[tag] = rng.randint(0, 5)
        live.append(consumer)
        queue.add_consumer(consumer)

    def ack(tag: str) -> None:
        acked.extend(_bodies(sink.unacked[tag]))
        sink.ack(queue, tag)

    for _ in range(300):
        step = rng.random()
        if step < 0.35:
            group = f"g{rng.randint(0, 5)}"
            n = next_n[group]
            next_n[group] += 1
            queue.enqueue(_message(f"{group}:{n}", group, seq=n + 1))  # closes: tested above
        elif step < 0.5 and len(live) < 4:
            add(f"o{rng.randint(0, 3)}")
        elif step < 0.65 and live:
            consumer = rng.choice(live)
            sink.credit[consumer.tag] += rng.randint(1, 4)
            queue.dispatch()
        elif step < 0.8:
            tags = [tag for tag, entries in sink.unacked.items() if entries]
            if tags:
                ack(rng.choice(tags))
        elif step < 0.9 and live:
            consumer = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.5:
                sink.close(queue, consumer)  # channel closed: unacked requeued
            else:
                queue.remove_consumer(consumer)  # basic.cancel: unacked stay until acked
        for entries in sink.unacked.values():  # one owner per group in flight
            for entry in entries:
                group = _bodies([entry])[0].split(":")[0]
                holders = {
                    owner_of[t]
                    for t, es in sink.unacked.items()
                    for e in es
                    if _bodies([e])[0].split(":")[0] == group
                }
                assert len(holders) == 1, (group, holders)
        for entry in sink.order:  # first deliveries of a group in publish order
            if entry.redelivered:
                continue
            group, n = _bodies([entry])[0].split(":")
            assert last_seen.get(group, -1) < int(n), (group, n)
            last_seen[group] = int(n)
        sink.order.clear()
    for tag in list(sink.unacked):
        ack(tag)
    for consumer in list(live):
        sink.close(queue, consumer)
    live.clear()
    add("final")
    sink.credit[f"t{counter}"] = 10_000
    queue.dispatch()
    ack(f"t{counter}")
    published = {f"{g}:{n}" for g, count in next_n.items() for n in range(count)}
    assert sorted(acked) == sorted(published)
