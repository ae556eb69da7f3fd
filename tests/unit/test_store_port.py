"""The store behind its port: a body read that fails while paging in or expiring is
contained by the queue (logged once, nothing lost, everyone else served) and retried by the
queue's timers until the store can be read again. Driven through the sans-IO core."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.queue import HOT_WINDOW
from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.records import OpKind
from tests.unit.engine_driver import Client

PAGED = 20  # messages behind the hot window: their bodies leave memory


class FlakyBodies:
    """A BodyLoader over the bodies the journal was given; fails while ``failing``."""

    def __init__(self) -> None:
        self.bodies: dict[tuple[tuple[str, str], int], bytes] = {}
        self.failing = True
        self.calls = 0

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        self.calls += 1
        if self.failing:
            raise StoreError("disk I/O error (injected)")
        seqs = sorted(seq for key, seq in self.bodies if key == queue and seq > after_seq)
        return [(seq, self.bodies[queue, seq]) for seq in seqs[:limit]]


def _committed(broker: Broker, journal: Journal, loader: FlakyBodies) -> None:
    """What the group committer does: take the batch, "write" it, report it committed."""
    batch = journal.take_batch()
    assert batch is not None
    for kind, rows in batch.ops:
        if kind is OpKind.INSERT_MESSAGE:
            for row in rows:
                loader.bodies[(row[0], row[1]), row[2]] = row[6]
    broker.batch_committed(batch.id)


@pytest.fixture
def store() -> tuple[Broker, Journal, FlakyBodies]:
    journal = Journal()
    broker = Broker(journal=journal, now=1000.0)
    loader = FlakyBodies()
    broker.set_body_loader(loader)
    return broker, journal, loader


def _fill(client: Client, queue: str, arguments: dict[str, object]) -> None:
    client.send(1, commands.Queue.Declare(queue=queue, durable=True, arguments=arguments))
    for n in range(HOT_WINDOW + PAGED):
        client.publish(1, queue, b"%05d" % n, delivery_mode=2)
    client.received()


def test_a_failing_body_read_while_expiring_is_contained_and_retried(
    store: tuple[Broker, Journal, FlakyBodies], caplog: pytest.LogCaptureFixture
) -> None:
    broker, journal, loader = store
    client = Client(broker, now=1000.0)
    client.handshake()
    client.open_channel()
    client.send(1, commands.Queue.Declare(queue="dead", durable=True))
    _fill(
        client,
        "ttl",
        {
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead",
        },
    )
    _committed(broker, journal, loader)
    queue = broker.vhosts["/"].queues["ttl"]
    assert sum(entry.message.body is None for entry in queue.ready) == PAGED
    with caplog.at_level(logging.ERROR):
        client.advance(2.0)  # the hot head dead-letters; the paged tail cannot be read
        client.advance(1.0)
    errors = [r for r in caplog.records if "cannot read message bodies" in r.getMessage()]
    assert len(errors) == 1  # logged once, not once per tick
    assert queue.message_count == PAGED and queue.read_failing
    dead = broker.vhosts["/"].queues["dead"]
    assert dead.message_count == HOT_WINDOW
    # the broker still serves: the same connection declares and publishes
    client.send(1, commands.Queue.Declare(queue="other"))
    client.publish(1, "other", b"still served")
    assert broker.vhosts["/"].queues["other"].message_count == 1
    assert not client.conn.should_close
    loader.failing = False
    client.advance(1.0)
    assert queue.message_count == 0 and not queue.read_failing
    assert dead.message_count == HOT_WINDOW + PAGED
    assert [entry.message.body for entry in dead.ready][-1] == b"%05d" % (HOT_WINDOW + PAGED - 1)


def test_a_failing_page_in_pauses_deliveries_until_the_store_reads_again(
    store: tuple[Broker, Journal, FlakyBodies],
) -> None:
    broker, journal, loader = store
    client = Client(broker, now=1000.0)
    client.handshake()
    client.open_channel()
    _fill(client, "long", {})
    _committed(broker, journal, loader)
    client.send(1, commands.Basic.Consume(queue="long", consumer_tag="c", no_ack=True))
    delivered = [v for _c, v in client.received() if isinstance(v, commands.Basic.Deliver)]
    assert len(delivered) == HOT_WINDOW  # up to the first paged-out body
    assert not client.conn.should_close and loader.calls == 1
    client.send(1, commands.Basic.Get(queue="long"))  # basic.get: as if empty, no crash
    assert isinstance(client.methods()[-1], commands.Basic.GetEmpty)
    loader.failing = False
    client.advance(1.0)  # the queue's timer retries the delivery
    bodies = [v.value for _c, v in client.received() if hasattr(v, "value")]
    assert len(bodies) == PAGED
    assert bodies[-1] == b"%05d" % (HOT_WINDOW + PAGED - 1)
    assert broker.vhosts["/"].queues["long"].message_count == 0
