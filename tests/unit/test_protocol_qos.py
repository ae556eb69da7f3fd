"""basic.qos, credit and basic.get, driven through the sans-IO engine (no sockets, no sleeps).

RabbitMQ 3.x semantics: ``global=false`` limits each consumer created afterwards,
``global=true`` limits all consumers of the channel together, both apply when both are set;
an ack, a nack or a reject gives back exactly the credit it settles; basic.get and no-ack
consumers are not limited, and what basic.get hands out takes no consumer credit
(rabbit_channel counts only deliveries with a consumer tag in the limiter).
"""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    Delivery,
    connect,
    connection_error,
    counts,
    declare,
    deliveries,
    publish_frames,
    rpc,
    split,
)


def loaded(count: int, *channels: int, queue: str = "q") -> Client:
    """A client with ``channels`` open and ``count`` messages b"0", b"1", ... in ``queue``."""
    client = connect(Broker(), *channels)
    declare(client, 1, queue)
    for n in range(count):
        client.send(1, *publish_frames(queue, b"%d" % n))
    assert client.received() == []
    return client


def consume(client: Client, channel: int, tag: str, **options: Any) -> list[Delivery]:
    """basic.consume; returns what was delivered right away (after the Consume-Ok)."""
    client.send(channel, commands.Basic.Consume(queue="q", consumer_tag=tag, **options))
    messages, others = split(client.received())
    assert [(c, type(v)) for c, v in others] == [(channel, commands.Basic.ConsumeOk)], others
    return messages


def qos(client: Client, channel: int, count: int, global_: bool = False) -> None:
    rpc(
        client,
        channel,
        commands.Basic.Qos(prefetch_count=count, global_=global_),
        commands.Basic.QosOk,
    )


def summary(messages: list[Delivery]) -> list[tuple[str, int, bytes, bool]]:
    """(consumer tag, delivery tag, body, redelivered) of each delivery."""
    return [
        (m.method.consumer_tag, m.method.delivery_tag, m.body, m.method.redelivered)
        for m in messages
    ]


def settle(client: Client, channel: int, method: Any) -> list[Delivery]:
    """Send an ack/nack/reject; returns the deliveries it made room for (nothing else)."""
    client.send(channel, method)
    return deliveries(client.received())


# ---------------------------------------------------------------------------------------------
# Per-consumer prefetch (global=false)
# ---------------------------------------------------------------------------------------------
def test_per_consumer_prefetch_limits_each_consumer_separately() -> None:
    client = loaded(10, 1)
    qos(client, 1, 2)
    assert summary(consume(client, 1, "a")) == [("a", 1, b"0", False), ("a", 2, b"1", False)]
    assert summary(consume(client, 1, "b")) == [("b", 3, b"2", False), ("b", 4, b"3", False)]
    assert counts(client, 1, "q") == (6, 2)


def test_ack_gives_back_one_credit_to_the_consumer_it_settles() -> None:
    client = loaded(10, 1)
    qos(client, 1, 2)
    consume(client, 1, "a")
    consume(client, 1, "b")
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=3))) == [("b", 5, b"4", False)]
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=1))) == [("a", 6, b"5", False)]


def test_nack_with_requeue_redelivers_the_message_with_the_freed_credit() -> None:
    client = loaded(10, 1)
    qos(client, 1, 2)
    consume(client, 1, "a")
    consume(client, 1, "b")
    redelivered = settle(client, 1, commands.Basic.Nack(delivery_tag=2, requeue=True))
    assert summary(redelivered) == [("a", 5, b"1", True)]  # back at the head of the queue


def test_reject_without_requeue_drops_the_message_and_frees_credit() -> None:
    client = loaded(10, 1)
    qos(client, 1, 2)
    consume(client, 1, "a")
    consume(client, 1, "b")
    assert summary(settle(client, 1, commands.Basic.Reject(delivery_tag=3, requeue=False))) == [
        ("b", 5, b"4", False)
    ]
    assert counts(client, 1, "q") == (5, 2)  # 10 - 4 delivered before - 1 now; "2" is gone


def test_multiple_ack_gives_back_all_its_credit_at_once() -> None:
    client = loaded(10, 1)
    qos(client, 1, 3)
    consume(client, 1, "a")
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=2, multiple=True))) == [
        ("a", 4, b"3", False),
        ("a", 5, b"4", False),
    ]
    nack_all = commands.Basic.Nack(delivery_tag=0, multiple=True, requeue=False)
    assert [m.body for m in settle(client, 1, nack_all)] == [b"5", b"6", b"7"]
    assert counts(client, 1, "q") == (2, 1)


def test_a_new_per_consumer_prefetch_applies_to_consumers_created_afterwards() -> None:
    client = loaded(10, 1)
    qos(client, 1, 1)
    assert len(consume(client, 1, "a")) == 1
    qos(client, 1, 3)  # "a" keeps its limit of 1, "b" gets 3
    assert [m.body for m in consume(client, 1, "b")] == [b"1", b"2", b"3"]
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=1))) == [("a", 5, b"4", False)]
    assert counts(client, 1, "q") == (5, 2)


def test_prefetch_zero_means_unlimited_and_no_ack_consumers_ignore_prefetch() -> None:
    client = loaded(5, 1, 2)
    qos(client, 1, 0)
    assert len(consume(client, 1, "unlimited")) == 5
    client = loaded(5, 1)
    qos(client, 1, 1)
    qos(client, 1, 1, global_=True)
    assert [m.body for m in consume(client, 1, "auto", no_ack=True)] == [
        b"0",
        b"1",
        b"2",
        b"3",
        b"4",
    ]


def test_prefetch_size_is_540_not_implemented() -> None:
    client = connect(Broker())
    client.send(1, commands.Basic.Qos(prefetch_size=10))
    assert connection_error(client) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (10)", 60, 10)


# ---------------------------------------------------------------------------------------------
# Per-channel prefetch (global=true)
# ---------------------------------------------------------------------------------------------
def test_global_prefetch_is_shared_by_the_consumers_of_the_channel() -> None:
    client = loaded(10, 1)
    qos(client, 1, 3, global_=True)
    assert [m.body for m in consume(client, 1, "a")] == [b"0", b"1", b"2"]
    assert consume(client, 1, "b") == []  # the channel's credit is used up
    # two credits back: the consumers take turns
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=2, multiple=True))) == [
        ("a", 4, b"3", False),
        ("b", 5, b"4", False),
    ]


def test_global_and_per_consumer_limits_both_apply() -> None:
    client = loaded(10, 1)
    qos(client, 1, 3, global_=True)
    qos(client, 1, 1)
    assert len(consume(client, 1, "a")) == 1  # its own limit
    assert len(consume(client, 1, "b")) == 1
    assert len(consume(client, 1, "c")) == 1
    assert consume(client, 1, "d") == []  # the channel's limit
    # one channel credit back: one delivery, to a consumer with room of its own (b or d)
    [message] = settle(client, 1, commands.Basic.Ack(delivery_tag=2))
    assert message.method.consumer_tag in ("b", "d") and message.body == b"3"
    assert settle(client, 1, commands.Basic.Ack(delivery_tag=1)) != []


def test_raising_the_global_prefetch_delivers_at_once() -> None:
    client = loaded(4, 1)
    qos(client, 1, 2, global_=True)
    assert len(consume(client, 1, "a")) == 2
    client.send(1, commands.Basic.Qos(prefetch_count=4, global_=True))
    messages, others = split(client.received())
    assert [type(v) for _c, v in others] == [commands.Basic.QosOk]
    assert summary(messages) == [("a", 3, b"2", False), ("a", 4, b"3", False)]


def test_prefetch_is_per_channel_not_per_connection() -> None:
    client = loaded(6, 1, 2)
    qos(client, 1, 1, global_=True)
    qos(client, 2, 2, global_=True)
    assert len(consume(client, 1, "one")) == 1
    assert len(consume(client, 2, "two")) == 2
    assert counts(client, 1, "q") == (3, 2)


def test_unacked_deliveries_return_to_the_queue_when_their_channel_closes() -> None:
    client = loaded(3, 1, 2)
    qos(client, 2, 2)
    assert len(consume(client, 2, "a")) == 2
    close = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    rpc(client, 2, close, commands.Channel.CloseOk)
    assert counts(client, 1, "q") == (3, 0)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    [message] = deliveries(client.received())
    assert (message.body, message.method.redelivered) == (b"0", True)


def test_basic_recover_redelivers_unacked_messages_within_the_credit() -> None:
    client = loaded(6, 1)
    qos(client, 1, 2)
    consume(client, 1, "a")
    settle(client, 1, commands.Basic.Ack(delivery_tag=1))
    client.send(1, commands.Basic.Recover(requeue=True))
    messages, others = split(client.received())
    assert [type(v) for _c, v in others] == [commands.Basic.RecoverOk]
    # both outstanding messages ("1", "2") come back, redelivered, within the credit of 2
    assert summary(messages) == [("a", 4, b"1", True), ("a", 5, b"2", True)]


# ---------------------------------------------------------------------------------------------
# basic.get
# ---------------------------------------------------------------------------------------------
def test_get_hands_out_one_message_with_the_count_left_behind() -> None:
    client = loaded(3, 1)
    client.send(1, commands.Basic.Get(queue="q"))
    [message] = deliveries(client.received())
    assert isinstance(message.method, commands.Basic.GetOk)
    assert (message.method.delivery_tag, message.method.message_count) == (1, 2)
    assert (message.method.exchange, message.method.routing_key, message.body) == ("", "q", b"0")
    assert counts(client, 1, "q") == (2, 0)


def test_get_on_an_empty_queue_is_get_empty() -> None:
    client = loaded(0, 1)
    rpc(client, 1, commands.Basic.Get(queue="q"), commands.Basic.GetEmpty)


@pytest.mark.parametrize("global_", [False, True])
def test_get_ignores_prefetch_and_takes_no_consumer_credit(global_: bool) -> None:
    client = loaded(4, 1)
    qos(client, 1, 1, global_=global_)
    client.send(1, commands.Basic.Get(queue="q"), commands.Basic.Get(queue="q"))
    assert [m.method.delivery_tag for m in deliveries(client.received())] == [1, 2]
    assert summary(consume(client, 1, "a")) == [("a", 3, b"2", False)]
    # acking a get does not give the consumer more room
    assert settle(client, 1, commands.Basic.Ack(delivery_tag=1)) == []
    assert summary(settle(client, 1, commands.Basic.Ack(delivery_tag=3))) == [("a", 4, b"3", False)]


def test_get_without_ack_is_settled_at_once_and_a_get_nack_requeues() -> None:
    client = loaded(2, 1)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert [m.body for m in deliveries(client.received())] == [b"0"]
    assert counts(client, 1, "q") == (1, 0)
    client.send(1, commands.Basic.Get(queue="q"))
    [message] = deliveries(client.received())
    settle(client, 1, commands.Basic.Nack(delivery_tag=message.method.delivery_tag))
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    [again] = deliveries(client.received())
    assert (again.body, again.method.redelivered) == (b"1", True)
