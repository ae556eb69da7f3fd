"""Flow control across workers (amqpd/engine/flood_watch.py): the owner reports its queues
that fall far behind their consumers, the publishing worker pauses the publishers that
feed their stubs (engine/connection.py `read_delay`), and lets them go when the owner says
the queue caught up or the link is lost. No sockets: the records go through the links'
encoding."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from pamqp import commands

from amqpd.engine.connection import FLOW_POLL
from amqpd.engine.flood_watch import FloodWatch
from amqpd.model.broker import Broker
from amqpd.model.enqueue import FLOW_BACKLOG
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import RemoteQueue
from amqpd.model.replica_apply import apply_change, snapshot
from amqpd.shell.workers.role import WorkerRole
from amqpd.shell.workers.spread import SpreadLinks
from amqpd.wire.forwarding import Control, RecordReader, encode_control
from tests.unit.engine_driver import Client
from tests.unit.test_spread_replica import _spread_broker


def _events(watch: FloodWatch) -> list[tuple[Any, ...]]:
    out = bytearray()
    watch.take(out)
    reader = RecordReader()
    reader.feed(bytes(out))
    events = []
    while (record := reader.next_record()) is not None:
        assert isinstance(record, Control)
        events.append(pickle.loads(record.payload))
    return events


def _consumed_queue() -> tuple[Client, Queue]:
    """A queue with an active consumer (prefetch 1, one delivery acked)."""
    client = Client(Broker(), now=100.0)
    client.handshake()
    client.open_channel()
    client.consume_actively("q")
    return client, client.broker.vhosts["/"].queues["q"]


def _fill(queue: Queue, count: int) -> None:
    for _ in range(count):
        queue.enqueue(Message("", "q", b"\x00", b"\x01q", b"\x00" * 14, b"x", False), None, False)


def test_a_queue_far_behind_is_reported_once_then_when_it_caught_up() -> None:
    _client, queue = _consumed_queue()
    watch = FloodWatch()
    assert not watch.note(set()) and _events(watch) == []
    _fill(queue, FLOW_BACKLOG + 2)  # one goes to the consumer
    assert queue.behind(FLOW_BACKLOG)
    assert watch.note({queue})
    assert _events(watch) == [("flow", "/", "q", True)]
    assert not watch.note({queue})  # told already
    assert not watch.check()  # still far behind
    assert _events(watch) == []
    queue.purge()
    assert watch.check()
    assert _events(watch) == [("flow", "/", "q", False)]
    assert not watch.reported


def test_a_deleted_queue_is_reported_as_caught_up() -> None:
    client, queue = _consumed_queue()
    _fill(queue, FLOW_BACKLOG + 2)
    watch = FloodWatch()
    watch.note({queue})
    _events(watch)
    client.send(1, commands.Queue.Delete(queue="q"))
    assert watch.check()
    assert _events(watch) == [("flow", "/", "q", False)]


def _pinned_publisher() -> tuple[Client, RemoteQueue]:
    """A publisher on worker 0 of a spread vhost, and the stub of worker 1's queue."""
    zero, _port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    stub = zero.vhosts["/"].remote["theirs"]
    client = Client(zero, now=100.0)
    client.handshake()
    client.open_channel()
    client.conn.recording = None  # pinned: it cannot move to worker 1
    return client, stub


def test_a_publisher_to_a_flooding_stub_is_paused_until_the_owner_says_it_caught_up() -> None:
    client, stub = _pinned_publisher()
    client.publish(1, "theirs", b"x")
    assert client.conn.read_delay(client.now) is None
    stub.flooding = True  # the owner's word (SpreadLinks._flooding)
    client.publish(1, "theirs", b"x")
    assert client.conn.read_delay(client.now) == FLOW_POLL
    assert client.conn.read_delay(client.now + 0.01) == FLOW_POLL
    stub.flooding = False
    assert client.conn.read_delay(client.now + 0.02) is None


def test_the_owners_events_set_and_clear_the_stubs_flag_and_a_lost_link_clears_it(
    tmp_path: Path,
) -> None:
    broker = Broker()
    links = SpreadLinks(WorkerRole(0, 3, tmp_path), broker, lambda _vhost: True, lambda: None)
    stub = RemoteQueue("theirs", "/", 1, False, False, False, {})
    broker.vhosts["/"].remote["theirs"] = stub

    def tell(*event: Any) -> None:
        out = bytearray()
        encode_control(out, pickle.dumps(event))
        reader = RecordReader()
        reader.feed(bytes(out))
        record = reader.next_record()
        assert isinstance(record, Control)
        links._served(1, [record])

    tell("flow", "/", "theirs", True)
    assert stub.flooding
    tell("flow", "/", "theirs", False)
    assert not stub.flooding
    tell("flow", "/", "theirs", True)
    tell("flow", "/", "unknown", True)  # deleted meanwhile: nothing to do
    tell("flow", "no-such-vhost", "theirs", True)
    links._settled(2, None, [])  # another worker's link
    assert stub.flooding
    links._settled(1, None, [])  # the owner's link is lost
    assert not stub.flooding
