"""The disk alarm and failed storage batches, driven through the sans-IO core.

The test plays the group committer: it takes the journal's batch and reports it committed
(`Broker.batch_committed`) or failed (`Broker.batch_failed`, as the shell does with the
queues the batch inserted into). RabbitMQ's disk alarm is the model: one connection.blocked
"low on disk" per publishing connection per episode, connection.unblocked when it clears,
and a blocked connection is not read.
"""

from __future__ import annotations

from pamqp import commands

from amqpd.model.broker import Broker, BrokerConfig
from persistence.errors import StoreError
from persistence.journal import Journal
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import bodies, counts, declare, publish_frames, split

CAPABILITIES = {"connection.blocked": True, "consumer_cancel_notify": True}
LIMIT = 50_000_000
FULL = StoreError("could not commit batch: database or disk is full")


def stored_broker() -> Broker:
    return Broker(BrokerConfig(disk_free_limit=LIMIT), Journal())


def connect(broker: Broker) -> Client:
    client = Client(broker, capabilities=CAPABILITIES)
    client.handshake()
    client.open_channel(1)
    declare(client, 1, "q", durable=True)
    return client


def confirming(broker: Broker) -> Client:
    client = connect(broker)
    client.send(1, commands.Confirm.Select())
    assert [type(m) for m in client.methods()] == [commands.Confirm.SelectOk]
    return client


def consumer(broker: Broker) -> Client:
    client = connect(broker)
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    assert [type(m) for m in client.methods()] == [commands.Basic.ConsumeOk]
    return client


def publish(client: Client, body: bytes) -> None:
    client.send(1, *publish_frames("q", body, delivery_mode=2))


def commit(broker: Broker) -> None:
    assert broker.journal is not None
    batch = broker.journal.take_batch()
    assert batch is not None
    broker.batch_committed(batch.id)


def fail(broker: Broker) -> None:
    assert isinstance(broker.journal, Journal)
    batch = broker.journal.take_batch()
    assert batch is not None
    broker.batch_failed(batch.id, FULL, batch.inserted_queues())


def probe(broker: Broker) -> None:
    """What the shell offers a failing store every second: an empty batch."""
    assert broker.journal is not None
    broker.journal.barrier()
    commit(broker)


def kinds(client: Client) -> list[str]:
    return [type(m).__name__ for m in client.methods()]


def delivered(client: Client) -> list[bytes]:
    messages, _others = split(client.received())
    return bodies(messages)


def test_a_promised_message_is_delivered_once_its_batch_commits() -> None:
    broker = stored_broker()
    sub = consumer(broker)
    pub = confirming(broker)
    publish(pub, b"m1")
    assert delivered(sub) == []  # not written yet: held
    assert pub.methods() == []
    commit(broker)
    assert kinds(pub) == ["Ack"]
    assert delivered(sub) == [b"m1"]


def test_a_failed_batch_nacks_and_its_messages_are_never_delivered() -> None:
    broker = stored_broker()
    sub = consumer(broker)
    pub = confirming(broker)
    publish(pub, b"before")
    commit(broker)
    assert delivered(sub) == [b"before"]
    pub.methods()

    publish(pub, b"during")
    fail(broker)
    assert [(type(m).__name__, m.delivery_tag) for m in pub.methods()] == [("Nack", 2)]
    assert delivered(sub) == []
    assert counts(pub, 1, "q") == (0, 1)  # not in the queue either
    assert broker.alarms.active == {"disk": None}

    publish(pub, b"blocked")  # the chunk with this publish is read; then it is blocked
    [blocked] = pub.methods()
    assert isinstance(blocked, commands.Connection.Blocked)
    assert blocked.reason == "low on disk"
    assert pub.conn.paused
    fail(broker)  # later batches fail too: more nacks, no second connection.blocked
    assert kinds(pub) == ["Nack"]
    assert delivered(sub) == []

    broker.disk_free(LIMIT * 2)  # space again, but the store has not written yet
    assert pub.conn.paused and pub.methods() == []
    probe(broker)
    assert kinds(pub) == ["Unblocked"]
    assert not pub.conn.paused
    publish(pub, b"after")
    commit(broker)
    assert kinds(pub) == ["Ack"]
    assert delivered(sub) == [b"after"]


def test_the_alarm_from_a_failure_waits_for_free_space_too() -> None:
    broker = stored_broker()
    pub = confirming(broker)
    publish(pub, b"x")
    fail(broker)
    broker.disk_free(LIMIT // 2)  # the shell measures right after the failure
    publish(pub, b"y")
    assert kinds(pub) == ["Nack", "Blocked"]
    probe(broker)  # the store writes again (y), but the disk is still short
    assert broker.alarms.active and pub.conn.paused
    assert kinds(pub) == ["Ack"]
    broker.disk_free(LIMIT)
    assert kinds(pub) == ["Unblocked"]
    assert not broker.alarms.active


def test_low_free_space_blocks_each_publisher_once_until_it_clears() -> None:
    broker = stored_broker()
    pub = confirming(broker)
    sub = consumer(broker)
    broker.disk_free(LIMIT - 1)
    sub.send(1, commands.Basic.Qos(prefetch_count=10))  # a consumer is never blocked
    assert kinds(sub) == ["QosOk"]
    publish(pub, b"1")
    assert kinds(pub) == ["Blocked"]
    for _ in range(3):
        broker.disk_free(LIMIT - 1)
        publish(pub, b"more")  # (the shell would not read these)
    assert pub.methods() == []
    broker.disk_free(LIMIT)
    assert kinds(pub) == ["Unblocked"]
    assert kinds(sub) == []  # it never published: never blocked, never unblocked


def test_plain_publishers_messages_are_delivered_at_once() -> None:
    """Concurrent store and dispatch stays for publishers that wait for nothing: an ack
    before the commit cancels the insert; a failed batch keeps them (in memory)."""
    broker = stored_broker()
    sub = consumer(broker)
    pub = connect(broker)
    publish(pub, b"plain")
    assert delivered(sub) == [b"plain"]
    assert isinstance(broker.journal, Journal)
    assert broker.journal.stats.saved_writes == 1  # no_ack: settled before any write
    publish(pub, b"kept")  # (delivered at once too)
    fail(broker)
    assert delivered(sub) == [b"kept"]


def test_a_promised_head_is_not_got_before_it_is_written() -> None:
    broker = stored_broker()
    pub = confirming(broker)
    publish(pub, b"m")
    pub.methods()
    getter = connect(broker)
    getter.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert kinds(getter) == ["GetEmpty"]
    commit(broker)
    getter.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert delivered(getter) == [b"m"]


def test_a_transaction_whose_batch_fails_delivers_nothing() -> None:
    broker = stored_broker()
    sub = consumer(broker)
    pub = connect(broker)
    pub.send(1, commands.Tx.Select())
    assert kinds(pub) == ["SelectOk"]
    publish(pub, b"t1")
    publish(pub, b"t2")
    pub.send(1, commands.Tx.Commit())
    assert pub.methods() == [] and delivered(sub) == []
    fail(broker)
    [close] = pub.methods()
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 541
    assert delivered(sub) == []
    assert counts(sub, 1, "q") == (0, 1)


def test_messages_behind_a_failed_batch_are_delivered_once_theirs_commits() -> None:
    broker = stored_broker()
    sub = consumer(broker)
    pub = confirming(broker)
    publish(pub, b"lost")
    assert isinstance(broker.journal, Journal)
    failing = broker.journal.take_batch()  # in flight ...
    publish(pub, b"next")  # ... while the next publish joins the next batch
    assert failing is not None
    broker.batch_failed(failing.id, FULL, failing.inserted_queues())
    assert delivered(sub) == []
    commit(broker)
    assert delivered(sub) == [b"next"]
    assert kinds(pub) == ["Nack", "Ack"]


def test_a_nacked_message_may_be_published_again_to_a_deduplicating_queue() -> None:
    broker = stored_broker()
    pub = confirming(broker)
    declare(pub, 1, "d", durable=True, arguments={"x-message-deduplication": True})
    pub.methods()
    pub.send(1, *publish_frames("d", b"once", delivery_mode=2, message_id="m-1"))
    fail(broker)
    assert kinds(pub) == ["Nack"]
    broker.disk_free(LIMIT)
    probe(broker)
    pub.methods()  # (unblocked, if it was blocked)
    pub.send(1, *publish_frames("d", b"once", delivery_mode=2, message_id="m-1"))
    commit(broker)
    assert kinds(pub) == ["Ack"]
    assert counts(pub, 1, "d") == (1, 0)  # not taken for a duplicate of the nacked one
