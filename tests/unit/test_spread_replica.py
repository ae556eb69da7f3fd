"""A spread vhost without processes (amqpd/model/replica.py, replica_apply.py): the changes
one worker's topology methods describe, applied to another worker's vhost; routing there to
the stubs; the engine holding replies and confirms until the port decides them."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pytest
from pamqp import commands

from amqpd.engine.reply_to import remote_reply_queue
from amqpd.model.broker import Broker
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import (
    Change,
    ConsumingPort,
    Decision,
    RemoteQueue,
    remote_by_worker,
)
from amqpd.model.replica_apply import apply_change, snapshot
from amqpd.model.vhost import VirtualHost
from persistence.access import PolicyRecord
from tests.unit.engine_driver import Client


class Port:
    """A `ReplicaPort` that records what the engine asks of it; the test decides."""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.workers = 2
        self.rejoining = False
        self.changes: list[tuple[str, Change]] = []
        self.holds: list[Decision] = []
        self.forwarded: list[tuple[Message, dict[int, list[str]], Decision | None, bool]] = []
        self.local: list[tuple[Decision, bool]] = []

    @property
    def consuming(self) -> ConsumingPort | None:
        return None  # these tests consume only from queues of their own worker

    def changed(self, vhost: str, change: Change) -> None:
        self.changes.append((vhost, pickle.loads(pickle.dumps(change))))  # as the link does

    def hold(self, decision: Decision) -> None:
        self.holds.append(decision)

    def forward(
        self,
        vhost: str,
        message: Message,
        expiration_ms: int | None,
        promised: bool,
        targets: list[Queue],
        decision: Decision | None,
        local: bool,
    ) -> None:
        self.forwarded.append((message, remote_by_worker(targets), decision, local))

    def local_done(self, decision: Decision, ok: bool) -> None:
        self.local.append((decision, ok))

    def take_changes(self) -> list[Change]:
        changes = [change for _vhost, change in self.changes]
        self.changes.clear()
        return changes


def _spread_broker(worker: int) -> tuple[Broker, Port]:
    broker = Broker()
    port = Port(worker)
    broker.vhosts["/"].replica = port
    return broker, port


def _mirror(source: Port, target: VirtualHost) -> None:
    for change in source.take_changes():
        apply_change(target, change)


def test_another_workers_queue_becomes_a_stub_bound_like_the_queue() -> None:
    zero, port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    here = zero.vhosts["/"]
    here.declare_exchange("logs", "topic", False, True, False, False, {})
    queue = here.declare_queue("errors", False, True, False, False, {}, None)
    here.bind(here.get_exchange("logs"), queue, "*.error", {})
    _mirror(port0, one.vhosts["/"])

    there = one.vhosts["/"]
    stub = there.remote["errors"]
    assert isinstance(stub, RemoteQueue) and stub.worker == 0
    assert "errors" not in there.queues  # listings, limits and timers never see a stub
    message = Message("logs", "disk.error", b"\x04logs", b"\x0adisk.error", b"", b"x", False)
    assert there.route(there.get_exchange("logs"), message) == [stub]
    assert there.route(there.exchanges[""], _to_default("errors")) == [stub]

    # deleted on its owner: the stub and its binding go
    here.delete_queue(queue)
    _mirror(port0, there)
    assert "errors" not in there.remote
    assert there.route(there.get_exchange("logs"), message) == []


def test_a_snapshot_replaces_what_a_worker_owned() -> None:
    zero, port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    here, there = zero.vhosts["/"], one.vhosts["/"]
    here.declare_queue("kept", False, True, False, False, {}, None)
    here.declare_queue("gone", False, True, False, False, {}, None)
    _mirror(port0, there)
    assert set(there.remote) == {"kept", "gone"}
    # worker 0 restarted without "gone" (say, it was not durable): its snapshot says so
    here.delete_queue(here.queues["gone"])
    port0.take_changes()  # lost with the link
    apply_change(there, snapshot(here, 0))
    assert set(there.remote) == {"kept"}


def test_a_change_applied_here_is_not_sent_on() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    zero.vhosts["/"].declare_exchange("x", "fanout", False, True, False, False, {})
    _mirror(port0, one.vhosts["/"])
    assert "x" in one.vhosts["/"].exchanges
    assert port1.changes == []


def _to_default(queue: str) -> Message:
    raw = queue.encode()
    return Message("", queue, b"\x00", bytes([len(raw)]) + raw, b"", b"x", False)


def _client(broker: Broker) -> Client:
    client = Client(broker)
    client.handshake()
    client.open_channel()
    return client


def test_a_topology_reply_waits_until_the_other_workers_applied_it() -> None:
    zero, port0 = _spread_broker(0)
    client = _client(zero)
    client.send(1, commands.Queue.Declare(queue="orders", durable=True))
    assert client.methods() == []  # held
    assert [change[0] for change in port0.take_changes()] == ["queue"]
    port0.holds.pop().decided(True)
    (reply,) = client.methods()
    assert isinstance(reply, commands.Queue.DeclareOk) and reply.queue == "orders"


def test_a_confirm_waits_for_every_copy_and_returns_only_what_routed_nowhere() -> None:
    zero, port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    client = _client(zero)
    client.conn.recording = None  # pinned here (else its first publish moves it there)
    client.send(1, commands.Confirm.Select())
    assert isinstance(client.methods()[-1], commands.Confirm.SelectOk)

    client.feed(Client.encode_publish(1, "theirs", b"hello", mandatory=True, delivery_mode=2))
    assert client.methods() == []  # neither returned nor confirmed yet
    message, owners, decision, local = port0.forwarded.pop()
    assert (message.payload, owners, local) == (b"hello", {1: ["theirs"]}, False)
    assert decision is not None
    decision.decided(True)
    (ack,) = client.methods()
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 1

    client.feed(Client.encode_publish(1, "theirs", b"refused"))
    port0.forwarded.pop()[2].decided(False)  # type: ignore[union-attr]
    (nack,) = client.methods()
    assert isinstance(nack, commands.Basic.Nack) and nack.delivery_tag == 2


def test_a_pinned_connection_using_another_workers_queue_gets_540() -> None:
    zero, _port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    client = _client(zero)
    client.conn.recording = None  # pinned here (it published, say): it cannot move
    client.send(1, commands.Basic.Get(queue="theirs"))
    close: Any = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 540 and "lives on worker 1" in close.reply_text


def test_a_movable_connection_stops_at_the_frame_that_moves_it() -> None:
    zero, _port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    client = _client(zero)
    client.send(1, commands.Basic.Qos(prefetch_count=5))
    client.methods()
    recording = client.conn.recording
    assert recording is not None
    before = len(recording)
    get = commands.Basic.Get(queue="theirs")
    client.send(1, get, commands.Basic.Qos(prefetch_count=7))  # the rest goes along
    conn = client.conn
    assert (conn.move_to, conn.move_at, conn.should_close) == (1, before, True)
    assert client.methods() == []  # nothing answered here: worker 1 answers the get
    replayed = Client(one)
    replayed.conn.replaying = True
    replayed.feed(bytes(recording[: conn.move_at]))
    replayed.conn.replaying = False
    replayed.received()  # the client has these replies from worker 0
    replayed.feed(bytes(recording[conn.move_at :]))
    get_empty, qos_ok = replayed.methods()
    assert isinstance(get_empty, commands.Basic.GetEmpty)
    assert isinstance(qos_ok, commands.Basic.QosOk)


def test_a_publish_pins_the_connection() -> None:
    zero, _port0 = _spread_broker(0)
    client = _client(zero)
    assert client.conn.movable
    client.publish(1, "anywhere", b"x")
    assert not client.conn.movable


def test_a_balancing_locator_puts_a_new_queue_on_the_worker_with_fewest() -> None:
    zero, port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    here, there = zero.vhosts["/"], one.vhosts["/"]
    balanced = {"x-queue-leader-locator": "least-leaders"}
    first = here.declare_queue("b1", False, True, False, False, dict(balanced), None)  # tie
    second = here.declare_queue("b2", False, True, False, False, dict(balanced), None)
    third = here.declare_queue("b3", False, True, False, False, {}, None)  # client-local
    assert type(first) is Queue and type(third) is Queue
    assert isinstance(second, RemoteQueue) and second.worker == 1
    _mirror(port0, there)
    # the owner made the queue itself (durable: in its store), the others a stub
    assert set(there.queues) == {"b2"} and there.queues["b2"].durable
    assert set(there.remote) == {"b1", "b3"}
    # a policy can ask for it too (RabbitMQ's queue-master-locator for classic queues)
    zero.vhosts["/"].policies = [_policy("spread", "^p", {"queue-master-locator": "min-masters"})]
    assert isinstance(here.declare_queue("p1", False, True, False, False, {}, None), RemoteQueue)


def _policy(name: str, pattern: str, definition: dict[str, Any]) -> PolicyRecord:
    return PolicyRecord("/", name, pattern, "queues", 0, definition)


def test_a_first_publish_to_another_workers_queues_moves_the_connection_there() -> None:
    zero, _port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    client = _client(zero)
    client.send(1, commands.Confirm.Select())
    client.methods()
    recording = client.conn.recording
    assert recording is not None
    before = len(recording)
    client.publish(1, "theirs", b"goes along")
    assert (client.conn.move_to, client.conn.move_at) == (1, before)
    assert client.methods() == []  # not routed here: worker 1 does it


def test_a_direct_reply_to_address_names_its_worker() -> None:
    zero, _port0 = _spread_broker(0)
    client = _client(zero)
    client.send(1, commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True))
    (address,) = list(zero.reply_queues)
    assert address.startswith("amq.rabbitmq.reply-to.0.")
    here = zero.vhosts["/"]
    assert remote_reply_queue(here, address) == []  # this worker's own
    (stub,) = remote_reply_queue(here, "amq.rabbitmq.reply-to.1.abc")
    assert isinstance(stub, RemoteQueue) and stub.worker == 1
    for unknown in ("amq.rabbitmq.reply-to.7.abc", "amq.rabbitmq.reply-to.abc", "amq.x"):
        assert remote_reply_queue(here, unknown) == []


def test_a_tx_commit_ok_waits_for_the_copies_on_other_workers_in_order() -> None:
    zero, port0 = _spread_broker(0)
    one, _port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("theirs", False, True, False, False, {}, None)
    apply_change(zero.vhosts["/"], snapshot(one.vhosts["/"], 1))
    client = _client(zero)
    client.conn.recording = None  # pinned here: its publishes cross
    client.send(1, commands.Tx.Select())
    client.methods()
    client.feed(Client.encode_publish(1, "theirs", b"one", delivery_mode=2))
    client.send(1, commands.Tx.Commit())
    client.send(1, commands.Tx.Commit())  # nothing in it, but after the first
    assert client.methods() == []
    (_message, owners, decision, local) = port0.forwarded.pop()
    assert owners == {1: ["theirs"]} and decision is not None and not local
    decision.decided(True)
    assert [type(method) for method in client.methods()] == [commands.Tx.CommitOk] * 2

    client.feed(Client.encode_publish(1, "theirs", b"two", delivery_mode=2))
    client.send(1, commands.Tx.Commit())
    port0.forwarded.pop()[2].decided(False)  # type: ignore[union-attr]
    (close,) = client.methods()
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 541


def _declare_on(vhost: VirtualHost, name: str) -> Queue:
    return vhost.declare_queue(name, False, True, False, False, {}, None)


def test_a_queue_declared_on_two_workers_at_once_ends_as_the_lower_workers() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    two, _port2 = _spread_broker(2)
    v0, v1, v2 = zero.vhosts["/"], one.vhosts["/"], two.vhosts["/"]
    _declare_on(v0, "tasks")
    _declare_on(v1, "tasks")  # neither knew of the other's
    amq_direct = v1.get_exchange("amq.direct")
    v1.bind(amq_direct, v1.queues["tasks"], "tasks", {})
    from_zero, from_one = port0.take_changes(), port1.take_changes()
    for change in from_one:
        apply_change(v0, change)
    assert "tasks" in v0.queues and "tasks" not in v0.remote  # the lower worker keeps its own
    assert port0.changes == []
    for change in from_zero:
        apply_change(v1, change)
    assert "tasks" not in v1.queues  # unused here: given up
    assert v1.remote["tasks"].worker == 0
    routed = Message("amq.direct", "tasks", b"\x0aamq.direct", b"\x05tasks", b"", b"x", False)
    assert v1.route(amq_direct, routed) == [v1.remote["tasks"]]  # still bound: to the stub
    resent = port1.take_changes()  # worker 0's queue, sent on to the others
    assert [(change[0], change[1], change[2]) for change in resent] == [("queue", "tasks", 0)]
    # a third worker that got worker 0's change first and worker 1's last still ends right
    for change in [*from_zero, *from_one, *resent]:
        apply_change(v2, change)
    assert v2.remote["tasks"].worker == 0


def test_a_queue_used_before_the_other_declare_arrived_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    v0, v1 = zero.vhosts["/"], one.vhosts["/"]
    _declare_on(v0, "tasks")
    _declare_on(v1, "tasks").enqueue(_to_default("tasks"))
    port1.take_changes()
    with caplog.at_level(logging.WARNING, logger="amqpd.model.replica_apply"):
        _mirror(port0, v1)
    assert v1.queues["tasks"].message_count == 1
    assert "declared on workers 0 and 1 at the same moment" in caplog.text
    assert port1.changes == []


def test_the_lower_worker_refuses_a_differing_declaration_made_at_the_same_moment() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    v0, v1 = zero.vhosts["/"], one.vhosts["/"]
    _declare_on(v0, "tasks")  # durable
    v1.declare_queue("tasks", False, False, False, False, {}, None)  # transient
    v1.declare_queue("same", False, True, False, False, {}, None)
    _declare_on(v0, "same")
    from_zero, from_one = port0.take_changes(), port1.take_changes()
    assert [apply_change(v0, change) for change in from_one] == [True, False]
    assert v0.queues["tasks"].durable  # kept as it was
    # the higher worker refuses nothing of the lower's: it gives its own up
    assert [apply_change(v1, change) for change in from_zero] == [False, False]
    assert v1.remote["tasks"].durable and v1.remote["same"].worker == 0
    # an exclusive queue is never another connection's to redeclare (RabbitMQ: 405)
    v0.declare_queue("mine", False, False, False, False, {}, None)
    assert apply_change(v0, ("queue", "mine", 1, False, True, False, {}))
    # a snapshot's queues refuse nothing: nobody waits for its answer
    assert not apply_change(
        v0, ("snapshot", 1, [("queue", "tasks", 1, False, False, False, {})], False, [])
    )


@pytest.mark.parametrize("theirs_arrived", [False, True])
def test_a_refused_declaration_closes_the_channel_with_406(theirs_arrived: bool) -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    _declare_on(zero.vhosts["/"], "tasks")  # durable, on worker 0
    client = _client(one)
    client.send(1, commands.Queue.Declare(queue="tasks", durable=False))
    assert client.methods() == []  # held until worker 0 applied it
    if theirs_arrived:
        _mirror(port0, one.vhosts["/"])
    port1.holds.pop().decided(False)  # worker 0 refused it
    (close,) = client.methods()
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    if theirs_arrived:  # RabbitMQ's text, from worker 0's declaration
        assert close.reply_text == (
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'tasks' in vhost '/': "
            "received 'false' but current is 'true'"
        )
    else:
        assert close.reply_text == (
            "PRECONDITION_FAILED - queue 'tasks' in vhost '/' was declared differently by "
            "another connection at the same moment"
        )


def test_a_held_reply_of_anything_but_a_new_queue_is_sent_even_if_not_ok() -> None:
    one, port1 = _spread_broker(1)
    one.vhosts["/"].declare_queue("tasks", False, True, False, False, {}, None)
    client = _client(one)
    client.send(1, commands.Queue.Bind(queue="tasks", exchange="amq.direct", routing_key="k"))
    port1.holds.pop().decided(False)  # a worker went away: it gets the topology later
    (reply,) = client.methods()
    assert isinstance(reply, commands.Queue.BindOk)


def _exchange_on(vhost: VirtualHost, name: str, type_name: str) -> None:
    vhost.declare_exchange(name, type_name, False, True, False, False, {})


def test_of_two_differing_exchange_declarations_the_same_one_wins_everywhere() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    v0, v1 = zero.vhosts["/"], one.vhosts["/"]
    _exchange_on(v0, "events", "fanout")
    _exchange_on(v1, "events", "direct")  # neither knew of the other's
    queue = _declare_on(v0, "audit")
    v0.bind(v0.get_exchange("events"), queue, "k", {})
    from_zero, from_one = port0.take_changes(), port1.take_changes()
    # "direct" sorts before "fanout": worker 0 gives its exchange up, keeping its binding
    assert [apply_change(v0, change) for change in from_one] == [False]
    assert v0.get_exchange("events").type_name == "direct"
    assert v0.route(v0.get_exchange("events"), _to_exchange("events", "k")) == [queue]
    # worker 1 holds the winner: worker 0's declaration is refused (its declarer: 406)
    assert [apply_change(v1, change) for change in from_zero] == [True, False, False]
    assert v1.get_exchange("events").type_name == "direct"
    assert v1.route(v1.get_exchange("events"), _to_exchange("events", "k")) == [v1.remote["audit"]]
    # a third worker ends the same, in either order
    for order in (from_zero + from_one, from_one + from_zero):
        two, _port2 = _spread_broker(2)
        for change in order:
            apply_change(two.vhosts["/"], change)
        assert two.vhosts["/"].get_exchange("events").type_name == "direct"
    # a snapshot (perhaps older than this worker's state) never replaces an exchange
    stale = ("snapshot", 1, [("exchange", "events", "topic", True, False, False, {})], False, [])
    apply_change(v0, stale)
    assert v0.get_exchange("events").type_name == "direct"


def test_a_refused_exchange_declaration_closes_the_channel_with_406() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    _exchange_on(zero.vhosts["/"], "events", "direct")
    client = _client(one)
    client.send(1, commands.Exchange.Declare(exchange="events", exchange_type="fanout"))
    assert client.methods() == []  # held until worker 0 applied it
    _mirror(port0, one.vhosts["/"])  # worker 0's declaration wins here too
    port1.holds.pop().decided(False)  # and worker 0 refused this one
    (close,) = client.methods()
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 40, 10)
    assert close.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'events' in vhost '/': "
        "received 'fanout' but current is 'direct'"
    )


def _to_exchange(exchange: str, key: str) -> Message:
    raw, rk = exchange.encode(), key.encode()
    return Message(exchange, key, bytes([len(raw)]) + raw, bytes([len(rk)]) + rk, b"", b"x", False)


def _bindings(vhost: VirtualHost) -> set[tuple[str, str, str]]:
    return {
        (exchange.name, destination.name, key)
        for exchange in vhost.exchanges.values()
        if exchange.name and not exchange.name.startswith("amq.")
        for destination, key, _args in exchange.router.bindings()
        if isinstance(destination, Queue | Exchange)
    }


def test_a_rejoining_worker_takes_what_the_others_changed_while_it_was_down() -> None:
    """Worker 1 restarted after a crash: its store still has an exchange and bindings
    worker 0 removed meanwhile (those changes were lost with the link). Worker 0 keeps its
    view of them when worker 1's snapshot arrives, and worker 1 adopts it from worker 0's;
    its own queues stay its own, with the bindings worker 0 has to them."""
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    v0, v1 = zero.vhosts["/"], one.vhosts["/"]
    for name in ("gone", "kept", "added"):
        v0.declare_exchange(name, "direct", False, True, False, False, {})
    mine = v1.declare_queue("q1", False, True, False, False, {}, None)
    theirs = v0.declare_queue("q0", False, True, False, False, {}, None)
    _mirror(port0, v1)
    _mirror(port1, v0)
    for queue in (theirs, v0.remote["q1"]):
        v0.bind(v0.get_exchange("kept"), queue, "stays", {})
        v0.bind(v0.get_exchange("kept"), queue, "unbound", {})
    v0.bind(v0.get_exchange("kept"), v0.get_exchange("gone"), "e2e", {})
    _mirror(port0, v1)
    assert _bindings(v1) == _bindings(v0)

    # worker 1 is down: what worker 0 changes meanwhile never reaches it
    v0.delete_exchange("gone", False)
    for queue in (theirs, v0.remote["q1"]):
        v0.unbind(v0.get_exchange("kept"), queue, "unbound", {})
    v0.bind(v0.get_exchange("added"), v0.remote["q1"], "new", {})
    port0.take_changes()
    # ... and worker 1 comes back with what it had (its store), rejoining
    port1.rejoining = True
    apply_change(v0, snapshot(v1, 1, 0, rejoining=True))
    assert "gone" not in v0.exchanges
    assert v0.remote["q1"].worker == 1
    expected = {
        ("kept", "q0", "stays"),
        ("kept", "q1", "stays"),
        ("added", "q1", "new"),
    }
    assert _bindings(v0) == expected
    apply_change(v1, snapshot(v0, 0, 1))
    assert set(v1.exchanges) == set(v0.exchanges)
    assert _bindings(v1) == expected
    assert v1.queues["q1"] is mine  # its own queue, with what it holds
    assert port1.take_changes() == []  # adopted, not sent back


def test_workers_restarted_together_merge_as_at_a_nodes_start() -> None:
    zero, port0 = _spread_broker(0)
    one, port1 = _spread_broker(1)
    v0, v1 = zero.vhosts["/"], one.vhosts["/"]
    v0.declare_exchange("from-zero", "direct", False, True, False, False, {})
    v1.declare_exchange("from-one", "direct", False, True, False, False, {})
    port0.rejoining = port1.rejoining = True
    apply_change(v0, snapshot(v1, 1, 0, rejoining=True))
    apply_change(v1, snapshot(v0, 0, 1, rejoining=True))
    assert {"from-zero", "from-one"} <= set(v0.exchanges) & set(v1.exchanges)
