"""amqpd.engine.unacked: delivery tags, tag order and qos credit, without sockets or a
connection (real queues and entries, consumers that are never attached to a channel)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from amqpd.engine.unacked import Settlement, Unacked, UnackedStore
from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.vhost import VirtualHost
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.errors import AMQPError


def make_queue(vhost: VirtualHost, name: str = "q") -> Queue:
    queue = vhost.new_queue(name, False, None, False, {})
    vhost.queues[name] = queue
    return queue


def fill(queue: Queue, count: int) -> list[QueueEntry]:
    """``count`` messages enqueued and taken out again, as a delivery would."""
    header = ContentHeader(0, 1, commands.Basic.Properties()).marshal()
    entries = []
    for n in range(count):
        key = f"k{n}"
        raw_key = encode_shortstr(key)
        message = Message("", key, b"\x00", raw_key, header, b"x", False, 0, None, None)
        queue.enqueue(message)
        entry = queue.take()
        assert entry is not None
        queue.delivered(entry)
        entries.append(entry)
    return entries


def consumer(queue: Queue, prefetch: int = 0, tag: str = "c") -> Consumer:
    sink = cast(Any, None)  # the store never calls the consumer's channel
    return Consumer(sink, tag, encode_shortstr(tag), queue, False, False, prefetch, {})


@pytest.fixture
def vhost() -> VirtualHost:
    return VirtualHost("/")


def test_tags_count_up_and_only_acked_deliveries_are_kept(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    a, b, c = fill(queue, 3)
    store = UnackedStore()
    assert store.issue(queue, a, None, ack_required=True) == 1
    assert store.issue(queue, b, None, ack_required=False) == 2  # no-ack: a tag, no record
    assert store.issue(queue, c, None, ack_required=True) == 3
    assert list(store) == [1, 3]
    assert len(store) == 2


def test_consumer_prefetch_and_channel_prefetch_both_limit(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    entries = fill(queue, 5)
    store = UnackedStore()
    store.channel_prefetch = 3
    first, second = consumer(queue, prefetch=2, tag="a"), consumer(queue, prefetch=0, tag="b")
    store.issue(queue, entries[0], first, True)
    assert store.has_credit(first)
    store.issue(queue, entries[1], first, True)
    assert not store.has_credit(first)  # its own prefetch of 2 is used up
    assert store.has_credit(second)
    store.issue(queue, entries[2], second, True)
    assert not store.has_credit(second)  # the channel's 3 is used up
    store.issue(queue, entries[3], None, True)  # basic.get counts against neither
    store.channel_prefetch = 0
    assert store.has_credit(second) and not store.has_credit(first)


def test_take_single_multiple_and_all(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    entries = fill(queue, 6)
    store = UnackedStore()
    for entry in entries:
        store.issue(queue, entry, None, True)
    assert [r.tag for r in store.take(2, multiple=False)] == [2]
    assert [r.tag for r in store.take(4, multiple=True)] == [1, 3, 4]
    assert [r.tag for r in store.take(0, multiple=True)] == [5, 6]
    assert list(store) == []


def test_unknown_tag_is_406(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    store = UnackedStore()
    store.issue(queue, fill(queue, 1)[0], None, True)
    store.take(1, False)
    for multiple in (False, True):
        with pytest.raises(AMQPError) as caught:
            store.take(1, multiple)
        assert caught.value.reply_code == 406
        assert "unknown delivery tag 1" in caught.value.reply_text


def test_credit_stays_in_use_until_settled(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    entries = fill(queue, 2)
    store = UnackedStore()
    sub = consumer(queue, prefetch=1)
    store.issue(queue, entries[0], sub, True)
    records = store.take(1, False)
    assert not store.has_credit(sub)  # taken (e.g. acked inside a tx), not yet applied
    store.settle(records, Settlement.ACK, now=5.0)
    assert store.has_credit(sub)
    assert queue.consumer_progress_at == 5.0


def test_restore_puts_records_back_in_tag_order(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    store = UnackedStore()
    for entry in fill(queue, 5):
        store.issue(queue, entry, None, True)
    taken = store.take(2, False) + store.take(4, False)
    assert list(store) == [1, 3, 5]
    store.restore(taken)
    assert list(store) == [1, 2, 3, 4, 5]
    store.restore([])
    assert list(store) == [1, 2, 3, 4, 5]


def test_settlement_kinds_reach_the_queue(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    store = UnackedStore()
    for entry in fill(queue, 3):
        store.issue(queue, entry, None, True)
    assert queue.message_count == 0
    store.settle(store.take(1, False), Settlement.REQUEUE, now=1.0)
    assert queue.message_count == 1  # back, ready again
    redelivered = queue.take()
    assert redelivered is not None and redelivered.redelivered
    store.settle(store.take(2, False), Settlement.DISCARD, now=1.0)  # no DLX: dropped
    store.settle(store.take(3, False), Settlement.ACK, now=1.0)
    assert queue.message_count == 0 and list(store) == []


def test_requeue_all_returns_everything_and_frees_all_credit(vhost: VirtualHost) -> None:
    one, two = make_queue(vhost, "one"), make_queue(vhost, "two")
    store = UnackedStore()
    store.channel_prefetch = 2
    sub = consumer(one, prefetch=2)
    for entry in fill(one, 2):
        store.issue(one, entry, sub, True)
    store.issue(two, fill(two, 1)[0], None, True)
    assert not store.has_credit(sub)
    store.requeue_all()
    assert list(store) == []
    assert (one.message_count, two.message_count) == (2, 1)
    assert store.has_credit(sub)


def test_records_remember_what_was_delivered(vhost: VirtualHost) -> None:
    queue = make_queue(vhost)
    entry = fill(queue, 1)[0]
    store = UnackedStore()
    sub = consumer(queue)
    store.issue(queue, entry, sub, True)
    (record,) = store.take(1, False)
    assert isinstance(record, Unacked)
    assert (record.tag, record.queue, record.entry, record.consumer) == (1, queue, entry, sub)
