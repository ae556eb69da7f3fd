"""RabbitMQ's reply codes and texts, driven through the sans-IO engine (no sockets, no sleeps).

Ported from tests/integration/test_errors.py, which keeps the real-client (pika) coverage:
here every case pins the exact reply code, reply text and class/method ids, that the error
closes exactly what it should (the channel for 3xx/4xx soft errors, the connection for 320
and 5xx), and that the broker goes on serving afterwards. Time (handshake timeout,
heartbeats, the close handshake) is explicit through `advance`.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from amqpd.engine.connection_open import State
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.wire.codec import PROTOCOL_HEADER
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    advance,
    assert_serves,
    channel_error,
    close_args,
    connect,
    connection_error,
    counts,
    declare,
    deliveries,
    publish_frames,
    rpc,
    tuned,
)

NO_QUEUE = "NOT_FOUND - no queue 'missing-queue' in vhost '/'"
NO_EXCHANGE = "NOT_FOUND - no exchange 'missing-exchange' in vhost '/'"
LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'. It "
    "could be originally declared on another connection or the exclusive property value does "
    "not match that of the original declaration."
)
START_OK = commands.Connection.StartOk(
    client_properties={"capabilities": {"authentication_failure_close": True}},
    mechanism="PLAIN",
    response="\0guest\0guest",
)


def raw_method(channel: int, class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    """A method frame with hand-made (possibly malformed) arguments."""
    payload = struct.pack(">HH", class_id, method_id) + arguments
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


# ---------------------------------------------------------------------------------------------
# Handshake: protocol header, authentication, vhost, handshake timeout
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x01\x01\x00\x0a",
        b"AMQP\x00\x00\x09\x00",
        b"AMQP\x00\x00\x08\x00",
        b"GET / HTTP/1.1\r\n",
    ],
    ids=["amqp-1.0", "amqp-0-9", "amqp-0-8", "http"],
)
def test_wrong_protocol_header_is_answered_with_ours_and_closed(header: bytes) -> None:
    broker = Broker()
    client = Client(broker)
    client.conn.receive_data(header)
    assert client.conn.data_to_send() == PROTOCOL_HEADER
    assert client.conn.state is State.CLOSED and client.conn.should_close
    assert_serves(broker)


def test_protocol_header_may_arrive_byte_by_byte() -> None:
    client = Client(Broker())
    for byte in PROTOCOL_HEADER[:-1]:
        client.conn.receive_data(bytes([byte]))
        assert client.received() == [] and not client.conn.should_close
    client.conn.receive_data(PROTOCOL_HEADER[-1:])
    assert [type(m) for m in client.methods()] == [commands.Connection.Start]


@pytest.mark.parametrize("user", ["guest", "nobody"])
def test_bad_login_is_403_and_names_the_mechanism(user: str) -> None:
    broker = Broker()
    client = Client(broker)
    client.conn.receive_data(PROTOCOL_HEADER)
    client.received()
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN",
            response=f"\0{user}\0wrong",
        ),
    )
    assert connection_error(client) == (
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile.",
        10,
        11,
    )
    assert_serves(broker)


def test_unknown_vhost_is_530_not_allowed() -> None:
    broker = Broker()
    client = Client(broker)
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(0, START_OK)
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    client.received()
    client.send(0, commands.Connection.Open(virtual_host="no-such-vhost"))
    assert connection_error(client) == (
        530,
        "NOT_ALLOWED - vhost 'no-such-vhost' not found",
        10,
        40,
    )
    assert_serves(broker)


@pytest.mark.parametrize("stage", ["nothing-sent", "after-header", "after-start-ok"])
def test_stalled_handshake_is_dropped_silently_after_handshake_timeout(stage: str) -> None:
    broker = Broker(BrokerConfig(handshake_timeout=10.0))
    client = Client(broker, now=100.0)
    if stage != "nothing-sent":
        client.conn.receive_data(PROTOCOL_HEADER)
    if stage == "after-start-ok":
        client.send(0, START_OK)
    greeting = [type(m) for m in client.methods()]
    assert (
        greeting
        == {
            "nothing-sent": [],
            "after-header": [commands.Connection.Start],
            "after-start-ok": [commands.Connection.Start, commands.Connection.Tune],
        }[stage]
    )
    advance(broker, 109.9, client)
    assert not client.conn.should_close
    advance(broker, 110.0, client)
    assert client.conn.should_close and client.conn.state is State.CLOSED
    assert client.received() == []  # dropped without a Connection.Close, as RabbitMQ does
    assert_serves(broker)


# ---------------------------------------------------------------------------------------------
# Heartbeats
# ---------------------------------------------------------------------------------------------
def test_silent_client_is_dropped_after_two_missed_heartbeats() -> None:
    broker = Broker()
    client = tuned(broker, heartbeat=1)
    advance(broker, 0.0, client)
    sent = []
    for step in range(1, 9):  # 0.25 s steps up to 2.0 s: heartbeats, no drop
        advance(broker, step / 4, client)
        sent += client.received()
        assert not client.conn.should_close, step
    assert len(sent) >= 2 and all(
        channel == 0 and isinstance(value, Heartbeat) for channel, value in sent
    ), sent
    advance(broker, 2.25, client)  # more than two intervals without a byte from the client
    assert client.conn.should_close and client.conn.state is State.CLOSED
    assert [v for _c, v in client.received() if not isinstance(v, Heartbeat)] == []
    assert_serves(broker)


def test_a_client_that_answers_heartbeats_stays_connected() -> None:
    broker = Broker()
    client = tuned(broker, heartbeat=1)
    sent = []
    for step in range(80):  # 20 s in 0.25 s steps, the client sends a heartbeat every 0.5 s
        advance(broker, step / 4, client)
        sent += client.received()
        if step % 2 == 0:
            client.conn.receive_data(frame.marshal(Heartbeat(), 0))
    assert len(sent) >= 20 and all(isinstance(value, Heartbeat) for _c, value in sent)
    assert client.conn.state is State.OPEN
    client.open_channel(1)


def test_heartbeats_are_disabled_when_the_client_says_zero() -> None:
    broker = Broker(BrokerConfig(heartbeat=1))
    client = tuned(broker, heartbeat=0)
    for now in (0.0, 1.0, 10.0, 1000.0):
        advance(broker, now, client)
    assert client.received() == [] and client.conn.state is State.OPEN
    client.open_channel(1)


# ---------------------------------------------------------------------------------------------
# Channel errors, table-driven: setup on channel 1, then the action on channel 1
# ---------------------------------------------------------------------------------------------
Case = tuple[list[Any], list[Any], tuple[int, str, int, int]]

CHANNEL_ERRORS: dict[str, Case] = {
    # 404 NOT_FOUND
    "passive-declare-queue": (
        [],
        [commands.Queue.Declare(queue="missing-queue", passive=True)],
        (404, NO_QUEUE, 50, 10),
    ),
    "passive-declare-exchange": (
        [],
        [commands.Exchange.Declare(exchange="missing-exchange", passive=True)],
        (404, NO_EXCHANGE, 40, 10),
    ),
    "publish-to-missing-exchange": (
        [],
        list(publish_frames("rk", b"body", exchange="missing-exchange")),
        (404, NO_EXCHANGE, 60, 40),
    ),
    "consume-missing-queue": (
        [],
        [commands.Basic.Consume(queue="missing-queue")],
        (404, NO_QUEUE, 60, 20),
    ),
    "get-missing-queue": ([], [commands.Basic.Get(queue="missing-queue")], (404, NO_QUEUE, 60, 70)),
    "bind-missing-queue": (
        [],
        [commands.Queue.Bind(queue="missing-queue", exchange="amq.direct", routing_key="rk")],
        (404, NO_QUEUE, 50, 20),
    ),
    "bind-missing-exchange": (
        [commands.Queue.Declare(queue="present-queue")],
        [commands.Queue.Bind(queue="present-queue", exchange="missing-exchange", routing_key="rk")],
        (404, NO_EXCHANGE, 50, 20),
    ),
    "purge-missing-queue": (
        [],
        [commands.Queue.Purge(queue="missing-queue")],
        (404, NO_QUEUE, 50, 30),
    ),
    # 405 RESOURCE_LOCKED: exclusivity is checked strictly and first (assert_equivalence)
    "redeclare-exclusive-as-shared": (
        [commands.Queue.Declare(queue="flag-queue", exclusive=True)],
        [commands.Queue.Declare(queue="flag-queue", exclusive=False, durable=True)],
        (405, LOCKED.format("flag-queue"), 50, 10),
    ),
    "redeclare-shared-as-exclusive": (
        [commands.Queue.Declare(queue="flag-queue", exclusive=False)],
        [commands.Queue.Declare(queue="flag-queue", exclusive=True, durable=True)],
        (405, LOCKED.format("flag-queue"), 50, 10),
    ),
    # 406 PRECONDITION_FAILED
    "queue-durable": (
        [commands.Queue.Declare(queue="flagged-queue", durable=False)],
        [commands.Queue.Declare(queue="flagged-queue", durable=True)],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'flagged-queue' in "
            "vhost '/': received 'true' but current is 'false'",
            50,
            10,
        ),
    ),
    "queue-auto-delete": (
        [commands.Queue.Declare(queue="flagged-queue", auto_delete=False)],
        [commands.Queue.Declare(queue="flagged-queue", auto_delete=True)],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue 'flagged-queue' in "
            "vhost '/': received 'true' but current is 'false'",
            50,
            10,
        ),
    ),
    "queue-argument": (
        [commands.Queue.Declare(queue="flagged-queue", arguments={"x-max-length": 10})],
        [commands.Queue.Declare(queue="flagged-queue", arguments={"x-max-length": 20})],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'flagged-queue' in "
            "vhost '/': received '20' but current is '10'",
            50,
            10,
        ),
    ),
    "exchange-type": (
        [commands.Exchange.Declare(exchange="flagged-exchange", exchange_type="direct")],
        [commands.Exchange.Declare(exchange="flagged-exchange", exchange_type="fanout")],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'flagged-exchange' in "
            "vhost '/': received 'fanout' but current is 'direct'",
            40,
            10,
        ),
    ),
    "exchange-durable": (
        [commands.Exchange.Declare(exchange="flagged-exchange", durable=False)],
        [commands.Exchange.Declare(exchange="flagged-exchange", durable=True)],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'flagged-exchange' in "
            "vhost '/': received 'true' but current is 'false'",
            40,
            10,
        ),
    ),
    "exchange-internal": (
        [commands.Exchange.Declare(exchange="flagged-exchange", internal=False)],
        [commands.Exchange.Declare(exchange="flagged-exchange", internal=True)],
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'internal' for exchange 'flagged-exchange' "
            "in vhost '/': received 'true' but current is 'false'",
            40,
            10,
        ),
    ),
    "delete-if-empty": (
        [commands.Queue.Declare(queue="full-queue"), *publish_frames("full-queue", b"m")],
        [commands.Queue.Delete(queue="full-queue", if_empty=True)],
        (406, "PRECONDITION_FAILED - queue 'full-queue' in vhost '/' is not empty", 50, 40),
    ),
    "exchange-delete-if-unused": (
        [
            commands.Exchange.Declare(exchange="bound-exchange", exchange_type="direct"),
            commands.Queue.Declare(queue="bound-queue"),
            commands.Queue.Bind(queue="bound-queue", exchange="bound-exchange", routing_key="rk"),
        ],
        [commands.Exchange.Delete(exchange="bound-exchange", if_unused=True)],
        (406, "PRECONDITION_FAILED - exchange 'bound-exchange' in vhost '/' in use", 40, 20),
    ),
    "ack-unknown-tag": (
        [],
        [commands.Basic.Ack(delivery_tag=7)],
        (406, "PRECONDITION_FAILED - unknown delivery tag 7", 60, 80),
    ),
    "confirm-select-on-tx": (
        [commands.Tx.Select()],
        [commands.Confirm.Select()],
        (406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode", 85, 10),
    ),
    "tx-select-on-confirm": (
        [commands.Confirm.Select()],
        [commands.Tx.Select()],
        (406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode", 90, 10),
    ),
    "tx-commit-without-select": (
        [],
        [commands.Tx.Commit()],
        (406, "PRECONDITION_FAILED - channel is not transactional", 90, 20),
    ),
    "tx-rollback-without-select": (
        [],
        [commands.Tx.Rollback()],
        (406, "PRECONDITION_FAILED - channel is not transactional", 90, 30),
    ),
    # 403 ACCESS_REFUSED
    "declare-queue-amq-prefix": (
        [],
        [commands.Queue.Declare(queue="amq.mine")],
        (403, "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'", 50, 10),
    ),
    "declare-exchange-amq-prefix": (
        [],
        [commands.Exchange.Declare(exchange="amq.mine", exchange_type="direct")],
        (
            403,
            "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'",
            40,
            10,
        ),
    ),
    "publish-to-internal-exchange": (
        [commands.Exchange.Declare(exchange="internal-exchange", internal=True)],
        list(publish_frames("", b"m", exchange="internal-exchange")),
        (
            403,
            "ACCESS_REFUSED - cannot publish to internal exchange 'internal-exchange' in vhost '/'",
            60,
            40,
        ),
    ),
    "bind-to-default-exchange": (
        [commands.Queue.Declare(queue="bind-queue")],
        [commands.Queue.Bind(queue="bind-queue", exchange="", routing_key="rk")],
        (403, "ACCESS_REFUSED - operation not permitted on the default exchange", 50, 20),
    ),
    "unbind-from-default-exchange": (
        [commands.Queue.Declare(queue="bind-queue")],
        [commands.Queue.Unbind(queue="bind-queue", exchange="", routing_key="rk")],
        (403, "ACCESS_REFUSED - operation not permitted on the default exchange", 50, 50),
    ),
    "unbind-missing-queue-from-default-exchange": (
        [],
        [commands.Queue.Unbind(queue="missing-queue", exchange="", routing_key="rk")],
        (403, "ACCESS_REFUSED - operation not permitted on the default exchange", 50, 50),
    ),
    # 540 would close the connection: see below
}


@pytest.mark.parametrize(
    ("setup", "action", "expected"), CHANNEL_ERRORS.values(), ids=CHANNEL_ERRORS
)
def test_channel_errors(setup: list[Any], action: list[Any], expected: tuple[Any, ...]) -> None:
    broker = Broker()
    client = connect(broker, 1, 2)
    client.send(1, *setup)
    assert not any(
        isinstance(v, (commands.Channel.Close, commands.Connection.Close))
        for _c, v in client.received()
    )
    client.send(1, *action)
    assert channel_error(client, 1) == expected
    # only channel 1 closed: channel 2 and the connection kept going
    rpc(client, 2, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)
    assert client.conn.state is State.OPEN


@pytest.mark.parametrize(
    ("queue", "exchange"),
    [
        ("missing-queue", "amq.direct"),
        ("present-queue", "missing-exchange"),
        ("present-queue", "amq.direct"),
    ],
    ids=["missing-queue", "missing-exchange", "missing-binding"],
)
def test_queue_unbind_of_missing_objects_is_not_an_error(queue: str, exchange: str) -> None:
    """RabbitMQ 3.x (rabbit_binding:remove, absent_errs_only): Unbind-Ok."""
    client = connect(Broker())
    declare(client, 1, "present-queue")
    unbind = commands.Queue.Unbind(queue=queue, exchange=exchange, routing_key="rk")
    rpc(client, 1, unbind, commands.Queue.UnbindOk)


@pytest.mark.parametrize(
    ("destination", "source"),
    [("missing-exchange", "amq.direct"), ("amq.fanout", "missing-exchange")],
    ids=["missing-destination", "missing-source"],
)
def test_exchange_unbind_of_missing_exchanges_is_not_an_error(
    destination: str, source: str
) -> None:
    client = connect(Broker())
    unbind = commands.Exchange.Unbind(destination=destination, source=source, routing_key="rk")
    rpc(client, 1, unbind, commands.Exchange.UnbindOk)


@pytest.mark.parametrize(
    ("action", "class_method"),
    [
        (commands.Queue.Declare(queue="locked-queue", exclusive=True), (50, 10)),
        (commands.Queue.Declare(queue="locked-queue", passive=True), (50, 10)),
        (commands.Basic.Consume(queue="locked-queue"), (60, 20)),
        (commands.Basic.Get(queue="locked-queue"), (60, 70)),
        (commands.Queue.Purge(queue="locked-queue"), (50, 30)),
        (commands.Queue.Delete(queue="locked-queue"), (50, 40)),
        (commands.Queue.Bind(queue="locked-queue", exchange="amq.direct"), (50, 20)),
    ],
    ids=["declare", "passive-declare", "consume", "get", "purge", "delete", "bind"],
)
def test_exclusive_queue_is_locked_to_other_connections(
    action: Any, class_method: tuple[int, int]
) -> None:
    broker = Broker()
    owner = connect(broker)
    declare(owner, 1, "locked-queue", exclusive=True)
    other = connect(broker)
    other.send(1, action)
    assert channel_error(other, 1) == (405, LOCKED.format("locked-queue"), *class_method)
    assert counts(owner, 1, "locked-queue") == (0, 0)  # the owner still has its queue


def test_queue_delete_if_unused_with_a_consumer_is_406() -> None:
    client = connect(Broker(), 1, 2)
    declare(client, 1, "busy-queue")
    rpc(client, 2, commands.Basic.Consume(queue="busy-queue"), commands.Basic.ConsumeOk)
    client.send(1, commands.Queue.Delete(queue="busy-queue", if_unused=True))
    assert channel_error(client, 1) == (
        406,
        "PRECONDITION_FAILED - queue 'busy-queue' in vhost '/' in use",
        50,
        40,
    )
    assert counts(client, 1, "busy-queue") == (0, 1)  # still there, still consumed


def test_a_second_ack_of_the_same_tag_is_406_and_the_first_counted() -> None:
    client = connect(Broker())
    declare(client, 1, "ack-queue")
    client.send(1, *publish_frames("ack-queue", b"m"), commands.Basic.Get(queue="ack-queue"))
    [message] = deliveries(client.received())
    tag = message.method.delivery_tag
    client.send(1, commands.Basic.Ack(delivery_tag=tag))
    assert client.received() == []
    client.send(1, commands.Basic.Ack(delivery_tag=tag))
    assert channel_error(client, 1) == (
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {tag}",
        60,
        80,
    )
    assert counts(client, 1, "ack-queue") == (0, 0)


@pytest.mark.parametrize(
    ("first", "second"),
    [({}, {"exclusive": True}), ({"exclusive": True}, {})],
    ids=["shared-then-exclusive", "exclusive-then-shared"],
)
def test_exclusive_consumer_conflicts_are_403(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    client = connect(Broker(), 1, 2)
    declare(client, 1, "owned-queue")
    rpc(client, 1, commands.Basic.Consume(queue="owned-queue", **first), commands.Basic.ConsumeOk)
    client.send(2, commands.Basic.Consume(queue="owned-queue", **second))
    assert channel_error(client, 2) == (
        403,
        "ACCESS_REFUSED - queue 'owned-queue' in vhost '/' in exclusive use",
        60,
        20,
    )
    assert counts(client, 1, "owned-queue") == (0, 1)


def test_message_larger_than_max_message_size_is_406_and_the_limit_itself_is_fine() -> None:
    client = connect(Broker(BrokerConfig(max_message_size=1000)), 1, 2)
    declare(client, 1, "size-queue")
    client.send(1, *publish_frames("size-queue", b"x" * 1001))
    assert channel_error(client, 1) == (
        406,
        "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000",
        60,
        40,
    )
    client.send(2, *publish_frames("size-queue", b"y" * 1000))
    client.send(2, commands.Basic.Get(queue="size-queue", no_ack=True))
    [message] = deliveries(client.received())
    assert message.body == b"y" * 1000 and message.method.message_count == 0


def test_oversized_message_body_frames_are_ignored_after_the_406() -> None:
    """The header announces too big a body: the channel closes at once and the body frames
    that follow are dropped, not taken as a protocol error on the connection."""
    client = connect(Broker(BrokerConfig(max_message_size=1000)), 1, 2)
    client.send(1, *publish_frames("anything", b"z" * 5000))
    assert channel_error(client, 1) == (
        406,
        "PRECONDITION_FAILED - message size 5000 is larger than configured max size 1000",
        60,
        40,
    )
    rpc(client, 2, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


# ---------------------------------------------------------------------------------------------
# Connection errors (320, 5xx): the whole connection closes, the broker serves others
# ---------------------------------------------------------------------------------------------
CONNECTION_ERRORS: dict[str, tuple[list[Any], bytes, tuple[int, str, int, int]]] = {
    # 530 NOT_ALLOWED
    "duplicate-consumer-tag": (
        [
            commands.Queue.Declare(queue="tag-queue"),
            commands.Basic.Consume(queue="tag-queue", consumer_tag="my-tag"),
        ],
        frame.marshal(commands.Basic.Consume(queue="tag-queue", consumer_tag="my-tag"), 1),
        (530, "NOT_ALLOWED - attempt to reuse consumer tag 'my-tag'", 60, 20),
    ),
    # 540 NOT_IMPLEMENTED
    "publish-immediate": (
        [],
        b"".join(frame.marshal(f, 1) for f in publish_frames("q", b"now!", immediate=True)),
        (540, "NOT_IMPLEMENTED - immediate=true", 60, 40),
    ),
    "recover-without-requeue": (
        [],
        frame.marshal(commands.Basic.Recover(requeue=False), 1),
        (540, "NOT_IMPLEMENTED - requeue=false", 60, 110),
    ),
    # 501 FRAME_ERROR
    "bad-frame-end": (
        [],
        frame.marshal(commands.Channel.Open(), 2)[:-1] + b"\x00",
        (501, "FRAME_ERROR - invalid frame end octet 0x00", 0, 0),
    ),
    "unknown-frame-type": (
        [],
        b"\x09\x00\x00\x00\x00\x00\x00\xce",
        (501, "FRAME_ERROR - unknown frame type 9", 0, 0),
    ),
    # 502 SYNTAX_ERROR
    "queue.declare-name-past-the-frame": (
        [],
        raw_method(1, 50, 10, b"\x00\x00\x20short"),
        (502, "SYNTAX_ERROR - cannot decode arguments of queue.declare", 50, 10),
    ),
    "basic.publish-routing-key-missing": (
        [],
        raw_method(1, 60, 40, b"\x00\x00\x05amq.d"),
        (502, "SYNTAX_ERROR - cannot decode basic.publish arguments", 60, 40),
    ),
    "exchange.declare-arguments-missing": (
        [],
        raw_method(1, 40, 10, b"\x00\x00"),
        (502, "SYNTAX_ERROR - cannot decode arguments of exchange.declare", 40, 10),
    ),
    # 503 COMMAND_INVALID
    "unknown-exchange-type": (
        [],
        frame.marshal(
            commands.Exchange.Declare(exchange="typed-exchange", exchange_type="no-such-type"), 1
        ),
        (503, "COMMAND_INVALID - unknown exchange type 'no-such-type'", 40, 10),
    ),
    "unknown-method-on-channel-1": (
        [],
        raw_method(1, 60, 999),
        (503, "COMMAND_INVALID - unknown method 60.999", 60, 999),
    ),
    "unknown-method-on-channel-0": (
        [],
        raw_method(0, 60, 999),
        (503, "COMMAND_INVALID - unknown method 60.999", 0, 0),
    ),
    # 504 CHANNEL_ERROR
    "method-on-unopened-channel": (
        [],
        frame.marshal(commands.Basic.Qos(prefetch_count=1), 3),
        (504, "CHANNEL_ERROR - expected 'channel.open' on channel 3", 60, 10),
    ),
    "second-channel-open": (
        [],
        frame.marshal(commands.Channel.Open(), 1),
        (504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10),
    ),
    "connection.open-when-open": (
        [],
        frame.marshal(commands.Connection.Open(virtual_host="/"), 0),
        (
            504,
            "CHANNEL_ERROR - unexpected method connection.open in connection state open",
            10,
            40,
        ),
    ),
    "tune-ok-when-open": (
        [],
        frame.marshal(commands.Connection.TuneOk(channel_max=10, frame_max=4096, heartbeat=0), 0),
        (
            504,
            "CHANNEL_ERROR - unexpected method connection.tuneok in connection state open",
            10,
            31,
        ),
    ),
    "start-ok-when-open": (
        [],
        frame.marshal(START_OK, 0),
        (
            504,
            "CHANNEL_ERROR - unexpected method connection.startok in connection state open",
            10,
            11,
        ),
    ),
    # 505 UNEXPECTED_FRAME
    "body-without-publish": (
        [],
        frame.marshal(ContentBody(b"orphan"), 1),
        (505, "UNEXPECTED_FRAME - unexpected content body frame", 60, 40),
    ),
    "header-without-publish": (
        [],
        frame.marshal(ContentHeader(0, 3, commands.Basic.Properties()), 1),
        (505, "UNEXPECTED_FRAME - unexpected content header frame", 60, 40),
    ),
    "method-between-publish-and-header": (
        [],
        b"".join(
            frame.marshal(f, 1)
            for f in (
                commands.Basic.Publish(exchange="", routing_key="q"),
                commands.Queue.Declare(queue="q"),
            )
        ),
        (
            505,
            "UNEXPECTED_FRAME - expected content header for class 60, got method frame 50.10 "
            "instead",
            50,
            10,
        ),
    ),
    "header-on-channel-0": (
        [],
        frame.marshal(ContentHeader(0, 3, commands.Basic.Properties()), 0),
        (505, "UNEXPECTED_FRAME - content frame on channel 0", 0, 0),
    ),
    "body-on-channel-0": (
        [],
        frame.marshal(ContentBody(b"abc"), 0),
        (505, "UNEXPECTED_FRAME - content frame on channel 0", 0, 0),
    ),
    "header-on-unopened-channel": (
        [],
        frame.marshal(ContentHeader(0, 3, commands.Basic.Properties()), 7),
        (505, "UNEXPECTED_FRAME - content frame on unopened channel 7", 0, 0),
    ),
    "body-on-unopened-channel": (
        [],
        frame.marshal(ContentBody(b"abc"), 7),
        (505, "UNEXPECTED_FRAME - content frame on unopened channel 7", 0, 0),
    ),
    "heartbeat-on-channel-1": (
        [],
        b"\x08\x00\x01\x00\x00\x00\x00\xce",
        (505, "UNEXPECTED_FRAME - heartbeat frame on channel 1", 0, 0),
    ),
}


@pytest.mark.parametrize(
    ("setup", "data", "expected"), CONNECTION_ERRORS.values(), ids=CONNECTION_ERRORS
)
def test_connection_errors(setup: list[Any], data: bytes, expected: tuple[Any, ...]) -> None:
    broker = Broker()
    client = connect(broker)
    bystander = connect(broker)
    declare(bystander, 1, "bystander-queue")
    client.send(1, *setup)
    client.received()
    client.conn.receive_data(data)
    if expected[0] == 501:  # the stream is out of sync: not even a Close-Ok is parsed
        assert connection_error(client, answer=False) == expected
        advance(broker, 0.0, client)
        advance(broker, 10.0, client)  # the close handshake times out
    else:
        assert connection_error(client) == expected
    assert client.conn.state is State.CLOSED and client.conn.should_close
    # the other connection is untouched, and new ones are served
    bystander.send(1, *publish_frames("bystander-queue", b"fine"))
    assert counts(bystander, 1, "bystander-queue") == (1, 0)
    assert_serves(broker)


def test_method_between_header_and_body_is_505() -> None:
    client = connect(Broker())
    publish, content, _body = publish_frames("q", b"abc")
    client.send(1, publish, content, commands.Basic.Qos(prefetch_count=1))
    code, text, *_ids = connection_error(client)
    assert code == 505 and text.startswith("UNEXPECTED_FRAME - expected content ")


def test_channel_max_limits_open_channels_not_channel_numbers() -> None:
    """rabbit_reader:create_channel: aiormq opens channel 65535 with channel_max 2047; what
    is limited is how many channels are open at once (closing ones count)."""
    broker = Broker()
    client = tuned(broker, channel_max=3)
    client.open_channel(65535)
    client.open_channel(1000)
    client.send(
        1000, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert [type(m) for m in client.methods()] == [commands.Channel.CloseOk]
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="missing", passive=True))  # 404: closing
    assert [type(m) for m in client.methods()] == [commands.Channel.Close]
    client.open_channel(7)
    client.send(9, commands.Channel.Open())  # 65535, 7 and the closing 1 are open: 3
    assert connection_error(client) == (
        530,
        "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)",
        0,
        0,
    )
    assert_serves(broker)


def test_channel_max_above_the_server_limit_is_530() -> None:
    broker = Broker(BrokerConfig(channel_max=10))
    client = Client(broker)
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(0, START_OK)
    tune = client.methods()[-1]
    assert isinstance(tune, commands.Connection.Tune) and tune.channel_max == 10
    client.send(0, commands.Connection.TuneOk(channel_max=11, frame_max=131072, heartbeat=0))
    assert connection_error(client) == (
        530,
        "NOT_ALLOWED - channel_max=11 > 10 max channels",
        10,
        31,
    )


def test_method_out_of_handshake_order_is_504() -> None:
    client = Client(Broker())
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(0, START_OK)
    client.received()
    client.send(0, commands.Connection.Open(virtual_host="/"))  # Tune-Ok skipped
    assert connection_error(client) == (
        504,
        "CHANNEL_ERROR - unexpected method connection.open in connection state await-tune-ok",
        10,
        40,
    )


def test_channel_frame_before_connection_open_is_505() -> None:
    client = Client(Broker())
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(0, START_OK)
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    client.received()
    client.send(1, commands.Channel.Open())  # Connection.Open skipped
    assert connection_error(client) == (
        505,
        "UNEXPECTED_FRAME - method frame on channel 1 before connection.open",
        0,
        0,
    )


def test_oversized_frame_is_501_before_its_payload_arrives() -> None:
    broker = Broker()
    client = tuned(broker, frame_max=4096)
    client.open_channel(1)
    # only the 7-byte header of a 10000-byte body frame: the broker must not wait for more
    client.conn.receive_data(struct.pack(">BHI", 3, 1, 10000))
    assert connection_error(client, answer=False) == (
        501,
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,10000,4088}",
        0,
        0,
    )
    assert_serves(broker)


def test_a_frame_whose_payload_is_frame_max_is_accepted() -> None:
    """rabbit_reader's FRAME_SIZE_FUDGE: rabbitpy sends body frames of frame_max payload
    bytes (frame_max + 8 in all); one byte more is 501."""
    broker = Broker()
    client = tuned(broker, frame_max=4096)
    client.open_channel(1)
    declare(client, 1, "fudge")
    body = bytes(range(256)) * 16  # 4096 bytes in one body frame
    publish, content = publish_frames("fudge", body)[:2]
    client.send(1, publish, content)
    client.feed(struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce")
    client.send(1, commands.Basic.Get(queue="fudge", no_ack=True))
    frames = client.received()
    [message] = deliveries(frames)
    assert message.body == body
    # outgoing frames stay within frame_max: 4088-byte body chunks
    assert all(len(part.value) <= 4096 - 8 for _c, part in frames if isinstance(part, ContentBody))
    client.feed(struct.pack(">BHI", 3, 1, 4097))
    code, text, *_ = connection_error(client, answer=False)
    assert (code, text) == (
        501,
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}",
    )


def test_before_tuning_frames_are_limited_to_frame_min_size() -> None:
    """rabbit_reader: frame_max is frame_min_size (4096) until Tune-Ok, so a 10 KB Start-Ok
    is a frame error, not 128 KiB the broker buffers for an unauthenticated peer."""
    client = Client(Broker())
    client.conn.receive_data(PROTOCOL_HEADER)
    client.received()
    big = commands.Connection.StartOk(
        client_properties={"padding": "x" * 10_000}, mechanism="PLAIN", response="\0guest\0guest"
    )
    client.send(0, big)
    code, text, *_ = connection_error(client, answer=False)
    assert code == 501 and "frame_too_large" in text and ",4088}" in text
    # a Start-Ok that fits 4096 bytes is fine, and after Tune-Ok the negotiated size holds
    client = Client(Broker())
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(0, START_OK)
    client.send(0, commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    client.received()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="q" + "x" * 200, arguments={"a": "y" * 9000}))
    assert [type(m) for m in client.methods()] == [commands.Queue.DeclareOk]


def test_after_a_fatal_frame_error_nothing_more_is_parsed_and_the_close_times_out() -> None:
    """The stream is out of sync after a bad frame: like RabbitMQ (fatal_frame_error), the
    broker parses nothing that follows; without a Close-Ok it gives up after a grace period."""
    broker = Broker()
    client = connect(broker)
    advance(broker, 0.0, client)
    client.conn.receive_data(b"\x01\x00\x01\x00\x00\x00\x00\xff")
    assert [close_args(m) for m in client.methods()] == [
        (501, "FRAME_ERROR - invalid frame end octet 0xff", 0, 0)
    ]
    client.send(1, commands.Queue.Declare(queue="ignored"))
    client.send(0, commands.Connection.CloseOk())  # not parsed either
    assert client.received() == [] and not client.conn.should_close
    advance(broker, 1.0, client)  # the close timer starts
    advance(broker, 60.0, client)
    assert client.conn.should_close and client.conn.state is State.CLOSED
    assert "ignored" not in broker.vhosts["/"].queues
    assert_serves(broker)


# ---------------------------------------------------------------------------------------------
# After a channel error
# ---------------------------------------------------------------------------------------------
def test_closed_channel_ignores_everything_but_close_ok() -> None:
    broker = Broker()
    client = connect(broker, 1, 2, 3)
    declare(client, 2, "witness")
    client.send(1, commands.Queue.Declare(queue="missing", passive=True))
    [(channel, close)] = client.received()
    assert channel == 1 and (close.reply_code, close.reply_text) == (
        404,
        "NOT_FOUND - no queue 'missing' in vhost '/'",
    )
    # channel 1 is closing: all of this is ignored, not answered, not applied
    client.send(
        1,
        commands.Queue.Declare(queue="ignored"),
        commands.Basic.Qos(prefetch_count=1),
        *publish_frames("witness", b"ignored"),
        ContentBody(b"stray body"),
    )
    assert client.received() == []
    assert counts(client, 2, "witness") == (0, 0)  # the publish was dropped
    client.send(3, commands.Queue.Declare(queue="ignored", passive=True))
    assert channel_error(client, 3)[:2] == (404, "NOT_FOUND - no queue 'ignored' in vhost '/'")
    # a crossing Channel.Close is answered (rabbit_channel, state closing) ...
    crossing = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    rpc(client, 1, crossing, commands.Channel.CloseOk)
    # ... and Close-Ok completes the close; the number can be opened again
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(1)
    rpc(client, 1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


def test_channel_error_leaves_other_connections_alone() -> None:
    broker = Broker()
    client, bystander = connect(broker), connect(broker)
    declare(bystander, 1, "bystander-queue")
    client.send(1, commands.Queue.Declare(queue="absent", passive=True))
    assert channel_error(client, 1)[0] == 404
    bystander.send(1, *publish_frames("bystander-queue", b"fine"))
    bystander.send(1, commands.Basic.Get(queue="bystander-queue", no_ack=True))
    assert [m.body for m in deliveries(bystander.received())] == [b"fine"]


# ---------------------------------------------------------------------------------------------
# Channel.Flow and orderly closes
# ---------------------------------------------------------------------------------------------
def test_channel_flow_active_false_from_a_client_is_540_and_true_is_acknowledged() -> None:
    """rabbit_channel: a client cannot stop deliveries with channel.flow (Go's amqp091
    suite relies on the 540); active=true is answered with flow-ok."""
    broker = Broker()
    client = connect(broker)
    ok = rpc(client, 1, commands.Channel.Flow(active=True), commands.Channel.FlowOk)
    assert ok.active is True
    client.send(1, commands.Channel.Flow(active=False))
    assert connection_error(client) == (540, "NOT_IMPLEMENTED - active=false", 20, 20)
    assert_serves(broker)


def test_connection_close_from_the_client_is_answered_with_close_ok() -> None:
    broker = Broker()
    client = connect(broker)
    declare(client, 1, "", exclusive=True)
    close = commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    client.send(0, close)
    assert [(c, type(v)) for c, v in client.received()] == [(0, commands.Connection.CloseOk)]
    assert client.conn.state is State.CLOSED
    assert broker.connections == set()
    assert_serves(broker)


def test_after_the_clients_close_the_broker_reads_on_until_the_client_goes() -> None:
    """rabbit_reader keeps reading (and discarding) after Close-Ok: closing the socket while
    the client's earlier frames still arrive resets the connection (amqplib writes Close
    and then flushes queued publishes; Go's amqp091 closes concurrently)."""
    broker = Broker()
    client = connect(broker)
    declare(client, 1, "kept", durable=False)
    close = commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    client.send(0, close)
    client.send(1, *publish_frames("kept", b"after close"))  # still arriving: discarded
    assert [(c, type(v)) for c, v in client.received()] == [(0, commands.Connection.CloseOk)]
    assert not client.conn.should_close  # the socket stays open for the client to close
    other = connect(broker)
    assert counts(other, 1, "kept") == (0, 0)
    client.conn.connection_lost()  # the client closed its end
    assert client.conn.should_close


def test_a_closed_client_that_never_closes_its_socket_is_dropped_after_30_s() -> None:
    broker = Broker()
    client = connect(broker)
    advance(broker, 0.0, client)
    client.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    client.received()
    advance(broker, 29.0, client)
    assert not client.conn.should_close
    advance(broker, 30.0, client)
    assert client.conn.should_close


def test_the_linger_after_close_is_the_heartbeat_when_shorter() -> None:
    broker = Broker()
    client = tuned(broker, heartbeat=5)
    advance(broker, 0.0, client)
    client.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    client.received()
    advance(broker, 4.5, client)
    assert not client.conn.should_close
    advance(broker, 5.0, client)
    assert client.conn.should_close


def test_channel_close_from_the_client_is_answered_with_close_ok() -> None:
    client = connect(Broker())
    close = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    rpc(client, 1, close, commands.Channel.CloseOk)
    client.open_channel(1)


def test_broker_shutdown_sends_320_connection_forced_and_waits_for_close_ok() -> None:
    broker = Broker()
    client = connect(broker)
    client.conn.close_forced("shutdown")
    assert [close_args(m) for m in client.methods()] == [
        (320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", 0, 0)
    ]
    assert not client.conn.should_close
    client.send(0, commands.Connection.CloseOk())
    assert client.conn.should_close and client.received() == []


def test_method_between_header_and_body_names_the_body_as_rabbitmq_does() -> None:
    client = connect(Broker())
    publish, content, _body = publish_frames("q", b"abc")
    client.send(1, publish, content, commands.Basic.Qos(prefetch_count=1))
    code, text, *_ids = connection_error(client)
    assert (code, text) == (
        505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
    )
