"""x-delayed-message exchanges (issue 27, part 1) driven through the sans-IO core: the
declaration checks with the plugin's reply texts, ``x-delay`` as the plugin reads it, the
one deadline structure (fires in due order, never early, asks the shell for the next
deadline), routing when the delay ends, mandatory and alternate exchanges, storage."""

from __future__ import annotations

import math
import random
from decimal import Decimal
from typing import Any

import pytest
from pamqp import commands, header

from amqpd.model.broker import Broker
from amqpd.model.delayed import FIRE_BUDGET, DelayedHub, DelayedMessages, due_of
from amqpd.model.message import Clock, Message
from amqpd.model.queue import Queue
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header
from exchanges.delayed import DelayedRouter, argument_problem, delay_of
from exchanges.registry import EXCHANGE_TYPES, create_router
from persistence.journal import Journal
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    Delivery,
    channel_error,
    connect,
    connection_error,
    declare,
    deliveries,
    publish_frames,
    rpc,
    split,
)

T0 = 1000.0
DELAYED = "x-delayed-message"
MISSING = "Invalid argument, 'x-delayed-type' must be an existing exchange type"
ITSELF = "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"


# -- exchanges/delayed.py: pure ---------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5000, 5000),
        (1, 1),
        (0, None),
        (-5, None),
        ("250", 250),  # a numeric string counts, as in the plugin
        (b"250", 250),
        (" 7 ", 7),
        ("abc", None),
        ("1.5", None),
        (2.9, 2),  # floats are truncated
        (Decimal("3.7"), 3),
        (float("nan"), None),
        (True, None),
        (None, None),
        ([1], None),
        (4294967295, 4294967295),
        (4294967296, None),  # over an Erlang timer's limit: the plugin routes at once
    ],
)
def test_delay_is_read_as_the_plugin_reads_it(value: object, expected: int | None) -> None:
    assert delay_of({"x-delay": value}) == expected


def test_no_header_means_no_delay() -> None:
    assert delay_of(None) is None
    assert delay_of({}) is None
    assert delay_of({"other": 5}) is None


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"x-delayed-type": "direct"}, (False, "")),
        ({"x-delayed-type": "topic"}, (False, "")),
        ({"x-delayed-type": "fanout"}, (False, "")),
        ({"x-delayed-type": "headers"}, (False, "")),
        ({}, (True, MISSING)),
        ({"x-delayed-type": 5}, (True, MISSING)),
        ({"x-delayed-type": "x-delayed-message"}, (True, ITSELF)),
        ({"x-delayed-type": "nope"}, (False, "unknown exchange type 'nope'")),
    ],
)  # fmt: skip
def test_declaration_arguments(arguments: dict[str, Any], expected: tuple[bool, str]) -> None:
    assert argument_problem(arguments, EXCHANGE_TYPES) == expected


@pytest.mark.parametrize("inner", ["direct", "topic", "fanout", "headers"])
def test_router_routes_as_its_inner_type(inner: str) -> None:
    router = create_router(DELAYED, {"x-delayed-type": inner})
    assert isinstance(router, DelayedRouter)
    assert router.type_name == DELAYED
    assert router.inner.type_name == inner
    assert router.uses_headers is (inner == "headers")
    plain = create_router(inner)
    for destination, key, args in (("a", "k.x", {"x-match": "any", "h": 1}), ("b", "k.*", {})):
        router.bind(destination, key, args)
        plain.bind(destination, key, args)
    assert list(router.bindings()) == list(plain.bindings())
    for key, headers in (("k.x", {"h": 1}), ("k.y", None), ("other", {"h": 2})):
        assert router.route(key, headers) == plain.route(key, headers)
    assert router.unbind("a", "k.x", {"x-match": "any", "h": 1}) is True
    assert router.unbind_all("b") == 1
    assert len(router) == 0


# -- the deadline structure ------------------------------------------------------------
def _message(body: bytes, delay: object) -> Message:
    props = commands.Basic.Properties(headers={"x-delay": delay}, delivery_mode=2)
    raw = _header(props, len(body))
    peek = peek_header(raw)
    return Message(
        "ex", "k", encode_shortstr("ex"), encode_shortstr("k"), raw, body, True,
        None, None, peek.headers_raw,
    )  # fmt: skip


def _header(props: commands.Basic.Properties, size: int) -> bytes:
    return header.ContentHeader(0, size, props).marshal()


class _Target:
    """What a delayed exchange routes to when a message fires: one recording queue."""

    def __init__(self, clock: Clock) -> None:
        self.queue = Queue("q", "/", False, None, False, {}, clock)
        self.fired: list[tuple[float, bytes]] = []

    def route(self, message: Message) -> list[Queue]:
        self.fired.append((self.queue.clock.now, message.payload))
        return [self.queue]


def _structure(now: float = T0) -> tuple[DelayedMessages, _Target, Clock]:
    clock = Clock(now)
    target = _Target(clock)
    return DelayedMessages("/", "ex", clock, target.route, DelayedHub()), target, clock


def _tick(delayed: DelayedMessages, clock: Clock) -> float:
    """The shell's part: tick at the deadline the core asked for."""
    now = clock.wake_at
    assert now != math.inf
    clock.wake_at = math.inf
    clock.now = now
    delayed.hub.tick(now)
    return now


def test_fires_in_due_order_never_early_and_asks_for_each_deadline() -> None:
    delayed, target, clock = _structure()
    rng = random.Random(7)
    delays = [rng.randint(1, 5000) for _ in range(2000)] + [300, 300, 300]
    for index, delay in enumerate(delays):
        delayed.hold(_message(str(index).encode(), delay), delay)
    assert delayed.count == len(delays)
    assert clock.wake_at == T0 + min(delays) / 1000  # the earliest, not a periodic tick
    while delayed.count:
        _tick(delayed, clock)
    expected = sorted(range(len(delays)), key=lambda i: (delays[i], i))  # ties: arrival
    assert [int(body) for _at, body in target.fired] == expected
    for at, body in target.fired:
        due = T0 + delays[int(body)] / 1000
        assert due <= at < due + 1e-6  # ticked exactly when due: never early, never later
    assert clock.wake_at == math.inf  # nothing left: no deadline
    assert not delayed.hub.pending


def test_an_earlier_message_moves_the_deadline_a_later_one_does_not() -> None:
    delayed, _target, clock = _structure()
    delayed.hold(_message(b"a", 500), 500)
    assert clock.wake_at == T0 + 0.5
    delayed.hold(_message(b"b", 900), 900)
    assert clock.wake_at == T0 + 0.5
    delayed.hold(_message(b"c", 20), 20)
    assert clock.wake_at == T0 + 0.02
    assert delayed.next_deadline() == T0 + 0.02


def test_a_due_backlog_fires_in_slices_so_clients_get_served() -> None:
    delayed, target, clock = _structure()
    for index in range(FIRE_BUDGET + 10):
        delayed.hold(_message(b"%d" % index, 10), 10)
    clock.wake_at = math.inf
    clock.now = T0 + 60  # everything is late (a restart)
    assert delayed.fire(clock.now) == FIRE_BUDGET
    assert clock.wake_at == clock.now  # asks for another tick at once
    assert delayed.fire(clock.now) == 10
    assert [int(b) for _at, b in target.fired] == list(range(FIRE_BUDGET + 10))


def test_keys_stay_unique_when_the_counter_wraps() -> None:
    delayed, target, clock = _structure()
    delayed.hold(_message(b"first", 100), 100)
    delayed._counter = 0  # the next counter value is the first one's again (1)
    delayed.hold(_message(b"second", 100), 100)
    assert delayed.count == 2
    clock.wake_at = math.inf
    clock.now = T0 + 1
    delayed.fire(clock.now)
    assert [b for _at, b in target.fired] == [b"first", b"second"]


def test_held_message_carries_the_negative_delay_as_the_plugin_leaves_it() -> None:
    delayed, _target, _clock = _structure()
    message = _message(b"x", 1500)
    delayed.hold(message, 1500)
    assert message.headers == {"x-delay": -1500}


def test_stored_messages_are_journaled_with_keys_in_due_order_and_paged() -> None:
    journal = Journal()
    clock = Clock(T0)
    target = _Target(clock)
    hub = DelayedHub()

    class Pager:
        def __init__(self) -> None:
            self.rows: dict[int, tuple[str, str, bytes, bytes]] = {}
            self.reads = 0

        def read_messages(
            self, queue: tuple[str, str], after: int, limit: int
        ) -> list[tuple[int, str, str, bytes, bytes]]:
            assert queue == ("/", "amq.delayed-ex")
            self.reads += 1
            keys = sorted(k for k in self.rows if k > after)[:limit]
            return [(k, *self.rows[k]) for k in keys]

    pager = Pager()
    delayed = DelayedMessages("/", "ex", clock, target.route, hub, journal, pager)
    count = 3000
    for index in range(count):
        delay = 10_000 - index  # arrives in reverse due order
        delayed.hold(_message(b"%d" % index, delay), delay)
    batch = journal.take_batch()
    assert batch is not None
    (rows,) = [rows for kind, rows in batch.ops if kind.name == "INSERT_MESSAGE"]
    assert len(rows) == count
    for row in rows:
        key = row[2]
        assert isinstance(key, int) and isinstance(row[6], bytes)
        pager.rows[key] = (str(row[3]), str(row[4]), bytes(row[5]), bytes(row[6]))  # type: ignore[arg-type]
        assert due_of(key) == pytest.approx(T0 + (10_000 - int(row[6])) / 1000)
    hub.batch_committed(batch.id)
    assert not delayed._hot and delayed.count == count  # > HOT_WINDOW held: keys only
    clock.now = T0 + 20
    gone = 0
    while delayed.count:
        delayed.fire(clock.now)
        deletes = journal.take_batch()  # the committer, between ticks
        assert deletes is not None
        gone += sum(len(rows) for kind, rows in deletes.ops if kind.name == "DELETE_MESSAGE")
    assert [int(b) for _at, b in target.fired] == list(range(count - 1, -1, -1))
    assert pager.reads == math.ceil(count / 1024)  # a page per 1024, read in due order
    assert gone == count


# -- through the engine ----------------------------------------------------------------
def _declare_delayed(client: Client, name: str = "dx", inner: str = "direct", **extra: Any) -> None:
    rpc(
        client,
        1,
        commands.Exchange.Declare(
            exchange=name,
            exchange_type=DELAYED,
            durable=True,
            arguments={"x-delayed-type": inner, **extra},
        ),
        commands.Exchange.DeclareOk,
    )


def _get_all(client: Client, queue: str) -> list[Delivery]:
    out: list[Delivery] = []
    while True:
        client.send(1, commands.Basic.Get(queue=queue, no_ack=True))
        frames = client.received()
        if isinstance(frames[0][1], commands.Basic.GetEmpty):
            return out
        out += deliveries(frames)


def _run_timers(broker: Broker) -> float:
    now = broker.clock.wake_at
    assert now != math.inf, "the core asked for no tick"
    broker.clock.wake_at = math.inf
    broker.tick(now)
    return now


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, f"PRECONDITION_FAILED - {MISSING}"),
        ({"x-delayed-type": "x-delayed-message"}, f"PRECONDITION_FAILED - {ITSELF}"),
    ],
)  # fmt: skip
def test_bad_delayed_type_is_a_channel_error(arguments: dict[str, Any], text: str) -> None:
    client = connect(Broker(now=T0), now=T0)
    client.send(
        1, commands.Exchange.Declare(exchange="dx", exchange_type=DELAYED, arguments=arguments)
    )
    assert channel_error(client, 1) == (406, text, 40, 10)


def test_unknown_delayed_type_is_a_connection_error() -> None:
    client = connect(Broker(now=T0), now=T0)
    client.send(
        1,
        commands.Exchange.Declare(
            exchange="dx", exchange_type=DELAYED, arguments={"x-delayed-type": "x-nope"}
        ),
    )
    assert connection_error(client) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'x-nope'",
        40,
        10,
    )


def test_delayed_message_is_routed_when_due_with_bindings_as_they_are_then() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    _declare_delayed(client, inner="topic")
    declare(client, 1, "early")
    declare(client, 1, "late")
    rpc(
        client,
        1,
        commands.Queue.Bind(queue="early", exchange="dx", routing_key="a.*"),
        commands.Queue.BindOk,
    )
    broker.clock.wake_at = math.inf
    client.send(1, *publish_frames("a.b", b"later", exchange="dx", headers={"x-delay": 200}))
    client.send(1, *publish_frames("a.b", b"now", exchange="dx"))
    client.send(1, *publish_frames("a.b", b"string", exchange="dx", headers={"x-delay": "100"}))
    assert [d.body for d in _get_all(client, "early")] == [b"now"]
    assert broker.clock.wake_at == T0 + 0.1
    rpc(
        client,
        1,
        commands.Queue.Bind(queue="late", exchange="dx", routing_key="#"),
        commands.Queue.BindOk,
    )
    assert _run_timers(broker) == T0 + 0.1
    assert _run_timers(broker) == T0 + 0.2
    early = _get_all(client, "early")
    assert [d.body for d in early] == [b"string", b"later"]
    assert [d.body for d in _get_all(client, "late")] == [b"string", b"later"]
    assert [d.properties.headers for d in early] == [{"x-delay": -100}, {"x-delay": -200}]
    assert broker.clock.wake_at == math.inf
    assert broker.vhosts["/"].exchanges["dx"].delayed is not None
    assert broker.vhosts["/"].exchanges["dx"].delayed.count == 0


def test_mandatory_is_checked_against_the_bindings_at_publish() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    _declare_delayed(client)
    client.send(
        1, *publish_frames("k", b"nobody", exchange="dx", mandatory=True, headers={"x-delay": 50})
    )
    (returned,), others = split(client.received())
    assert others == []
    assert isinstance(returned.method, commands.Basic.Return)
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert broker.vhosts["/"].exchanges["dx"].delayed.count == 0  # returned, not held
    declare(client, 1, "q")
    rpc(
        client,
        1,
        commands.Queue.Bind(queue="q", exchange="dx", routing_key="k"),
        commands.Queue.BindOk,
    )
    client.send(
        1, *publish_frames("k", b"bound", exchange="dx", mandatory=True, headers={"x-delay": 50})
    )
    assert client.received() == []  # routable now: held, not returned
    _run_timers(broker)
    assert [d.body for d in _get_all(client, "q")] == [b"bound"]


def test_alternate_exchange_gets_what_is_unroutable_when_due_not_at_publish() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    rpc(
        client,
        1,
        commands.Exchange.Declare(exchange="ae", exchange_type="fanout"),
        commands.Exchange.DeclareOk,
    )
    declare(client, 1, "unrouted")
    rpc(client, 1, commands.Queue.Bind(queue="unrouted", exchange="ae"), commands.Queue.BindOk)
    _declare_delayed(client, **{"alternate-exchange": "ae"})
    client.send(1, *publish_frames("k", b"m", exchange="dx", headers={"x-delay": 50}))
    assert _get_all(client, "unrouted") == []  # the plugin would put it there at once
    _run_timers(broker)
    assert [d.body for d in _get_all(client, "unrouted")] == [b"m"]


def test_confirm_of_a_stored_delayed_message_waits_for_its_batch() -> None:
    journal = Journal()
    broker = Broker(journal=journal, now=T0)
    client = connect(broker, now=T0)
    _declare_delayed(client)
    rpc(client, 1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    client.send(
        1, *publish_frames("k", b"p", exchange="dx", delivery_mode=2, headers={"x-delay": 50})
    )
    client.send(
        1, *publish_frames("k", b"t", exchange="dx", delivery_mode=1, headers={"x-delay": 50})
    )
    (ack,) = [m for _c, m in client.received()]
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 2  # transient: at once
    batch = journal.take_batch()
    assert batch is not None
    kinds = {kind.name: rows for kind, rows in batch.ops}
    assert [row[1] for row in kinds["PUT_QUEUE"]] == ["amq.delayed-dx"]
    assert [row[6] for row in kinds["INSERT_MESSAGE"]] == [b"p"]  # only the persistent one
    broker.batch_committed(batch.id)
    client.conn.flush_confirms()
    (ack,) = [m for _c, m in client.received()]
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 1


def test_deleting_the_exchange_drops_what_it_holds() -> None:
    journal = Journal()
    broker = Broker(journal=journal, now=T0)
    client = connect(broker, now=T0)
    _declare_delayed(client)
    client.send(
        1, *publish_frames("k", b"p", exchange="dx", delivery_mode=2, headers={"x-delay": 50})
    )
    delayed = broker.vhosts["/"].exchanges["dx"].delayed
    assert delayed is not None and delayed.count == 1
    rpc(client, 1, commands.Exchange.Delete(exchange="dx"), commands.Exchange.DeleteOk)
    assert delayed.count == 0 and not broker.delayed_hub.pending
    batch = journal.take_batch()
    assert batch is not None
    assert {kind.name for kind, _rows in batch.ops} >= {"DELETE_QUEUE", "DELETE_EXCHANGE"}


def test_a_stored_backlog_fires_no_faster_than_the_store_commits() -> None:
    journal = Journal()
    clock = Clock(T0)
    target = _Target(clock)
    delayed = DelayedMessages("/", "ex", clock, target.route, DelayedHub(), journal)
    for index in range(FIRE_BUDGET + 5):
        delayed.hold(_message(b"%d" % index, 10), 10)
    transient = _message(b"transient", 10)
    transient.persistent = False
    delayed.hold(transient, 20)
    assert journal.take_batch() is not None  # the inserts are stored
    now = T0 + 60  # all late
    assert delayed.fire(now) == FIRE_BUDGET
    assert delayed.fire(now) == 0  # the batch holding those deletes is not taken yet
    assert journal.take_batch() is not None  # the committer takes it
    assert delayed.fire(now) == 6  # the rest, and the transient one (never limited)
    assert [b for _at, b in target.fired][-1] == b"transient"
