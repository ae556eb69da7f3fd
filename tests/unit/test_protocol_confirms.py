"""Publisher confirms and transactions, driven through the sans-IO engine (no sockets).

Confirm sequence numbers count the publishes of a channel from 1 after confirm.select; the
broker settles them in order and coalesces what one chunk of input settled into as few
frames as it can (one ack with multiple=true for a run of acks). A publish refused by a
reject-publish queue is nacked; an unroutable one is acked (after its basic.return when it
is mandatory). In a transaction publishes, returns and acks take effect at tx.commit.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands, frame

from amqpd.model.broker import Broker
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    connect,
    counts,
    declare,
    deliveries,
    publish_frames,
    rpc,
    split,
)

REJECTING = {"x-max-length": 2, "x-overflow": "reject-publish"}


def chunk(channel: int, *messages: tuple[str, bytes]) -> bytes:
    """The frames of several publishes (routing key, body) as one chunk of input."""
    return b"".join(
        frame.marshal(f, channel) for key, body in messages for f in publish_frames(key, body)
    )


def confirms(client: Client) -> list[tuple[int, str, int, bool]]:
    """(channel, Ack/Nack, delivery tag, multiple) of every frame received (nothing else)."""
    out = []
    for channel, value in client.received():
        assert isinstance(value, (commands.Basic.Ack, commands.Basic.Nack)), value
        out.append((channel, type(value).__name__, value.delivery_tag, value.multiple))
    return out


def confirming(*channels: int, **queue_arguments: Any) -> Client:
    """A client with a queue "q" and confirm mode on ``channels``."""
    client = connect(Broker(), *channels)
    declare(client, channels[0], "q", arguments=queue_arguments or None)
    for channel in channels:
        rpc(client, channel, commands.Confirm.Select(), commands.Confirm.SelectOk)
    return client


# ---------------------------------------------------------------------------------------------
# Sequence numbers and order
# ---------------------------------------------------------------------------------------------
def test_each_publish_in_its_own_chunk_is_acked_with_its_sequence_number() -> None:
    client = confirming(1)
    for n in range(1, 4):
        client.send(1, *publish_frames("q", b"m"))
        assert confirms(client) == [(1, "Ack", n, False)]


def test_sequence_numbers_are_per_channel() -> None:
    client = confirming(1, 2)
    client.conn.receive_data(chunk(1, ("q", b"a"), ("q", b"b")))
    assert confirms(client) == [(1, "Ack", 2, True)]
    client.send(2, *publish_frames("q", b"c"))
    assert confirms(client) == [(2, "Ack", 1, False)]
    client.send(1, *publish_frames("q", b"d"))
    assert confirms(client) == [(1, "Ack", 3, False)]


def test_publishes_before_confirm_select_are_not_counted() -> None:
    client = connect(Broker())
    declare(client, 1, "q")
    client.send(1, *publish_frames("q", b"unconfirmed"))
    assert client.received() == []
    rpc(client, 1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    rpc(client, 1, commands.Confirm.Select(), commands.Confirm.SelectOk)  # idempotent
    client.send(1, *publish_frames("q", b"first confirmed"))
    assert confirms(client) == [(1, "Ack", 1, False)]


def test_a_chunk_of_acks_coalesces_into_one_multiple_ack() -> None:
    client = confirming(1)
    client.conn.receive_data(chunk(1, *[("q", b"%d" % n) for n in range(50)]))
    assert confirms(client) == [(1, "Ack", 50, True)]
    assert counts(client, 1, "q") == (50, 0)


def test_unroutable_publishes_are_acked() -> None:
    client = confirming(1)
    client.conn.receive_data(chunk(1, ("nowhere", b"x"), ("nowhere", b"y")))
    assert confirms(client) == [(1, "Ack", 2, True)]


def test_an_unroutable_mandatory_publish_is_returned_before_it_is_acked() -> None:
    client = confirming(1)
    client.send(1, *publish_frames("nowhere", b"back", mandatory=True))
    [returned], others = split(client.received())
    assert isinstance(returned.method, commands.Basic.Return) and returned.body == b"back"
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert [(c, type(v), v.delivery_tag, v.multiple) for c, v in others] == [
        (1, commands.Basic.Ack, 1, False)
    ]


# ---------------------------------------------------------------------------------------------
# Nacks: reject-publish overflow
# ---------------------------------------------------------------------------------------------
def test_reject_publish_overflow_nacks_the_rest_of_the_chunk_with_one_multiple_nack() -> None:
    client = confirming(1, **REJECTING)
    client.conn.receive_data(chunk(1, *[("q", b"%d" % n) for n in range(4)]))
    assert confirms(client) == [(1, "Ack", 2, True), (1, "Nack", 4, True)]
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert [m.body for m in deliveries(client.received())] == [b"0"]  # the first two stayed
    assert counts(client, 1, "q") == (1, 0)


def test_acks_and_nacks_interleave_in_sequence_order() -> None:
    client = confirming(1, **REJECTING)
    client.conn.receive_data(
        chunk(1, ("q", b"a"), ("q", b"b"), ("q", b"c"), ("nowhere", b"d"), ("q", b"e"))
    )
    assert confirms(client) == [
        (1, "Ack", 2, True),
        (1, "Nack", 3, False),
        (1, "Ack", 4, False),
        (1, "Nack", 5, False),
    ]


def test_room_made_in_a_reject_publish_queue_is_used_by_the_next_publish() -> None:
    client = confirming(1, **REJECTING)
    client.conn.receive_data(chunk(1, ("q", b"0"), ("q", b"1"), ("q", b"2")))
    assert confirms(client) == [(1, "Ack", 2, True), (1, "Nack", 3, False)]
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    client.received()
    client.send(1, *publish_frames("q", b"3"))
    assert confirms(client) == [(1, "Ack", 4, False)]


def test_drop_head_overflow_acks_every_publish() -> None:
    client = confirming(1, **{"x-max-length": 1})
    client.conn.receive_data(chunk(1, ("q", b"0"), ("q", b"1"), ("q", b"2")))
    assert confirms(client) == [(1, "Ack", 3, True)]
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert [m.body for m in deliveries(client.received())] == [b"2"]


# ---------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------
def transactional() -> Client:
    client = connect(Broker(), 1, 2)
    declare(client, 1, "q")
    rpc(client, 2, commands.Tx.Select(), commands.Tx.SelectOk)
    return client


def test_tx_publishes_and_returns_take_effect_at_commit() -> None:
    client = transactional()
    client.send(2, *publish_frames("q", b"t1"))
    client.send(2, *publish_frames("nowhere", b"t2", mandatory=True))
    assert client.received() == []  # not even the basic.return yet
    assert counts(client, 1, "q") == (0, 0)
    client.send(2, commands.Tx.Commit())
    [returned], others = split(client.received())
    assert isinstance(returned.method, commands.Basic.Return) and returned.body == b"t2"
    assert [(c, type(v)) for c, v in others] == [(2, commands.Tx.CommitOk)]
    assert counts(client, 1, "q") == (1, 0)


def test_tx_rollback_discards_publishes_and_the_channel_stays_transactional() -> None:
    client = transactional()
    client.send(2, *publish_frames("q", b"gone"))
    rpc(client, 2, commands.Tx.Rollback(), commands.Tx.RollbackOk)
    rpc(client, 2, commands.Tx.Commit(), commands.Tx.CommitOk)
    assert counts(client, 1, "q") == (0, 0)
    client.send(2, *publish_frames("q", b"kept"))
    rpc(client, 2, commands.Tx.Commit(), commands.Tx.CommitOk)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert [m.body for m in deliveries(client.received())] == [b"kept"]


def test_tx_acks_apply_at_commit_and_a_rollback_leaves_the_message_unacked() -> None:
    client = transactional()
    client.send(1, *publish_frames("q", b"m"))
    client.send(2, commands.Basic.Get(queue="q"))
    [message] = deliveries(client.received())
    tag = message.method.delivery_tag
    client.send(2, commands.Basic.Ack(delivery_tag=tag))
    rpc(client, 2, commands.Tx.Rollback(), commands.Tx.RollbackOk)
    # still unacked (not requeued): the same tag can be acked and committed now
    assert counts(client, 1, "q") == (0, 0)
    client.send(2, commands.Basic.Ack(delivery_tag=tag))
    rpc(client, 2, commands.Tx.Commit(), commands.Tx.CommitOk)
    close = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    rpc(client, 2, close, commands.Channel.CloseOk)
    assert counts(client, 1, "q") == (0, 0)  # acked for good: nothing was requeued


def test_a_rolled_back_ack_leaves_the_message_to_be_requeued_when_the_channel_closes() -> None:
    client = transactional()
    client.send(1, *publish_frames("q", b"m"))
    client.send(2, commands.Basic.Get(queue="q"))
    [message] = deliveries(client.received())
    client.send(2, commands.Basic.Ack(delivery_tag=message.method.delivery_tag))
    rpc(client, 2, commands.Tx.Rollback(), commands.Tx.RollbackOk)
    close = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    rpc(client, 2, close, commands.Channel.CloseOk)
    assert counts(client, 1, "q") == (1, 0)


def test_uncommitted_publishes_are_lost_when_the_channel_closes() -> None:
    client = transactional()
    client.send(2, *publish_frames("q", b"lost"))
    close = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    rpc(client, 2, close, commands.Channel.CloseOk)
    assert counts(client, 1, "q") == (0, 0)


def test_a_commit_publishes_to_every_queue_at_once() -> None:
    client = transactional()
    declare(client, 1, "r")
    client.send(
        1,
        commands.Exchange.Declare(exchange="fan", exchange_type="fanout"),
        commands.Queue.Bind(queue="q", exchange="fan"),
        commands.Queue.Bind(queue="r", exchange="fan"),
    )
    client.received()
    for n in range(3):
        client.send(2, *publish_frames("", b"%d" % n, exchange="fan"))
    assert (counts(client, 1, "q"), counts(client, 1, "r")) == ((0, 0), (0, 0))
    rpc(client, 2, commands.Tx.Commit(), commands.Tx.CommitOk)
    assert (counts(client, 1, "q"), counts(client, 1, "r")) == ((3, 0), (3, 0))
