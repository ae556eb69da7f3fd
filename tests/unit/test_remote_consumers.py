"""Consuming across workers without processes (amqpd/engine/remote_consumers.py on the
consuming worker, amqpd/engine/served_consumers.py on the queue's owner): a connection
pinned to worker 0 consumes from and gets from a queue worker 1 owns; the requests and
records travel through the same encoding the links use, pumped by the test."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from pamqp import commands

from amqpd.engine.remote_consumers import RemoteConsumers
from amqpd.engine.served_consumers import WINDOW, ServedConsumers
from amqpd.model.broker import Broker
from amqpd.model.queue import Queue
from amqpd.model.replica_apply import apply_change, snapshot
from amqpd.wire.forwarding import Delivery, RecordReader
from persistence.stream.log import StreamStorage, fsync_all
from tests.unit.engine_driver import Client
from tests.unit.test_spread_replica import _spread_broker


class Pair:
    """Worker 0 (a pinned client's) and worker 1 (the owner of "theirs"), linked."""

    def __init__(self, arguments: dict[str, Any] | None = None) -> None:
        self.zero, self.port0 = _spread_broker(0)
        self.one, _port1 = _spread_broker(1)
        self.queue: Queue = self.one.vhosts["/"].declare_queue(
            "theirs", False, True, False, False, arguments or {}, None
        )
        self.requests: list[bytes] = []
        self.remote = RemoteConsumers(lambda _worker, payload: self.requests.append(payload))
        self.zero.vhosts["/"].consuming = self.remote
        apply_change(self.zero.vhosts["/"], snapshot(self.one.vhosts["/"], 1))
        self.served = ServedConsumers(lambda: None)
        self.client = Client(self.zero)
        self.client.handshake()
        self.client.open_channel()
        self.client.conn.recording = None  # pinned to worker 0: it cannot move
        self.owner = Client(self.one)
        self.owner.handshake()
        self.owner.open_channel()

    def pump(self) -> None:
        """Carry requests to the owner and its records back until both are quiet."""
        while True:
            self.remote.flush()
            requests, self.requests = self.requests, []
            for payload in requests:
                self.served.handle(self.one.vhosts, pickle.loads(payload))
            out = bytearray()
            self.served.take(out)
            reader = RecordReader()
            reader.feed(bytes(out))
            while (record := reader.next_record()) is not None:
                if isinstance(record, Delivery):
                    self.remote.delivered(1, record)
                else:
                    self.remote.event(1, pickle.loads(record.payload))  # type: ignore[union-attr]
            holds, self.port0.holds = self.port0.holds, []
            for held in holds:  # every other worker applied what was sent: replies go
                held.decided(True)
            if not requests and not out and not holds:
                return

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            self.owner.publish(1, "theirs", body)
        self.owner.methods()


def _deliveries(client: Client) -> list[tuple[int, bytes, bool]]:
    """(tag, body, redelivered) of each basic.deliver received."""
    return _deliveries_in(client.received())


def _deliveries_in(received: list[tuple[int, Any]]) -> list[tuple[int, bytes, bool]]:
    out: list[tuple[int, bytes, bool]] = []
    method: Any = None
    for _channel, value in received:
        if isinstance(value, commands.Basic.Deliver):
            method = value
        elif method is not None and hasattr(value, "value"):
            out.append((method.delivery_tag, value.value, method.redelivered))
            method = None
    return out


def test_a_pinned_connection_consumes_from_another_workers_queue() -> None:
    pair = Pair()
    pair.publish(b"a", b"b", b"c")
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="remote"))
    assert client.methods() == []  # the consume-ok waits for the owner
    pair.pump()
    received = client.received()
    assert isinstance(received[0][1], commands.Basic.ConsumeOk)
    assert [v.value for _c, v in received if hasattr(v, "value")] == [b"a", b"b", b"c"]
    assert len(pair.queue.consumers) == 1 and pair.queue.message_count == 0

    client.send(1, commands.Basic.Ack(delivery_tag=2))
    client.send(1, commands.Basic.Cancel(consumer_tag="remote"))
    assert client.methods() == []  # the cancel-ok waits until the owner dropped it
    pair.pump()
    (cancel_ok,) = client.methods()
    assert isinstance(cancel_ok, commands.Basic.CancelOk) and not pair.queue.consumers
    close = commands.Channel.Close(reply_code=200, class_id=0, method_id=0)
    client.send(1, close)  # 1 and 3 go back to the owner's queue
    pair.pump()
    assert not pair.queue.consumers
    assert [entry.message.body for entry in pair.queue.ready] == [b"a", b"c"]
    assert all(entry.redelivered for entry in pair.queue.ready)


def test_qos_prefetch_is_counted_on_the_owner_and_an_ack_lets_the_next_come() -> None:
    pair = Pair()
    pair.publish(b"1", b"2", b"3", b"4")
    client = pair.client
    client.send(1, commands.Basic.Qos(prefetch_count=2))
    client.methods()
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    assert [body for _t, body, _r in _deliveries(client)] == [b"1", b"2"]
    client.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    pair.pump()
    assert [(tag, body) for tag, body, _r in _deliveries(client)] == [(3, b"3"), (4, b"4")]
    assert pair.queue.message_count == 0


def test_a_nack_with_requeue_redelivers_and_a_reject_dead_letters_on_the_owner() -> None:
    pair = Pair({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    dead = pair.one.vhosts["/"].declare_queue("dead", False, True, False, False, {}, None)
    pair.publish(b"m")
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    assert _deliveries(client) == [(1, b"m", False)]
    client.send(1, commands.Basic.Nack(delivery_tag=1, requeue=True))
    pair.pump()
    assert _deliveries(client) == [(2, b"m", True)]
    client.send(1, commands.Basic.Reject(delivery_tag=2, requeue=False))
    pair.pump()
    assert pair.queue.message_count == 0
    assert [entry.message.body for entry in dead.ready] == [b"m"]


def test_basic_get_from_another_workers_queue_is_answered_by_its_owner() -> None:
    pair = Pair()
    pair.publish(b"x", b"y")
    client = pair.client
    client.send(1, commands.Basic.Get(queue="theirs"))
    assert client.methods() == []
    pair.pump()
    received = client.received()
    get_ok: Any = received[0][1]
    assert isinstance(get_ok, commands.Basic.GetOk)
    assert get_ok.message_count == 1 and received[-1][1].value == b"x"
    assert get_ok.delivery_tag is not None
    client.send(1, commands.Basic.Ack(delivery_tag=get_ok.delivery_tag))
    client.send(1, commands.Basic.Get(queue="theirs", no_ack=True))
    client.send(1, commands.Basic.Get(queue="theirs"))
    pair.pump()
    methods = client.methods()
    assert isinstance(methods[0], commands.Basic.GetOk)
    assert isinstance(methods[1], commands.Basic.GetEmpty)
    assert pair.queue.message_count == 0 and not pair.queue.ready


def test_an_exclusive_consumer_on_the_owner_refuses_the_remote_consume_with_403() -> None:
    pair = Pair()
    pair.owner.send(1, commands.Basic.Consume(queue="theirs", exclusive=True))
    pair.owner.methods()
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    (close,) = client.methods()
    assert isinstance(close, commands.Channel.Close)
    assert close.reply_code == 403 and "in exclusive use" in close.reply_text


def test_the_queue_deleted_on_its_owner_cancels_the_remote_consumer() -> None:
    pair = Pair()
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    client.methods()
    pair.owner.send(1, commands.Queue.Delete(queue="theirs"))
    pair.pump()
    (cancel,) = client.methods()
    assert isinstance(cancel, commands.Basic.Cancel) and cancel.consumer_tag == "c"
    assert len(pair.remote) == 0


def test_a_lost_link_requeues_on_the_owner_and_cancels_on_the_consumers_worker() -> None:
    pair = Pair()
    pair.publish(b"1", b"2")
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    assert len(_deliveries(client)) == 2
    pair.served.lost()
    assert [entry.message.body for entry in pair.queue.ready] == [b"1", b"2"]
    assert not pair.queue.consumers
    pair.remote.lost(1)
    (cancel,) = client.methods()
    assert isinstance(cancel, commands.Basic.Cancel)
    client.send(1, commands.Basic.Ack(delivery_tag=1))  # known to the channel: no error
    pair.remote.flush()
    assert pair.requests == []  # nothing is sent for what the lost owner had


def test_a_consumer_without_prefetch_has_a_window_of_deliveries_in_flight() -> None:
    pair = Pair()
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c", no_ack=True))
    pair.pump()
    client.methods()
    pair.publish(*[b"%d" % i for i in range(WINDOW + 5)])
    assert pair.queue.message_count == 5  # the owner waits for credit
    pair.pump()  # the consuming worker handed them out: credit back, the rest come
    assert pair.queue.message_count == 0
    assert len(_deliveries(client)) == WINDOW + 5


def test_a_declare_purge_and_delete_answer_with_the_owners_counts() -> None:
    pair = Pair()
    pair.publish(b"1", b"2", b"3")
    client = pair.client
    client.send(1, commands.Queue.Declare(queue="theirs", passive=True))
    assert client.methods() == []  # the counts are the owner's
    pair.pump()
    (declare_ok,) = client.methods()
    assert isinstance(declare_ok, commands.Queue.DeclareOk)
    assert (declare_ok.message_count, declare_ok.consumer_count) == (3, 0)

    client.send(1, commands.Basic.Qos(prefetch_count=1))
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="c"))
    pair.pump()
    client.received()
    client.send(1, commands.Queue.Declare(queue="theirs", passive=True))
    pair.pump()
    (declare_ok,) = client.methods()
    assert (declare_ok.message_count, declare_ok.consumer_count) == (2, 1)  # type: ignore[attr-defined]
    client.send(1, commands.Queue.Delete(queue="theirs", if_unused=True))
    pair.pump()
    (refused,) = client.methods()
    assert isinstance(refused, commands.Channel.Close)
    assert refused.reply_code == 406 and "in use" in refused.reply_text
    assert not pair.queue.deleted

    client.open_channel(2)
    pair.publish(b"4")
    client.send(2, commands.Queue.Purge(queue="theirs"))
    pair.pump()
    (purge_ok,) = client.methods()
    assert (
        isinstance(purge_ok, commands.Queue.PurgeOk) and purge_ok.message_count == 4
    )  # 1 came back with channel 1
    pair.publish(b"5")
    client.send(2, commands.Queue.Delete(queue="theirs"))
    pair.pump()
    (delete_ok,) = client.methods()
    assert isinstance(delete_ok, commands.Queue.DeleteOk) and delete_ok.message_count == 1
    assert pair.queue.deleted and "theirs" not in pair.zero.vhosts["/"].remote


def test_a_get_from_a_queue_gone_on_its_owner_is_404_and_from_a_stream_540() -> None:
    pair = Pair()
    pair.one.vhosts["/"].delete_queue(pair.queue)  # the stub here has not heard yet
    client = pair.client
    client.send(1, commands.Basic.Get(queue="theirs"))
    pair.pump()
    (close,) = client.methods()
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 404
    assert "no queue 'theirs'" in close.reply_text

    pair = Pair()
    stream = {"x-queue-type": "stream"}  # worker 1's stream, as its change describes it
    apply_change(pair.zero.vhosts["/"], ("queue", "log", 1, True, False, False, stream))
    pair.client.send(1, commands.Basic.Get(queue="log"))
    (refused,) = pair.client.methods()  # as a stream of this worker refuses it
    assert isinstance(refused, commands.Connection.Close) and refused.reply_code == 540
    assert "basic.get" in refused.reply_text
    assert pair.requests == []  # nothing was asked of the owner


STREAM: dict[str, Any] = {"x-queue-type": "stream"}


def _synced(broker: Broker) -> None:
    """What the shell's group committer does for streams: fsync what was appended."""
    dirty = broker.dirty_streams
    if dirty is None:  # no store (these brokers): an append is final at once
        return
    for queue in list(dirty):
        fds, upto = queue.log.sync_targets()
        fsync_all(fds)
        queue.log_synced(upto)
    dirty.clear()


def _stream_pair(tmp_path: Path) -> Pair:
    pair = Pair()
    pair.one.set_stream_logs(StreamStorage(tmp_path / "streams"))
    pair.owner.send(1, commands.Queue.Declare(queue="log", durable=True, arguments=STREAM))
    pair.owner.methods()
    apply_change(pair.zero.vhosts["/"], ("queue", "log", 1, True, False, False, STREAM))
    for body in (b"s0", b"s1", b"s2", b"s3"):
        pair.owner.publish(1, "log", body, headers={"n": body.decode()})
    pair.owner.methods()
    _synced(pair.one)
    return pair


def _stream_deliveries(client: Client) -> list[tuple[int, int, bytes]]:
    """(delivery tag, x-stream-offset, body) of each delivery received."""
    out = []
    method: Any = None
    header: Any = None
    for _channel, value in client.received():
        if isinstance(value, commands.Basic.Deliver):
            method = value
        elif method is not None and hasattr(value, "properties"):
            header = value
        elif method is not None and hasattr(value, "value"):
            offset = header.properties.headers["x-stream-offset"]
            out.append((method.delivery_tag, offset, value.value))
            method = None
    return out


def test_a_pinned_connection_consumes_another_workers_stream_from_an_offset(
    tmp_path: Path,
) -> None:
    pair = _stream_pair(tmp_path)
    client = pair.client
    offset: dict[str, Any] = {"x-stream-offset": 1}
    client.send(1, commands.Basic.Consume(queue="log", arguments=offset))
    (refused,) = client.methods()  # checked here, as for a stream of this worker: 406
    assert isinstance(refused, commands.Channel.Close) and refused.reply_code == 406
    assert pair.requests == []
    client.open_channel(2)
    client.send(2, commands.Basic.Qos(prefetch_count=2))
    client.methods()
    client.send(2, commands.Basic.Consume(queue="log", consumer_tag="s", arguments=offset))
    pair.pump()
    assert _stream_deliveries(client) == [(1, 1, b"s1"), (2, 2, b"s2")]  # prefetch 2
    client.send(2, commands.Basic.Ack(delivery_tag=2, multiple=True))  # credit, as RabbitMQ
    pair.pump()
    assert _stream_deliveries(client) == [(3, 3, b"s3")]
    pair.owner.publish(1, "log", b"s4")
    pair.owner.methods()
    _synced(pair.one)
    pair.pump()
    assert _stream_deliveries(client) == [(4, 4, b"s4")]
    client.send(2, commands.Basic.Nack(delivery_tag=4))
    (refused,) = client.methods()  # a stream's delivery cannot be nacked: 540
    assert isinstance(refused, commands.Connection.Close) and refused.reply_code == 540


def test_a_browser_of_another_workers_queue_gets_copies_of_what_its_selector_matches() -> None:
    pair = Pair()
    for body, color in ((b"r1", "red"), (b"b1", "blue"), (b"r2", "red")):
        pair.owner.publish(1, "theirs", body, headers={"color": color})
    pair.owner.methods()
    client = pair.client
    browse: dict[str, Any] = {"x-browse": True, "x-selector": "color = 'red'"}
    client.send(
        1, commands.Basic.Consume(queue="theirs", consumer_tag="b", no_ack=True, arguments=browse)
    )
    assert client.methods() == []  # answered once the owner has
    pair.pump()
    received = client.received()
    assert isinstance(received[0][1], commands.Basic.ConsumeOk)
    assert [body for _tag, body, _redelivered in _deliveries_in(received)] == [b"r1", b"r2"]
    cancel = received[-1][1]
    assert isinstance(cancel, commands.Basic.Cancel) and cancel.consumer_tag == "b"
    assert [entry.message.body for entry in pair.queue.ready] == [b"r1", b"b1", b"r2"]
    assert not pair.queue.consumers  # the owner's queue is left as it was

    client.send(1, commands.Basic.Consume(queue="theirs", arguments={"x-browse": True}))
    (close,) = client.methods()  # a browser needs no-ack, checked here: nothing asked
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 406
    assert pair.requests == []

    client.open_channel(2)
    bad: dict[str, Any] = {"x-browse": True, "x-selector": "color = "}
    client.send(2, commands.Basic.Consume(queue="theirs", no_ack=True, arguments=bad))
    pair.pump()
    (close,) = client.methods()  # the owner parses the selector: 406 from there
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 406


def test_a_global_qos_limits_the_channel_over_its_local_and_remote_consumers() -> None:
    pair = Pair()
    pair.publish(b"r1", b"r2", b"r3")
    mine = pair.zero.vhosts["/"].declare_queue("mine", False, True, False, False, {}, None)
    client = pair.client
    client.publish(1, "mine", b"m1")
    client.send(1, commands.Basic.Qos(prefetch_count=2, global_=True))
    client.methods()
    client.send(1, commands.Basic.Consume(queue="mine", consumer_tag="local"))
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="remote"))
    pair.pump()
    # the owner sent two (its consumer counts the channel's limit); the one without room
    # went back unsent, as it was, and the owner blocked the consumer (RabbitMQ's limiter)
    assert [body for _tag, body, _r in _deliveries(client)] == [b"m1", b"r1"]
    assert [(e.message.body, e.redelivered) for e in pair.queue.ready] == [
        (b"r2", False),
        (b"r3", False),
    ]
    assert pair.queue.ready[0].delivery_count == 0
    client.send(1, commands.Basic.Ack(delivery_tag=1))  # m1: room again, r2 comes
    pair.pump()
    assert [(tag, body, r) for tag, body, r in _deliveries(client)] == [(3, b"r2", False)]
    client.send(1, commands.Basic.Ack(delivery_tag=2))  # r1: the owner sends r3
    pair.pump()
    assert [(tag, body) for tag, body, _r in _deliveries(client)] == [(4, b"r3")]
    assert mine.message_count == 0 and pair.queue.message_count == 0

    pair.publish(b"r4", b"r5")
    client.send(1, commands.Basic.Ack(delivery_tag=3))  # r2: r4 comes, r5 goes back
    pair.pump()
    assert [body for _tag, body, _r in _deliveries(client)] == [b"r4"]
    assert [entry.message.body for entry in pair.queue.ready] == [b"r5"]
    client.send(1, commands.Channel.Close(reply_code=200, class_id=0, method_id=0))
    pair.pump()  # unacked (r3, r4): back on the owner, redelivered; r5 as it was
    ready = {entry.message.body: entry.redelivered for entry in pair.queue.ready}
    assert ready == {b"r3": True, b"r4": True, b"r5": False}
    assert not pair.queue.consumers


def _sharing_a_global_qos(limit: int, local: list[bytes]) -> Pair:
    """A pinned client whose channel (basic.qos global=true, ``limit``) consumes its own
    worker's queue "mine", holding ``local`` unacked, and the owner's "theirs"."""
    pair = Pair()
    pair.zero.vhosts["/"].declare_queue("mine", False, True, False, False, {}, None)
    client = pair.client
    for body in local:
        client.publish(1, "mine", body)
    client.send(1, commands.Basic.Qos(prefetch_count=limit, global_=True))
    client.send(1, commands.Basic.Consume(queue="mine", consumer_tag="local"))
    client.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="remote"))
    pair.pump()
    client.methods()
    return pair


def test_what_a_full_channel_sends_back_goes_to_the_owners_other_consumers() -> None:
    """The channel's global qos is full: what its consumer on another worker's queue cannot
    take goes to the queue's other consumers meanwhile (RabbitMQ's limiter blocks that
    consumer in the queue), and it gets the next ones in order once it has room."""
    pair = _sharing_a_global_qos(2, [b"m1"])
    client = pair.client
    pair.publish(b"a", b"b", b"c")
    pair.pump()  # the owner sends a and b (2 per consumer); b finds no room, goes back
    assert [body for _tag, body, _r in _deliveries(client)] == [b"a"]
    other = pair.owner  # a consumer on the owner's worker, with room
    other.send(1, commands.Basic.Consume(queue="theirs", consumer_tag="there", no_ack=True))
    assert [body for _tag, body, _r in _deliveries(other)] == [b"b", b"c"]
    other.send(1, commands.Basic.Cancel(consumer_tag="there"))
    other.methods()
    pair.publish(b"d", b"e")
    client.send(1, commands.Basic.Ack(delivery_tag=1))  # m1: room for one
    pair.pump()
    assert [body for _tag, body, _r in _deliveries(client)] == [b"d"]
    client.send(1, commands.Basic.Ack(delivery_tag=2))  # a: room for the next
    pair.pump()
    assert [body for _tag, body, _r in _deliveries(client)] == [b"e"]
    # b counted once (its delivery here), not also as sent to the full channel
    assert pair.queue.stats.deliver == 3 and pair.queue.stats.redeliver == 0


def test_another_workers_stream_refuses_no_ack_and_purge_as_a_local_stream(
    tmp_path: Path,
) -> None:
    pair = _stream_pair(tmp_path)
    client = pair.client
    client.send(1, commands.Basic.Consume(queue="log", no_ack=True))
    (refused,) = client.methods()  # checked here: nothing asked of the owner
    assert isinstance(refused, commands.Connection.Close) and refused.reply_code == 540
    assert pair.requests == []

    pair = _stream_pair(tmp_path / "again")
    client = pair.client
    client.send(1, commands.Queue.Purge(queue="log"))
    pair.pump()  # the owner's stream refuses it, as one here would
    (refused,) = client.methods()
    assert isinstance(refused, commands.Connection.Close) and refused.reply_code == 540
    assert "queue.purge" in refused.reply_text
    assert len(list(pair.queue.ready)) == 0 and pair.one.vhosts["/"].queues["log"]


def test_a_consumer_unblocked_while_deliveries_cross_gets_them_in_order() -> None:
    """Room frees while deliveries sent before the owner blocked the consumer are still on
    their way: they go back too, and the owner serves the consumer again only once all are
    back, so it gets every message in the queue's order."""
    pair = _sharing_a_global_qos(3, [b"m1", b"m2"])
    client = pair.client
    pair.publish(b"a", b"b", b"c", b"d")
    out = bytearray()
    pair.served.take(out)  # the owner sent a, b and c (3 per consumer), not read here yet
    reader = RecordReader()
    reader.feed(bytes(out))
    records = []
    while (record := reader.next_record()) is not None:
        records.append(record)
    assert len(records) == 3
    pair.remote.delivered(1, records[0])  # a: the last room
    pair.remote.delivered(1, records[1])  # b: none, back unsent (the owner blocks)
    client.send(1, commands.Basic.Ack(delivery_tag=1))  # m1: room (unblock asked)
    pair.remote.delivered(1, records[2])  # c: sent before the block, back too
    assert [body for _tag, body, _r in _deliveries(client)] == [b"a"]
    assert [entry.message.body for entry in pair.queue.ready] == [b"d"]
    pair.pump()
    assert [body for _tag, body, _r in _deliveries(client)] == [b"b"]
    for tag in (2, 3, 4):  # m2, a, b
        client.send(1, commands.Basic.Ack(delivery_tag=tag))
    pair.pump()
    assert [body for _tag, body, _r in _deliveries(client)] == [b"c", b"d"]
