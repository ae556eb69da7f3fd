"""One test per error code, over real sockets, with RabbitMQ 3.x's reply codes.

Soft errors (311-313, 403-406) close only the channel; hard ones (320, 5xx) close the whole
connection. pika is used wherever it can express the mistake; the raw client
(tests/integration/raw_client.py) sends what pika refuses to. Every test checks the reply
code, that the reply text names the object concerned, and that the broker keeps serving
(the same connection after a channel error, another connection after a connection error).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest
from tests.integration.raw_client import PROTOCOL_HEADER, RawClient

StartServer = Callable[..., AbstractContextManager[Server | NodeUnderTest]]
Blocking = pika.adapters.blocking_connection.BlockingConnection
BlockingChannel = pika.adapters.blocking_connection.BlockingChannel


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
@contextmanager
def pika_connection(port: int, **options: Any) -> Iterator[Blocking]:
    """A pika BlockingConnection that is closed when the block ends."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, **options))
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


def assert_broker_serves(port: int) -> None:
    """A fresh connection can still declare, publish and get: the broker survived."""
    with pika_connection(port) as conn:
        ch = conn.channel()
        name = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", name, b"still alive")
        method, _props, body = ch.basic_get(name, auto_ack=True)
        assert method is not None and body == b"still alive"


def assert_channel_usable(conn: Blocking) -> None:
    """The connection survived a channel error: it is open and a new channel works."""
    assert conn.is_open
    ch = conn.channel()
    name = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", name, b"ok")
    method, _props, body = ch.basic_get(name, auto_ack=True)
    assert method is not None and body == b"ok"


def channel_error(
    conn: Blocking, ch: BlockingChannel, action: Callable[[], Any], code: int, *words: str
) -> pika.exceptions.ChannelClosedByBroker:
    """Run ``action`` on channel ``ch`` and assert the broker closes ``ch`` with ``code`` and a
    reply text containing ``words``; then assert the connection is still usable.

    Asynchronous methods (basic.publish, basic.ack) get no reply, so a synchronous basic.qos
    on the same channel follows: the broker's Channel.Close reaches pika before any reply to
    it (and a closing channel ignores the qos anyway)."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action()
        ch.basic_qos(prefetch_count=0)
    error = info.value
    assert error.reply_code == code, error
    for word in words:
        assert word in error.reply_text, (word, error.reply_text)
    assert ch.is_closed
    assert_channel_usable(conn)
    return error


def connection_error(
    port: int, conn: Blocking, action: Callable[[], Any], code: int, *words: str
) -> None:
    """Run ``action`` and assert the broker closed the connection with ``code``."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        action()
        conn.process_data_events(time_limit=5)
    assert info.value.reply_code == code, info.value
    for word in words:
        assert word in info.value.reply_text, (word, info.value.reply_text)
    assert conn.is_closed
    assert_broker_serves(port)


def raw_connection_error(
    client: RawClient,
    port: int,
    code: int,
    *words: str,
    class_method: tuple[int, int] | None = None,
) -> commands.Connection.Close:
    """Expect Connection.Close ``code`` naming ``words``; answer it, then check the broker
    closed the socket and still serves other connections."""
    close = client.expect_connection_close(code)
    for word in words:
        assert word in close.reply_text, (word, close.reply_text)
    if class_method is not None:
        assert (close.class_id, close.method_id) == class_method, close.__dict__
    assert_broker_serves(port)
    return close


def raw_channel_error(client: RawClient, channel: int, code: int, *words: str) -> None:
    """Expect Channel.Close ``code`` naming ``words`` on ``channel``; answer it and check the
    connection (and the channel number) is usable again."""
    close = client.expect_channel_close(channel, code)
    for word in words:
        assert word in close.reply_text, (word, close.reply_text)
    client.open_channel(channel)
    client.rpc(channel, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


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
def test_wrong_protocol_header_is_answered_with_ours_and_closed(
    server: Server, header: bytes
) -> None:
    with RawClient.connect(server.port) as client:
        client.send_bytes(header)
        assert client.recv_until_closed() == PROTOCOL_HEADER
    assert_broker_serves(server.port)


def test_bad_password_is_403_access_refused_with_pika(server: Server) -> None:
    credentials = pika.PlainCredentials("guest", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", server.port, credentials=credentials)
        )
    assert "(403)" in str(info.value) and "ACCESS_REFUSED" in str(info.value)
    assert_broker_serves(server.port)


@pytest.mark.parametrize("user", ["guest", "nobody"])
def test_bad_login_is_403_and_names_the_mechanism(server: Server, user: str) -> None:
    with RawClient.connect(server.port) as client:
        client.start(user=user, password="wrong")
        close = raw_connection_error(client, server.port, 403, "ACCESS_REFUSED", "PLAIN")
        assert (close.class_id, close.method_id) == (10, 11)


def test_unknown_vhost_is_530_with_pika(server: Server) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", server.port, virtual_host="no-such-vhost")
        )
    assert "(530)" in str(info.value) and "no-such-vhost" in str(info.value)
    assert_broker_serves(server.port)


def test_unknown_vhost_is_530_not_allowed(server: Server) -> None:
    with RawClient.connect(server.port) as client:
        client.start()
        client.tune()
        client.send_method(0, commands.Connection.Open(virtual_host="no-such-vhost"))
        close = raw_connection_error(client, server.port, 530, "NOT_ALLOWED", "no-such-vhost")
        assert (close.class_id, close.method_id) == (10, 40)


@pytest.mark.parametrize("stage", ["nothing-sent", "after-header", "after-start-ok"])
def test_stalled_handshake_is_dropped_after_handshake_timeout(
    start_server: StartServer, stage: str
) -> None:
    with start_server(handshake_timeout=0.5, tick_interval=0.1) as srv:
        with RawClient.connect(srv.port) as client:
            began = time.monotonic()
            if stage == "after-header":
                client.send_bytes(PROTOCOL_HEADER)
                client.expect(commands.Connection.Start, channel=0)
            elif stage == "after-start-ok":
                client.start()
                client.expect(commands.Connection.Tune, channel=0)
            leftovers = client.read_until_closed(timeout=5)
            elapsed = time.monotonic() - began
        assert leftovers == []  # dropped silently, as RabbitMQ does
        assert 0.4 <= elapsed < 3.0, elapsed
        assert_broker_serves(srv.port)


# ---------------------------------------------------------------------------------------------
# Heartbeats
# ---------------------------------------------------------------------------------------------
def test_silent_client_is_dropped_after_two_missed_heartbeats(start_server: StartServer) -> None:
    with start_server(tick_interval=0.1) as srv, RawClient.open(srv.port, heartbeat=1) as client:
        began = time.monotonic()
        frames = client.read_until_closed(timeout=6)
        elapsed = time.monotonic() - began
        # the broker kept sending heartbeats, then dropped us without a Connection.Close
        assert frames and all(isinstance(f, Heartbeat) for _ch, f in frames), frames
        assert 1.5 <= elapsed <= 3.5, elapsed
        assert_broker_serves(srv.port)


def test_broker_sends_heartbeats_to_an_idle_client(start_server: StartServer) -> None:
    with start_server(tick_interval=0.1) as srv, RawClient.open(srv.port, heartbeat=1) as client:
        for _ in range(4):  # each within the negotiated interval (1 s), plus slack
            channel, frame = client.read_frame(timeout=1.5)
            assert isinstance(frame, Heartbeat) and channel == 0, frame
            client.send(0, Heartbeat())  # we stay alive
        client.open_channel(1)  # and the connection is still fine


def test_heartbeats_disabled_when_client_says_zero(start_server: StartServer) -> None:
    with (
        start_server(heartbeat=1, tick_interval=0.1) as srv,
        RawClient.open(srv.port, heartbeat=0) as client,
    ):
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=1.0)  # neither heartbeats (due every 0.5 s) nor a drop
        client.open_channel(1)


# ---------------------------------------------------------------------------------------------
# 404 NOT_FOUND (channel)
# ---------------------------------------------------------------------------------------------
def test_passive_declare_of_missing_queue_is_404(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection,
        channel,
        lambda: channel.queue_declare("missing-queue", passive=True),
        404,
        "NOT_FOUND",
        "missing-queue",
    )


def test_passive_declare_of_missing_exchange_is_404(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection,
        channel,
        lambda: channel.exchange_declare("missing-exchange", passive=True),
        404,
        "missing-exchange",
    )


def test_publish_to_missing_exchange_is_404(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection,
        channel,
        lambda: channel.basic_publish("missing-exchange", "rk", b"body"),
        404,
        "exchange 'missing-exchange'",
    )


def test_consume_from_missing_queue_is_404(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection,
        channel,
        lambda: channel.basic_consume("missing-queue", lambda *_: None),
        404,
        "queue 'missing-queue'",
    )


@pytest.mark.parametrize("method", ["get", "bind-queue", "bind-exchange", "purge"])
def test_other_methods_on_missing_objects_are_404(
    connection: Blocking, channel: Any, method: str
) -> None:
    channel.queue_declare("present-queue")
    actions = {
        "get": lambda: channel.basic_get("missing-queue"),
        "bind-queue": lambda: channel.queue_bind("missing-queue", "amq.direct", "rk"),
        "bind-exchange": lambda: channel.queue_bind("present-queue", "missing-exchange", "rk"),
        "purge": lambda: channel.queue_purge("missing-queue"),
    }
    missing = "missing-exchange" if method == "bind-exchange" else "missing-queue"
    channel_error(connection, channel, actions[method], 404, "NOT_FOUND", missing)


@pytest.mark.parametrize(
    ("queue", "exchange"),
    [
        ("missing-queue", "amq.direct"),
        ("present-queue", "missing-exchange"),
        ("present-queue", "amq.direct"),
    ],
    ids=["missing-queue", "missing-exchange", "missing-binding"],
)
def test_queue_unbind_of_missing_objects_is_not_an_error(
    connection: Blocking, channel: Any, queue: str, exchange: str
) -> None:
    """RabbitMQ 3.x (rabbit_binding:remove, absent_errs_only): unbinding is idempotent, a
    missing queue, exchange or binding is answered with Unbind-Ok."""
    channel.queue_declare("present-queue")
    channel.queue_unbind(queue, exchange, "rk")
    assert channel.is_open
    assert_channel_usable(connection)


@pytest.mark.parametrize(
    ("destination", "source"),
    [("missing-exchange", "amq.direct"), ("amq.fanout", "missing-exchange")],
    ids=["missing-destination", "missing-source"],
)
def test_exchange_unbind_of_missing_exchanges_is_not_an_error(
    channel: Any, destination: str, source: str
) -> None:
    channel.exchange_unbind(destination, source, "rk")
    assert channel.is_open


# ---------------------------------------------------------------------------------------------
# 405 RESOURCE_LOCKED (channel)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["declare", "passive-declare", "consume", "purge", "delete"])
def test_exclusive_queue_is_locked_to_other_connections(
    server: Server, connection: Blocking, channel: Any, action: str
) -> None:
    channel.queue_declare("locked-queue", exclusive=True)
    with pika_connection(server.port) as other:
        ch = other.channel()
        actions = {
            "declare": lambda: ch.queue_declare("locked-queue", exclusive=True),
            "passive-declare": lambda: ch.queue_declare("locked-queue", passive=True),
            "consume": lambda: ch.basic_consume("locked-queue", lambda *_: None),
            "purge": lambda: ch.queue_purge("locked-queue"),
            "delete": lambda: ch.queue_delete("locked-queue"),
        }
        channel_error(other, ch, actions[action], 405, "RESOURCE_LOCKED", "locked-queue")
    # the owner still has its queue
    assert channel.queue_declare("locked-queue", passive=True).method.queue == "locked-queue"


@pytest.mark.parametrize("first_exclusive", [True, False])
def test_redeclare_with_other_exclusive_flag_is_405(
    connection: Blocking, channel: Any, first_exclusive: bool
) -> None:
    """rabbit_amqqueue:assert_equivalence checks exclusivity strictly, before the other
    flags: a mismatch is 405 RESOURCE_LOCKED, not 406 (even on the owning connection)."""
    channel.queue_declare("exclusive-flag-queue", exclusive=first_exclusive)
    channel_error(
        connection,
        channel,
        lambda: channel.queue_declare(
            "exclusive-flag-queue", exclusive=not first_exclusive, durable=True
        ),
        405,
        "RESOURCE_LOCKED",
        "exclusive-flag-queue",
    )


# ---------------------------------------------------------------------------------------------
# 406 PRECONDITION_FAILED (channel)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("first", "second", "arg"),
    [
        ({"durable": False}, {"durable": True}, "durable"),
        ({"auto_delete": False}, {"auto_delete": True}, "auto_delete"),
        ({"arguments": {"x-max-length": 10}}, {"arguments": {"x-max-length": 20}}, "x-max-length"),
    ],
)
def test_redeclare_queue_with_different_flags_is_406(
    connection: Blocking, channel: Any, first: dict[str, Any], second: dict[str, Any], arg: str
) -> None:
    channel.queue_declare("flagged-queue", **first)
    error = channel_error(
        connection,
        channel,
        lambda: channel.queue_declare("flagged-queue", **second),
        406,
        "PRECONDITION_FAILED",
        f"inequivalent arg '{arg}'",
        "queue 'flagged-queue'",
    )
    assert "vhost '/'" in error.reply_text


@pytest.mark.parametrize(
    ("first", "second", "arg"),
    [
        ({"exchange_type": "direct"}, {"exchange_type": "fanout"}, "type"),
        ({"durable": False}, {"durable": True}, "durable"),
        ({"internal": False}, {"internal": True}, "internal"),
    ],
)
def test_redeclare_exchange_with_different_type_or_flags_is_406(
    connection: Blocking, channel: Any, first: dict[str, Any], second: dict[str, Any], arg: str
) -> None:
    channel.exchange_declare("flagged-exchange", **first)
    channel_error(
        connection,
        channel,
        lambda: channel.exchange_declare("flagged-exchange", **second),
        406,
        f"inequivalent arg '{arg}'",
        "exchange 'flagged-exchange'",
    )


def test_queue_delete_if_unused_with_consumer_is_406(connection: Blocking, channel: Any) -> None:
    channel.queue_declare("busy-queue")
    consumer_channel = connection.channel()
    consumer_channel.basic_consume("busy-queue", lambda *_: None)
    channel_error(
        connection,
        channel,
        lambda: channel.queue_delete("busy-queue", if_unused=True),
        406,
        "busy-queue",
    )
    # still there, still consumed
    assert connection.channel().queue_declare("busy-queue", passive=True).method.consumer_count == 1


def test_queue_delete_if_empty_with_messages_is_406(connection: Blocking, channel: Any) -> None:
    channel.queue_declare("full-queue")
    channel.basic_publish("", "full-queue", b"m")
    channel_error(
        connection,
        channel,
        lambda: channel.queue_delete("full-queue", if_empty=True),
        406,
        "full-queue",
    )
    assert connection.channel().queue_declare("full-queue", passive=True).method.message_count == 1


def test_exchange_delete_if_unused_with_binding_is_406(connection: Blocking, channel: Any) -> None:
    channel.exchange_declare("bound-exchange", "direct")
    channel.queue_declare("bound-queue")
    channel.queue_bind("bound-queue", "bound-exchange", "rk")
    channel_error(
        connection,
        channel,
        lambda: channel.exchange_delete("bound-exchange", if_unused=True),
        406,
        "bound-exchange",
    )
    connection.channel().exchange_declare("bound-exchange", passive=True)


def test_ack_of_unknown_delivery_tag_is_406(connection: Blocking, channel: Any) -> None:
    channel.queue_declare("ack-queue")
    channel.basic_publish("", "ack-queue", b"m")
    method, _props, _body = channel.basic_get("ack-queue")
    assert method is not None
    channel.basic_ack(method.delivery_tag)

    channel_error(
        connection,
        channel,
        lambda: channel.basic_ack(method.delivery_tag),
        406,
        f"unknown delivery tag {method.delivery_tag}",
    )
    # the first ack counted: the message is gone
    assert connection.channel().queue_declare("ack-queue", passive=True).method.message_count == 0


def test_confirm_select_on_tx_channel_is_406(connection: Blocking, channel: Any) -> None:
    channel.tx_select()
    channel_error(connection, channel, channel.confirm_delivery, 406, "tx", "confirm")


def test_tx_select_on_confirm_channel_is_406(connection: Blocking, channel: Any) -> None:
    channel.confirm_delivery()
    channel_error(connection, channel, channel.tx_select, 406, "confirm", "tx")


@pytest.mark.parametrize("method", ["commit", "rollback"])
def test_tx_commit_or_rollback_without_select_is_406(
    connection: Blocking, channel: Any, method: str
) -> None:
    action = channel.tx_commit if method == "commit" else channel.tx_rollback
    channel_error(connection, channel, action, 406, "not transactional")


def test_message_larger_than_max_message_size_is_406(start_server: StartServer) -> None:
    with start_server(max_message_size=1000) as srv, pika_connection(srv.port) as conn:
        ch = conn.channel()
        ch.queue_declare("size-queue")
        channel_error(
            conn, ch, lambda: ch.basic_publish("", "size-queue", b"x" * 1001), 406, "1001", "1000"
        )
        # the limit itself is fine, and nothing of the refused message was enqueued
        ch2 = conn.channel()
        ch2.basic_publish("", "size-queue", b"y" * 1000)
        method, _props, body = ch2.basic_get("size-queue", auto_ack=True)
        assert method is not None and body == b"y" * 1000
        assert method.message_count == 0


def test_oversized_message_body_frames_are_ignored_after_the_406(
    start_server: StartServer,
) -> None:
    """The header announces too big a body: the channel closes at once and the body frames
    that follow are dropped, not taken as a protocol error on the connection."""
    with start_server(max_message_size=1000) as srv, RawClient.open(srv.port) as client:
        client.open_channel(1)
        client.open_channel(2)
        client.publish(1, b"z" * 5000, routing_key="anything")
        raw_channel_error(client, 1, 406, "5000", "1000")
        client.rpc(2, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


# ---------------------------------------------------------------------------------------------
# 403 ACCESS_REFUSED (channel)
# ---------------------------------------------------------------------------------------------
def test_declare_queue_with_amq_prefix_is_403(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection,
        channel,
        lambda: channel.queue_declare("amq.mine"),
        403,
        "ACCESS_REFUSED",
        "amq.mine",
    )


def test_declare_exchange_with_amq_prefix_is_403(connection: Blocking, channel: Any) -> None:
    channel_error(
        connection, channel, lambda: channel.exchange_declare("amq.mine", "direct"), 403, "amq.mine"
    )


def test_publish_to_internal_exchange_is_403(connection: Blocking, channel: Any) -> None:
    channel.exchange_declare("internal-exchange", "fanout", internal=True)
    channel_error(
        connection,
        channel,
        lambda: channel.basic_publish("internal-exchange", "", b"m"),
        403,
        "internal exchange 'internal-exchange'",
    )


def test_bind_to_default_exchange_is_403(connection: Blocking, channel: Any) -> None:
    channel.queue_declare("bind-queue")
    channel_error(
        connection,
        channel,
        lambda: channel.queue_bind("bind-queue", "", "rk"),
        403,
        "default exchange",
    )


@pytest.mark.parametrize("queue", ["bind-queue", "missing-queue"])
def test_unbind_from_default_exchange_is_403(
    connection: Blocking, channel: Any, queue: str
) -> None:
    channel.queue_declare("bind-queue")
    channel_error(
        connection,
        channel,
        lambda: channel.queue_unbind(queue, "", "rk"),
        403,
        "default exchange",
    )


def test_exclusive_consume_on_queue_with_consumers_is_403(
    connection: Blocking, channel: Any
) -> None:
    channel.queue_declare("shared-queue")
    channel.basic_consume("shared-queue", lambda *_: None)
    other = connection.channel()
    channel_error(
        connection,
        other,
        lambda: other.basic_consume("shared-queue", lambda *_: None, exclusive=True),
        403,
        "queue 'shared-queue'",
        "exclusive use",
    )


def test_consume_on_queue_with_exclusive_consumer_is_403(
    connection: Blocking, channel: Any
) -> None:
    channel.queue_declare("owned-queue")
    channel.basic_consume("owned-queue", lambda *_: None, exclusive=True)
    other = connection.channel()
    channel_error(
        connection,
        other,
        lambda: other.basic_consume("owned-queue", lambda *_: None),
        403,
        "owned-queue",
    )


# ---------------------------------------------------------------------------------------------
# 530 NOT_ALLOWED (connection)
# ---------------------------------------------------------------------------------------------
def test_duplicate_consumer_tag_is_530_and_closes_the_connection(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(queue="tag-queue"), commands.Queue.DeclareOk)
        consume = commands.Basic.Consume(queue="tag-queue", consumer_tag="my-tag")
        client.rpc(1, consume, commands.Basic.ConsumeOk)
        client.send_method(1, consume)
        raw_connection_error(
            client, server.port, 530, "NOT_ALLOWED", "my-tag", class_method=(60, 20)
        )


def test_channel_max_limits_how_many_channels_are_open(server: Server) -> None:
    """rabbit_reader:create_channel: any channel number, at most channel_max open at once."""
    with RawClient.open(server.port, channel_max=2) as client:
        client.open_channel(65535)
        client.open_channel(6)
        client.send_method(7, commands.Channel.Open())
        raw_connection_error(
            client,
            server.port,
            530,
            "number of channels opened (2)",
            "channel_max (2)",
            class_method=(0, 0),
        )


def test_channel_max_above_server_limit_is_530(start_server: StartServer) -> None:
    with start_server(channel_max=10) as srv, RawClient.connect(srv.port) as client:
        client.start()
        client.tune(channel_max=11)
        raw_connection_error(client, srv.port, 530, "channel_max", "10")


# ---------------------------------------------------------------------------------------------
# 540 NOT_IMPLEMENTED (connection)
# ---------------------------------------------------------------------------------------------
def test_publish_immediate_is_540_and_closes_the_connection(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.publish(1, b"now!", routing_key="q", immediate=True)
        raw_connection_error(
            client, server.port, 540, "NOT_IMPLEMENTED", "immediate", class_method=(60, 40)
        )


# ---------------------------------------------------------------------------------------------
# 501 FRAME_ERROR (connection)
# ---------------------------------------------------------------------------------------------
def test_bad_frame_end_octet_is_501(server: Server) -> None:
    with RawClient.open(server.port) as client:
        raw = pamqp_frame.marshal(commands.Channel.Open(), 1)
        client.send_bytes(raw[:-1] + b"\x00")
        close = client.expect_connection_close(501, answer=False)
        assert "FRAME_ERROR" in close.reply_text and "frame end" in close.reply_text
        assert_broker_serves(server.port)


def test_oversized_frame_is_501_before_its_payload_arrives(server: Server) -> None:
    with RawClient.open(server.port, frame_max=4096) as client:
        client.open_channel(1)
        # only the 7-byte frame header of a 10000-byte body frame: the broker must not wait
        client.send_bytes(struct.pack(">BHI", 3, 1, 10000))
        close = client.expect_connection_close(501, answer=False)
        assert close.reply_text == (
            "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,10000,4088}"
        )
        assert_broker_serves(server.port)


def test_after_a_fatal_frame_error_the_broker_reads_nothing_and_drops_the_socket(
    start_server: StartServer,
) -> None:
    """The stream is out of sync after a bad frame: like RabbitMQ (fatal_frame_error), the
    broker does not parse what follows and closes the socket after its grace period."""
    with start_server(tick_interval=0.1) as srv, RawClient.open(srv.port) as client:
        client.send_bytes(b"\x01\x00\x01\x00\x00\x00\x00\xff")
        client.expect_connection_close(501, answer=False)
        client.send(0, commands.Connection.CloseOk())
        began = time.monotonic()
        assert client.read_until_closed(timeout=6) == []
        assert time.monotonic() - began < 5


def test_unknown_frame_type_is_501(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.send_bytes(b"\x09\x00\x00\x00\x00\x00\x00\xce")
        raw_connection_error(client, server.port, 501, "frame type 9")


# ---------------------------------------------------------------------------------------------
# 502 SYNTAX_ERROR (connection)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("index", "arguments", "name"),
    [
        ((50, 10), b"\x00\x00\x20short", "queue.declare"),  # queue name longer than the frame
        ((60, 40), b"\x00\x00\x05amq.d", "basic.publish"),  # fast path: routing key missing
        ((40, 10), b"\x00\x00", "exchange.declare"),  # everything after the ticket missing
    ],
    ids=["queue.declare", "basic.publish", "exchange.declare"],
)
def test_malformed_method_arguments_are_502(
    server: Server, index: tuple[int, int], arguments: bytes, name: str
) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        payload = struct.pack(">HH", *index) + arguments
        client.send_bytes(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
        raw_connection_error(client, server.port, 502, "SYNTAX_ERROR", name, class_method=index)


# ---------------------------------------------------------------------------------------------
# 503 COMMAND_INVALID (connection)
# ---------------------------------------------------------------------------------------------
def test_unknown_exchange_type_is_503_with_pika(server: Server) -> None:
    with pika_connection(server.port) as conn:
        ch = conn.channel()
        connection_error(
            server.port,
            conn,
            lambda: ch.exchange_declare("typed-exchange", exchange_type="no-such-type"),
            503,
            "COMMAND_INVALID",
            "no-such-type",
        )


@pytest.mark.parametrize("channel", [0, 1])
def test_unknown_method_is_503(server: Server, channel: int) -> None:
    with RawClient.open(server.port) as client:
        if channel:
            client.open_channel(channel)
        payload = struct.pack(">HH", 60, 999)
        client.send_bytes(struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce")
        raw_connection_error(client, server.port, 503, "60.999")


# ---------------------------------------------------------------------------------------------
# 504 CHANNEL_ERROR (connection)
# ---------------------------------------------------------------------------------------------
def test_method_on_unopened_channel_is_504(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.send_method(3, commands.Basic.Qos(prefetch_count=1))
        raw_connection_error(client, server.port, 504, "CHANNEL_ERROR", "channel.open")


def test_second_channel_open_is_504(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send_method(1, commands.Channel.Open())
        raw_connection_error(
            client, server.port, 504, "second 'channel.open'", class_method=(20, 10)
        )


def test_method_out_of_handshake_order_is_504(server: Server) -> None:
    with RawClient.connect(server.port) as client:
        client.start()
        client.expect(commands.Connection.Tune, channel=0)
        client.send_method(0, commands.Connection.Open(virtual_host="/"))  # Tune-Ok skipped
        raw_connection_error(
            client, server.port, 504, "unexpected method", "connection.open", class_method=(10, 40)
        )


@pytest.mark.parametrize(
    "method",
    [
        commands.Connection.Open(virtual_host="/"),
        commands.Connection.TuneOk(channel_max=10, frame_max=4096, heartbeat=0),
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    ],
    ids=["open", "tune-ok", "start-ok"],
)
def test_handshake_method_on_an_open_connection_is_504(server: Server, method: Any) -> None:
    """rabbit_reader: "unexpected method in connection state running" — the handshake is
    not re-run (no second Open-Ok, no renegotiation, no new Tune)."""
    with RawClient.open(server.port) as client:
        client.send_method(0, method)
        close = raw_connection_error(client, server.port, 504, "unexpected method")
        assert (close.class_id, close.method_id) == (method.index >> 16, method.index & 0xFFFF)


# ---------------------------------------------------------------------------------------------
# 505 UNEXPECTED_FRAME (connection)
# ---------------------------------------------------------------------------------------------
def test_body_frame_without_publish_is_505(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send(1, ContentBody(b"orphan"))
        raw_connection_error(client, server.port, 505, "UNEXPECTED_FRAME", "body")


def test_header_frame_without_publish_is_505(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send(1, ContentHeader(0, 3, commands.Basic.Properties()))
        raw_connection_error(client, server.port, 505, "UNEXPECTED_FRAME", "header")


def test_method_between_publish_and_header_is_505(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send(
            1,
            commands.Basic.Publish(exchange="", routing_key="q"),
            commands.Queue.Declare(queue="q"),
        )
        raw_connection_error(client, server.port, 505, "content header", class_method=(50, 10))


def test_method_between_header_and_body_is_505(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        publish, header, _body = client.publish_frames(1, b"abc", routing_key="q")
        client.send(1, publish, header, commands.Basic.Qos(prefetch_count=1))
        raw_connection_error(client, server.port, 505, "UNEXPECTED_FRAME")


@pytest.mark.parametrize("kind", ["header", "body"])
def test_content_frame_on_channel_zero_is_505(server: Server, kind: str) -> None:
    with RawClient.open(server.port) as client:
        value = ContentHeader(0, 3, commands.Basic.Properties()) if kind == "header" else None
        client.send(0, value if value is not None else ContentBody(b"abc"))
        raw_connection_error(client, server.port, 505, "UNEXPECTED_FRAME", "channel 0")


@pytest.mark.parametrize("kind", ["header", "body"])
def test_content_frame_on_unopened_channel_is_505(server: Server, kind: str) -> None:
    with RawClient.open(server.port) as client:
        value = ContentHeader(0, 3, commands.Basic.Properties()) if kind == "header" else None
        client.send(7, value if value is not None else ContentBody(b"abc"))
        raw_connection_error(client, server.port, 505, "UNEXPECTED_FRAME", "channel 7")


def test_channel_frame_before_connection_open_is_505(server: Server) -> None:
    with RawClient.connect(server.port) as client:
        client.start()
        client.tune()
        client.send_method(1, commands.Channel.Open())  # Connection.Open skipped
        raw_connection_error(client, server.port, 505, "channel 1", "connection.open")


def test_heartbeat_on_nonzero_channel_is_505(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send_bytes(b"\x08\x00\x01\x00\x00\x00\x00\xce")
        raw_connection_error(client, server.port, 505, "heartbeat", "channel 1")


# ---------------------------------------------------------------------------------------------
# After a channel error
# ---------------------------------------------------------------------------------------------
def test_closed_channel_ignores_everything_but_close_ok(server: Server) -> None:
    with RawClient.open(server.port) as client:
        for number in (1, 2, 3):
            client.open_channel(number)
        client.rpc(2, commands.Queue.Declare(queue="witness"), commands.Queue.DeclareOk)
        client.send_method(1, commands.Queue.Declare(queue="missing", passive=True))
        close = client.expect(commands.Channel.Close, channel=1)
        assert close.reply_code == 404 and "missing" in close.reply_text

        # channel 1 is closing: all of this must be ignored, not answered, not applied
        client.send(
            1,
            commands.Queue.Declare(queue="ignored"),
            commands.Basic.Qos(prefetch_count=1),
            *client.publish_frames(1, b"ignored", routing_key="witness"),
            ContentBody(b"stray body"),
        )
        # channel 2 is served meanwhile, and nothing arrives for channel 1 before its reply
        ok = client.rpc(
            2, commands.Queue.Declare(queue="witness", passive=True), commands.Queue.DeclareOk
        )
        assert ok.message_count == 0  # the publish on channel 1 was dropped
        client.send_method(3, commands.Queue.Declare(queue="ignored", passive=True))
        raw_channel_error(client, 3, 404, "ignored")  # the declare on channel 1 was dropped

        # a crossing Channel.Close is answered (rabbit_channel, state closing) ...
        crossing = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        client.rpc(1, crossing, commands.Channel.CloseOk)
        # ... and Close-Ok completes the close; the number can be opened again
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)
        client.rpc(1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)
    assert_broker_serves(server.port)


def test_channel_error_leaves_other_connections_alone(server: Server) -> None:
    with pika_connection(server.port) as conn, pika_connection(server.port) as bystander:
        watched = bystander.channel()
        watched.queue_declare("bystander-queue")
        ch = conn.channel()
        channel_error(conn, ch, lambda: ch.queue_declare("absent", passive=True), 404, "absent")
        watched.basic_publish("", "bystander-queue", b"fine")
        method, _props, body = watched.basic_get("bystander-queue", auto_ack=True)
        assert method is not None and body == b"fine"


# ---------------------------------------------------------------------------------------------
# Channel.Flow
# ---------------------------------------------------------------------------------------------
def test_channel_flow_active_false_from_a_client_is_540(server: Server) -> None:
    """rabbit_channel: channel.flow(active=false) from a client is NOT_IMPLEMENTED (Go's
    amqp091 test suite relies on that reply); active=true is acknowledged."""
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        ok = client.rpc(1, commands.Channel.Flow(active=True), commands.Channel.FlowOk)
        assert ok.active is True
        client.send_method(1, commands.Channel.Flow(active=False))
        close = raw_connection_error(client, server.port, 540, class_method=(20, 20))
        assert close.reply_text == "NOT_IMPLEMENTED - active=false"


# ---------------------------------------------------------------------------------------------
# Orderly closes
# ---------------------------------------------------------------------------------------------
def test_connection_close_from_client_is_answered_with_close_ok(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send_method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.expect(commands.Connection.CloseOk, channel=0)
        # like RabbitMQ, the broker leaves closing the socket to the client (it waits up
        # to 30 s for it): once we close our side, it closes too
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)
        client.sock.shutdown(socket.SHUT_WR)
        assert client.read_until_closed() == []
    assert_broker_serves(server.port)


def test_channel_close_from_client_is_answered_with_close_ok(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.rpc(
            1,
            commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
            commands.Channel.CloseOk,
        )
        client.open_channel(1)


def test_broker_shutdown_sends_320_connection_forced(start_server: StartServer) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool, ExitStack() as stack:
        with start_server() as srv:
            client = stack.enter_context(RawClient.open(srv.port))
            client.open_channel(1)
            # the client answers Close-Ok from another thread while the server shuts down
            future = pool.submit(client.expect_connection_close, 320, 10.0)
            began = time.monotonic()
        took = time.monotonic() - began
        close = future.result(timeout=10)
    assert "CONNECTION_FORCED" in close.reply_text and "shutdown" in close.reply_text
    assert took < 1.5, took  # our Close-Ok let the broker finish without its grace period
